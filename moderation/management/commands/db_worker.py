"""django-tasks-db's worker, plus the sweeps: ``manage.py db_worker`` runs them all.

Listed before django_tasks_db in INSTALLED_APPS, so this command is the one Django runs.
It processes every queue by default: ``apply`` (graphs resumed after decisions,
``moderation.apply``) and ``default`` (webhook deliveries).

A worker killed mid-task leaves that task claimed for good (the database backend does
not reclaim it); the sweep, in a thread of every worker, queues again what such a task
left undone: webhook deliveries whose lease ran out, and decisions not yet applied.
Another thread fires the deadlines of overdue asks (``moderation.deadlines``) every
``DEADLINE_SWEEP_INTERVAL`` seconds.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import connection
from django_tasks_db.management.commands.db_worker import Command as DbWorkerCommand

from moderation.apply import applies_sweep
from moderation.deadlines import deadlines_sweep
from moderation.delivery.sending import deliveries_sweep
from reviewqueue.heap import heap_freeze

logger = logging.getLogger("moderation.worker")


class Command(DbWorkerCommand):
    help = DbWorkerCommand.help + "; every queue by default; and queue again what a killed worker left undone"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.set_defaults(queue_name="*")

    def handle(self, *args, **options):
        heap_freeze()  # as the servers do (reviewqueue.heap): full collections skip the start-up heap
        threading.Thread(target=_sweep_forever, name="worker-sweep", daemon=True,
                         args=((applies_sweep, deliveries_sweep), settings.WEBHOOK_SWEEP_INTERVAL)).start()
        threading.Thread(target=_sweep_forever, name="deadline-sweep", daemon=True,
                         args=((deadlines_sweep,), settings.DEADLINE_SWEEP_INTERVAL)).start()
        return super().handle(*args, **options)


def _sweep_forever(sweeps: tuple, interval: float) -> None:
    while True:
        time.sleep(interval)
        for sweep in sweeps:
            try:
                sweep()
            except Exception:  # a database hiccup must not end the sweeping for good
                logger.exception("%s failed; trying again in %s s", sweep.__name__, interval)
        connection.close()  # this thread's own connection; idle until the next sweep
