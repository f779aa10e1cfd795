"""django-tasks-db's worker, plus delivery lanes and the sweeps: ``manage.py db_worker`` runs them all.

Listed before django_tasks_db in INSTALLED_APPS, so this command is the one Django runs. It
serves every queue by default: ``apply`` (``moderation.review.apply``), ``start``
(``moderation.review.starts``, lowest priority), ``deployments``
(``moderation.review.deployments``) and ``default`` (webhook deliveries).

Besides the main loop (one task at a time, any queue, oldest first) it runs ``APPLY_LANES``
apply-only loops and ``WEBHOOK_LANES`` delivery-only loops (``--no-delivery-lane`` turns those
off), so neither kind of task waits behind the other; the resume lock keeps two lanes off one
graph thread. Every loop is a ``SteadyWorker`` (``moderation.core.taskqueue``): a lost database
connection does not end it. Idle loops sleep until NOTIFY on PostgreSQL, poll on SQLite. A
delivery in flight when the worker is stopped is finished before the process exits.

Threads beside the loops: the heartbeat (``moderation.records.workers``), the sweeps (tasks a
killed worker left undone: leases run out, unapplied decisions, unstarted items), deadlines
(``moderation.review.deadlines``) and deployment discovery. Metrics are served on the first
free port from ``METRICS_WORKER_PORT``. Why and measurements: contributors/worker-throughput.md.
"""

import logging
import os
import threading
import time
from argparse import BooleanOptionalAction
from datetime import datetime

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.utils import timezone
from django.utils.autoreload import DJANGO_AUTORELOAD_ENV, run_with_reloader

from moderation.core.taskqueue import QueueLane, SteadyWorker, TaskWake
from moderation.core.tasksdb import DbWorkerCommand
from moderation.core.tasksdb import worker_logger as package_logger
from moderation.delivery.sending import DELIVERY_QUEUE, deliveries_sweep
from moderation.records.events import push_loop_start
from moderation.records.metrics import MetricsPortsBusy, metrics_worker_serve
from moderation.records.workers import worker_beat, worker_gone
from moderation.review.apply import APPLY_QUEUE, applies_sweep
from moderation.review.deadlines import deadlines_sweep
from moderation.review.deployments import deployments_sweep
from moderation.review.starts import starts_sweep
from reviewqueue.heap import heap_freeze

logger = logging.getLogger("moderation.worker")
# Seconds an idle delivery lane other than the first waits between polls.
SPARE_LANE_INTERVAL = 0.5


class Command(DbWorkerCommand):
    help = DbWorkerCommand.help + "; every queue by default; and queue again what a killed worker left undone"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.set_defaults(queue_name="*")
        parser.add_argument(
            "--delivery-lane",
            action=BooleanOptionalAction,
            default=True,
            help="Also run WEBHOOK_LANES loops that take webhook deliveries only, so none waits behind graph work "
            "(when this worker serves deliveries and other queues; default: on)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=settings.METRICS_WORKER_PORT,
            help="Serve this worker's Prometheus series on METRICS_WORKER_ADDR (loopback) at this port "
            "(default: METRICS_WORKER_PORT; 0: not served)",
        )

    def handle(self, *args, **options):
        if options["reload"] and os.environ.get(DJANGO_AUTORELOAD_ENV) != "true":
            return super().handle(*args, **options)  # the reloader's parent only restarts its child
        # As the servers do (reviewqueue.heap): full collections skip the start-up heap (measured
        # over 300 applies: median full-collection pause 55 -> 34 ms, collection time 363 -> 268 ms).
        heap_freeze()
        _connections_keep()
        metrics_port = self._metrics_serve(options["metrics_port"])
        worker_id = options["worker_id"]
        beats_stop = threading.Event()
        beats = threading.Thread(
            target=_beat_until, name="worker-beat", daemon=True, args=(beats_stop, worker_id, metrics_port, timezone.now())
        )
        beats.start()
        threading.Thread(
            target=_sweep_forever,
            name="worker-sweep",
            daemon=True,
            args=((applies_sweep, starts_sweep, deliveries_sweep), settings.WEBHOOK_SWEEP_INTERVAL),
        ).start()
        threading.Thread(
            target=_sweep_forever, name="deadline-sweep", daemon=True, args=((deadlines_sweep,), settings.DEADLINE_SWEEP_INTERVAL)
        ).start()
        threading.Thread(
            target=_sweep_forever,
            name="langgraph-sweep",
            daemon=True,
            args=((deployments_sweep,), settings.LANGGRAPH_SWEEP_INTERVAL),
        ).start()
        self.configure_logging(options["verbosity"])  # before the lane starts, so its start is logged too
        if not settings.LIVE_RELAY:
            push_loop_start()
        # A batch run drains the queue and exits: it polls, and listens for nothing.
        wake = TaskWake() if options["batch"] else TaskWake().start()
        lanes = _delivery_lanes_start(options, wake) if _delivery_lane_wanted(options) else []
        # A worker of applies alone has lanes too: its main loop is one apply at a time.
        lanes += _apply_lanes_start(options, wake) if _lanes_wanted(options, APPLY_QUEUE, alone_too=True) else []
        try:
            return self._main_loop_run(options, wake)
        finally:
            for lane in lanes:
                # Not daemon threads: the interpreter waits for their deliveries in flight at exit.
                lane.running = False
            beats_stop.set()
            beats.join()  # no beat after the row is gone: this worker is not alive any more
            try:
                worker_gone(worker_id=worker_id)
            except DatabaseError as exc:  # stopping while the database is away: presumed gone after the grace
                logger.warning("worker heartbeat not removed (%s); it ages out in %s s", exc, settings.WORKER_HEARTBEAT_GRACE)

    def _metrics_serve(self, base: int) -> int:
        """Serve this worker's series on the first free port from ``base`` (0: not served); the port, or 0."""
        if not base:
            return 0
        try:
            port = metrics_worker_serve(base=base, tries=settings.METRICS_WORKER_PORTS, addr=settings.METRICS_WORKER_ADDR)
        except MetricsPortsBusy as exc:
            raise CommandError(str(exc)) from None
        logger.info("metrics served on %s:%d", settings.METRICS_WORKER_ADDR, port)
        return port

    def _main_loop_run(self, options: dict, wake: TaskWake) -> None:
        """The package's ``handle`` (which builds its own ``Worker``), with our loop (``_main_loop``)."""
        reload = options["reload"] and not options["batch"]
        worker = _main_loop(options, wake)
        worker.configure_signals()
        if reload:
            run_with_reloader(worker.run)
        else:
            worker.run()


def _main_loop(options: dict, wake: TaskWake) -> SteadyWorker:
    """The loop taking any task: one that sleeps until a task is queued (a ``QueueLane``) when the wake
    listens (PostgreSQL) and the worker runs for good, else the package's, polling every ``--interval``."""
    queue_names = options["queue_name"].split(",")
    excluded = options["exclude_queues"].split(",") if options["exclude_queues"] else []
    if excluded and "*" not in queue_names:
        raise CommandError("--exclude-queues can only be used with --queue-name=*")
    loop = dict(
        queue_names=queue_names,
        batch=options["batch"],
        backend_name=options["backend_name"],
        startup_delay=options["startup_delay"],
        max_tasks=options["max_tasks"],
        worker_id=options["worker_id"],
        excluded_queue_names=excluded,
    )
    if not wake.listening or options["batch"]:
        return SteadyWorker(interval=options["interval"], **loop)
    # The package's start line, which operators' tools (and the tests) wait for.
    package_logger.info("Starting worker worker_id=%s queues=%s", options["worker_id"], ",".join(queue_names))
    return QueueLane(wake=wake, interval=settings.WORKER_IDLE_POLL, **loop)


def _delivery_lane_wanted(options: dict) -> bool:
    return options["delivery_lane"] and _lanes_wanted(options, DELIVERY_QUEUE)


def _lanes_wanted(options: dict, queue: str, *, alone_too: bool = False) -> bool:
    """Lanes for ``queue`` beside the main loop: when this worker runs for good and serves it among other
    queues (or, ``alone_too``, by itself)."""
    if options["batch"] or options["max_tasks"] is not None:
        return False
    queues = set(options["queue_name"].split(","))
    excluded = set(filter(None, options["exclude_queues"].split(",")))
    if "*" in queues:
        return queue not in excluded
    return queue in queues and (alone_too or len(queues) > 1)


def _idle_poll(options: dict, wake: TaskWake, *, at_least: float = 0.0) -> float:
    """Seconds an idle loop waits before it polls: ``WORKER_IDLE_POLL`` when queued tasks wake it, else
    the ``--interval`` (or ``at_least``)."""
    return settings.WORKER_IDLE_POLL if wake.listening else max(options["interval"], at_least)


def _apply_lanes_start(options: dict, wake: TaskWake) -> list[SteadyWorker]:
    if not settings.APPLY_LANES:
        return []
    lanes = [
        QueueLane(
            wake=wake,
            queue_names=[APPLY_QUEUE],
            excluded_queue_names=[],
            batch=False,
            # On SQLite (no wake-ups), a second at most, however short the main loop's interval.
            interval=_idle_poll(options, wake, at_least=1.0),
            backend_name=options["backend_name"],
            startup_delay=False,
            max_tasks=None,
            worker_id=f"{options['worker_id']}-applies-{n}",
        )
        for n in range(settings.APPLY_LANES)
    ]
    for n, lane in enumerate(lanes):
        threading.Thread(target=lane.run, name=f"apply-lane-{n}").start()
    return lanes


def _delivery_lanes_start(options: dict, wake: TaskWake) -> list[SteadyWorker]:
    # An idle poll is a short exclusive transaction on SQLite: the first lane polls as often as
    # the main loop, the others (needed only while it is busy) less often.
    lanes = [
        QueueLane(
            wake=wake,
            queue_names=[DELIVERY_QUEUE],
            excluded_queue_names=[],
            batch=False,
            interval=_idle_poll(options, wake, at_least=0.0 if n == 0 else SPARE_LANE_INTERVAL),
            backend_name=options["backend_name"],
            startup_delay=False,
            max_tasks=None,
            worker_id=f"{options['worker_id']}-deliveries-{n}",  # a JSON list entry: no column limits its length
        )
        for n in range(settings.WEBHOOK_LANES)
    ]
    for n, lane in enumerate(lanes):
        threading.Thread(target=lane.run, name=f"delivery-lane-{n}").start()
    return lanes


def _connections_keep() -> None:
    """Keep each thread's database connection between its polls, unless a pool already lends them.

    Django's default (``CONN_MAX_AGE`` 0, right for requests on ASGI threads) closed the
    connection after every poll and opened a new one for the next: on SQLite more than half of
    an idle worker's loop (py-spy); kept, an idle worker at ``--interval 0.2`` takes 5% of a core
    instead of 9%. A kept connection is checked before reuse (``CONN_HEALTH_CHECKS``), so one
    the database ended is replaced, not used.
    """
    db = connections.settings[DEFAULT_DB_ALIAS]
    if "pool" not in db.get("OPTIONS", {}):
        db["CONN_MAX_AGE"] = None
        db["CONN_HEALTH_CHECKS"] = True


def _beat_until(stop: threading.Event, worker_id: str, metrics_port: int, started_at: datetime) -> None:
    """Write this worker's heartbeat every ``WORKER_HEARTBEAT_INTERVAL`` seconds until ``stop`` is set."""
    while True:
        try:
            worker_beat(worker_id=worker_id, metrics_port=metrics_port, started_at=started_at)
        except DatabaseError:  # the database away for a moment: the next beat tells it again
            logger.exception("worker heartbeat failed; trying again in %s s", settings.WORKER_HEARTBEAT_INTERVAL)
        connection.close()
        if stop.wait(settings.WORKER_HEARTBEAT_INTERVAL):
            return


def _sweep_forever(sweeps: tuple, interval: float) -> None:
    while True:
        time.sleep(interval)
        for sweep in sweeps:
            try:
                sweep()
            except Exception:  # a database hiccup must not end the sweeping for good
                logger.exception("%s failed; trying again in %s s", sweep.__name__, interval)
        connection.close()  # this thread's own connection; idle until the next sweep
