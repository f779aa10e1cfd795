"""The PostgreSQL connection budget of docs/operators/deployment.md, held by a real cluster, direct and through PgBouncer.

Two servers and two task workers on one PostgreSQL and one Redis (as ``test_cluster_workers``),
each process naming its connections (``PGAPPNAME``: libpq's, so Django's pool, the
checkpointer's pool and the worker's listener all carry it), while moderators race a burst of
decisions and the workers apply them. A sampler reads ``pg_stat_activity`` for the cluster's
database every 50 ms: the peak per process and in total must stay within the deployment
page's table for these pool sizes. The negative control: the same samples exceed a tighter
budget (one connection per pool), so the sampler does see connections beyond the floor.

Then the same race through Debian's ``pgbouncer`` in session mode (started here on a free
port, trusting every client, forwarding to the PostgreSQL the tests use): the servers and the
workers connect only to it, and the history checker judges the race.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e.children import children_adopt, children_forget
from e2e.server import LiveServer, free_port
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.tests.cluster_support import (
    channel_prefix,
    cluster_env,
    fresh_database,
    services_require,
    work_settled_wait,
)
from moderation.tests.real_server import Reviewer

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

ITEMS = 40
IN_FLIGHT = 8
MODERATORS = [f"mod{n}" for n in range(4)]
SETTLE_STALL = 60
WORKER_ENV = {"REVIEWQUEUE_APPLY_INLINE": ""}  # the suite applies inline; here the workers apply
SERVERS = ("server0", "server1")
WORKERS = ("worker0", "worker1")


def budget(*, db_pool: int, checkpoint_pool: int) -> dict[str, int]:
    """The deployment page's *At most* column for these pool sizes: a server takes Django's pool
    and the checkpointer's, a worker those and its task wake-up listener."""
    return {"server": db_pool + checkpoint_pool, "worker": db_pool + checkpoint_pool + 1}


class Sampler(threading.Thread):
    """Counts the database's client backends by ``application_name`` every 50 ms; keeps the peaks."""

    def __init__(self, admin_url: str, database: str) -> None:
        super().__init__(name="pg-sampler", daemon=True)
        self.admin_url, self.database = admin_url, database
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.samples = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
                while not self.done.is_set():
                    rows = conn.execute(
                        """SELECT application_name, count(*) FROM pg_stat_activity
                           WHERE datname = %s AND backend_type = 'client backend' GROUP BY 1""",
                        [self.database],
                    ).fetchall()
                    counts = Counter(dict(rows))
                    self.peak |= counts
                    self.peak_total = max(self.peak_total, sum(counts[name] for name in (*SERVERS, *WORKERS)))
                    self.samples += 1
                    time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)
        assert self.error is None, self.error


class PgBouncer:
    """Debian's pgbouncer on a loopback port in ``mode``, every database forwarded to ``upstream`` (trust auth)."""

    def __init__(self, upstream: str, *, mode: str = "session", pool_size: int = 80) -> None:
        path = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.access(p, os.X_OK)), None)
        if path is None:
            reason = "pgbouncer not installed (make pgbouncer: Debian's pgbouncer package)"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = upstream
        self.port = free_port()
        # pgbouncer refuses to run as root: as root it is started as postgres (-u), which must read
        # the ini and userlist and write the log, so they live in a directory of their own anyone may enter.
        self.workdir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.workdir.chmod(0o777)
        self.log = self.workdir / "pgbouncer.log"
        users = self.workdir / "userlist.txt"
        users.write_text(f'"{parsed.username or "postgres"}" ""\n')
        ini = self.workdir / "pgbouncer.ini"
        ini.write_text(f"""[databases]
* = host={parsed.hostname or "127.0.0.1"} port={parsed.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
admin_users = {parsed.username or "postgres"}
auth_file = {users}
pool_mode = {mode}
max_client_conn = 400
default_pool_size = {pool_size}
logfile = {self.log}
""")
        for file in (users, ini):
            file.chmod(0o644)
        as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [path, *as_user, str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        children_adopt(self.process)
        self._wait_listening(upstream)

    def url(self, database_url: str) -> str:
        """``database_url`` (a database of the upstream server), through this pgbouncer."""
        parsed = urllib.parse.urlsplit(database_url)
        user = f"{parsed.username}@" if parsed.username else ""
        return urllib.parse.urlunsplit(parsed._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def _wait_listening(self, upstream: str) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, self.log_tail()
            try:
                psycopg.connect(self.url(upstream), connect_timeout=3).close()
                return
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, self.log_tail()
                time.sleep(0.2)

    def clients(self, database: str) -> Counter[str]:
        """Its clients connected to ``database`` now, counted by application_name (its admin console's SHOW CLIENTS)."""
        import psycopg

        with psycopg.connect(
            self.url(urllib.parse.urlunsplit(urllib.parse.urlsplit(self.upstream)._replace(path="/pgbouncer"))), autocommit=True
        ) as conn:
            cursor = conn.execute("SHOW CLIENTS")
            columns = [c.name for c in cursor.description]
            rows = [dict(zip(columns, row, strict=False)) for row in cursor.fetchall()]
        return Counter(row["application_name"] for row in rows if row["database"] == database)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no pgbouncer log)"

    def stop(self) -> None:
        children_forget(self.process)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _cluster_race(
    tmp_path_factory, *, label: str, through=None, session_through=None, sample_from: str | None = None, at_end=None
):
    """Seed, start two servers and two workers (named by PGAPPNAME), race ITEMS items by pairs on both
    servers, wait until every apply is done; (the race's judgement, the sampler or None).

    ``through(url)``: the URL the cluster's processes get as DATABASE_URL (a pooler's); ``session_through(url)``:
    as SESSION_DATABASE_URL. ``at_end(database name)`` runs once the work is done, the processes still up."""
    admin_url, redis_url = services_require()
    with fresh_database(admin_url, label) as database_url:
        served_url = through(database_url) if through else database_url
        env = {**cluster_env(redis_url=redis_url, prefix=channel_prefix(label)), **WORKER_ENV}
        if session_through:
            env["SESSION_DATABASE_URL"] = session_through(database_url)
        servers = [
            LiveServer(
                tmp_path_factory.mktemp(f"{label}-{n}"), database_url=served_url, extra_env={**env, "PGAPPNAME": SERVERS[n]}
            )
            for n in range(2)
        ]
        sampler = None
        try:
            seeded = servers[0].seed(users=MODERATORS, items=ITEMS, prefix="Budget")
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda server: server.start(timeout=90), servers))
            for n, server in enumerate(servers):
                server.worker_start(worker_id=WORKERS[n], extra_env={"PGAPPNAME": WORKERS[n]})
            for n, server in enumerate(servers):
                server.worker_wait_ready(WORKERS[n])
            if sample_from:
                sampler = Sampler(sample_from, urllib.parse.urlsplit(database_url).path.lstrip("/"))
                sampler.start()
            reviewers = [Reviewer(servers[n % 2], name, seeded.sessions[name]) for n, name in enumerate(MODERATORS)]
            recorder = HistoryRecorder()

            def attempt(reviewer: Reviewer, item: str, decision: str, start: threading.Barrier) -> None:
                start.wait()
                reviewer.decide_recorded(recorder, item, decision)

            with ThreadPoolExecutor(2 * IN_FLIGHT) as pool:
                for n, item in enumerate(seeded.items):
                    start = threading.Barrier(2, timeout=60)
                    pool.submit(attempt, reviewers[n % 4], item, "approve", start)
                    pool.submit(attempt, reviewers[(n + 1) % 4], item, "reject", start)
            left = work_settled_wait(database_url, stall=SETTLE_STALL)
            if sampler:
                sampler.stop()  # before the state reads: the test's own tool process would be counted as a server
            if at_end:
                at_end(urllib.parse.urlsplit(database_url).path.lstrip("/"))
            assert not any(left.values()), left
            unknown = [op for op in recorder.ops if op.completion not in ("ok", "fail")]
            assert not unknown, [f"{op.reviewer} on {op.item}: {op.completion} {op.error}" for op in unknown]
            state = servers[1].tool("state", *seeded.items)
            final = {item: FinalItem(**row["final"]) for item, row in state.items()}
            anomalies = history_check(ops=recorder.ops, final=final)
            for item in seeded.items:
                row = state[item]
                assert (row["resume_count"], row["forks"], row["apply_state"]) == (1, 0, ""), (item, row)
            return anomalies, sampler
        finally:
            if sampler and sampler.is_alive():
                sampler.done.set()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(LiveServer.close, servers))


def test_two_servers_and_two_workers_stay_within_the_documented_connection_budget(tmp_path_factory):
    admin_url, _ = services_require()
    anomalies, sampler = _cluster_race(tmp_path_factory, label="budget", sample_from=admin_url)
    assert not anomalies, "\n".join(map(str, anomalies))
    env = cluster_env(redis_url="", prefix="")
    documented = budget(db_pool=int(env["DB_POOL_SIZE"]), checkpoint_pool=int(env["CHECKPOINT_POOL_SIZE"]))
    total = 2 * documented["server"] + 2 * documented["worker"]
    peaks = {name: sampler.peak[name] for name in (*SERVERS, *WORKERS)}
    print(
        f"\nconnection budget: {sampler.samples} samples of pg_stat_activity; peaks {peaks}, "
        f"all four at once {sampler.peak_total} (documented: {documented['server']} a server, "
        f"{documented['worker']} a worker, {total} the cluster)"
    )
    assert sampler.samples >= 10
    for name in SERVERS:
        assert 1 <= peaks[name] <= documented["server"], (name, peaks)
    for name in WORKERS:
        assert 1 <= peaks[name] <= documented["worker"], (name, peaks)
    assert sampler.peak_total <= total

    # Negative control: a budget of one connection per pool is exceeded, and the same samples show it.
    tight = budget(db_pool=1, checkpoint_pool=1)
    assert sampler.peak_total > 2 * tight["server"] + 2 * tight["worker"], (sampler.peak_total, peaks)
    assert any(peaks[name] > tight["server"] for name in SERVERS), peaks
    assert any(peaks[name] > tight["worker"] for name in WORKERS), peaks


def test_the_cluster_race_through_pgbouncer_in_session_mode_is_correct(tmp_path_factory):
    admin_url, _ = services_require()
    bouncer = PgBouncer(admin_url, mode="session")
    seen: dict[str, Counter[str]] = {}
    try:
        anomalies, _ = _cluster_race(
            tmp_path_factory,
            label="pgbouncer",
            through=bouncer.url,
            at_end=lambda database: seen.update(session=bouncer.clients(database)),
        )
    finally:
        bouncer.stop()
    assert not anomalies, "\n".join(map(str, anomalies))
    print(f"\npgbouncer (session mode): its clients at the end, by process {dict(seen['session'])}")
    # Every server and worker is its client (and none reaches PostgreSQL another way: DATABASE_URL names it alone).
    assert set(seen["session"]) >= {*SERVERS, *WORKERS}, seen


def test_the_cluster_race_with_django_through_a_transaction_mode_pgbouncer_and_the_sessions_beside_it(tmp_path_factory):
    """DATABASE_URL through a transaction-mode pool, SESSION_DATABASE_URL (the checkpointer's resume
    locks, the workers' LISTEN) through a session-mode one: the race is as correct, and each pooler
    sees the connections the deployment page gives it."""
    admin_url, _ = services_require()
    transaction, session = PgBouncer(admin_url, mode="transaction"), PgBouncer(admin_url, mode="session")
    seen: dict[str, Counter[str]] = {}

    def clients(database: str) -> None:
        seen.update(transaction=transaction.clients(database), session=session.clients(database))

    try:
        anomalies, _ = _cluster_race(
            tmp_path_factory, label="pgbtx", through=transaction.url, session_through=session.url, at_end=clients
        )
    finally:
        transaction.stop()
        session.stop()
    assert not anomalies, "\n".join(map(str, anomalies))
    print(
        f"\npgbouncer split: transaction-mode clients {dict(seen['transaction'])}, session-mode clients {dict(seen['session'])}"
    )
    assert set(seen["transaction"]) >= {*SERVERS, *WORKERS}, seen
    # A worker's listener and its checkpointer pool (every apply ran under a resume lock) are session-mode clients.
    assert all(seen["session"][name] >= 2 for name in WORKERS), seen
