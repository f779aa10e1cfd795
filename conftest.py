"""Suite-wide set-up: the PostgreSQL pass must fail in CI when the server is missing."""

import fcntl
import ipaddress
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path

import pytest

# The client package as it is in this checkout, whichever checkout the virtualenv's editable
# install points at (the e2e tests import it, and hand this folder to the agents they start).
sys.path.insert(0, str(Path(__file__).resolve().parent / "reviewqueue-client"))

# The suite runs no task worker unless a test starts one: decisions are applied in the
# deciding process once the guard's locks are released (moderation.review.apply). Tests of the
# worker turn it off.
os.environ.setdefault("REVIEWQUEUE_APPLY_INLINE", "1")
# Most tests reject without a reason code; the tests of reasons turn this back on
# (in-process with the settings fixture, for a server in its extra_env).
os.environ.setdefault("REJECT_REASON_REQUIRED", "0")
# The tests' webhook receivers listen on 127.0.0.1, which webhooks may reach only when allowed;
# the tests of the refusal take the allowance away.
os.environ.setdefault("WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1")
# The same for the tests' LangGraph Server (langgraph dev) and the deployments they register.
os.environ.setdefault("DEPLOYMENT_ALLOWED_NETWORKS", "127.0.0.1")
# No outbound call while a database connection or transaction is held (moderation.core.ioguard):
# every process of the run (this one, the servers and workers it starts) reports to one file per
# pytest process, and a test during which a line was added fails (io_guard_report below).
_IO_GUARD_REPORT = Path(os.environ.get("TMPDIR", "/tmp")) / f"reviewqueue-ioguard-{os.getpid()}.log"
os.environ["REVIEWQUEUE_IO_GUARD"] = str(_IO_GUARD_REPORT)


def pytest_configure(config):
    # pytest-django has read the settings before this module ran: the environment above
    # reaches the servers the tests start, this line the test process itself.
    from django.conf import settings

    settings.REVIEWQUEUE_APPLY_INLINE = os.environ["REVIEWQUEUE_APPLY_INLINE"] == "1"
    settings.REJECT_REASON_REQUIRED = os.environ["REJECT_REASON_REQUIRED"].lower() in {"1", "true", "yes", "on"}
    # This process plays the server and every other process at once: its events go to its
    # own channel layer, never through the database (moderation.records.relay).
    settings.LIVE_RELAY = False
    # The users the tests make here: PBKDF2's million rounds cost a quarter of a CPU-second per
    # password set or checked. The servers and workers keep their own settings' hashers.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WEBHOOK_ALLOWED_NETWORKS = [ipaddress.ip_network(n) for n in os.environ["WEBHOOK_ALLOWED_NETWORKS"].split(",")]
    settings.DEPLOYMENT_ALLOWED_NETWORKS = [ipaddress.ip_network(n) for n in os.environ["DEPLOYMENT_ALLOWED_NETWORKS"].split(",")]
    _redis_of_this_worker(settings)
    from moderation.core.ioguard import io_guard_install

    _IO_GUARD_REPORT.unlink(missing_ok=True)
    io_guard_install(report=str(_IO_GUARD_REPORT), pool_check=False)  # this process: transactions only (see its docstring)


@pytest.fixture(autouse=True)
def io_guard_report(request):
    """Fail the test during which any process of the run started an outbound call holding the database; a
    negative control of the old way (``io_guard_expected``) fails if the guard found nothing."""
    before = _IO_GUARD_REPORT.stat().st_size if _IO_GUARD_REPORT.exists() else 0
    yield
    found = ""
    if _IO_GUARD_REPORT.exists() and _IO_GUARD_REPORT.stat().st_size > before:
        with open(_IO_GUARD_REPORT) as report:
            report.seek(before)
            found = report.read()
    if request.node.get_closest_marker("io_guard_expected"):
        if not found:
            pytest.fail("the guard (moderation.core.ioguard) found no outbound call made holding the database", pytrace=False)
    elif found:
        pytest.fail(f"outbound network I/O while holding the database (moderation.core.ioguard):\n{found}", pytrace=False)


def _redis_of_this_worker(settings) -> None:
    """Under pytest-xdist, each worker gets a Redis database and channel prefix of its own.

    Tests empty the cache (``cache.clear()`` is Redis's FLUSHDB, the whole database), and
    pub/sub ignores the database number: two workers on one Redis database would wipe each
    other's rate-limit windows and presence counts, and hear each other's events. The servers
    a worker starts inherit its REDIS_URL, so they share its database and no other's.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    url = os.environ.get("REDIS_URL", "")
    if not (worker.startswith("gw") and url):
        return
    parsed = urllib.parse.urlsplit(url)
    base = int(parsed.path.strip("/") or 0)
    url = urllib.parse.urlunsplit(parsed._replace(path=f"/{base + int(worker[2:])}"))
    os.environ["REDIS_URL"] = url
    settings.CACHES["default"]["LOCATION"] = url
    layer = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    layer["hosts"][0]["address"] = url
    layer["prefix"] = f"{layer['prefix']}-{worker}"


def _postgres_pass() -> bool:
    return os.environ.get("REVIEWQUEUE_BACKEND_PASS") == "postgres"


def _postgres_reachable() -> str | None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    try:
        psycopg.connect(host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], connect_timeout=3).close()
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


# The files that run a whole cluster each (two servers and two workers: up to ~50 PostgreSQL connections)
# take turns, whichever xdist worker runs them: two at once overflow PostgreSQL's 100 connections.
CLUSTERS_IN_TURN = (
    "moderation/tests/test_soak_run.py",
    "moderation/tests/test_cluster_workers.py",
    "moderation/tests/test_cluster_connections.py",
)


@pytest.fixture(scope="module", autouse=True)
def _clusters_take_turns(request):
    if request.node.nodeid not in CLUSTERS_IN_TURN:
        yield
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    with open(Path(tempfile.gettempdir()) / f"reviewqueue-clusters-{run}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


@pytest.fixture(autouse=True)
def _rate_limit_windows_reset():
    # User ids are reused after rollbacks, so one test's requests must not count in the next.
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(scope="session", autouse=True)
def _test_flush_may_empty_the_audit_log():
    """Transactional tests end by emptying every table. On SQLite that is a DELETE, which the
    audit log's append-only triggers refuse; this teardown, and nothing else in the suite,
    lifts them for it (PostgreSQL's flush is a TRUNCATE, which fires no row triggers)."""
    from django.db import connection

    from moderation.records.audit import audit_guard_lifted

    if connection.vendor != "sqlite":
        yield
        return
    DatabaseOperations = type(connection.ops)
    original = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        with audit_guard_lifted(using=self.connection.alias):
            original(self, sql_list)

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = original


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    yield
    # Checkpointer connections would keep the test database from being dropped.
    from moderation.core.checkpointer import checkpointer_close_all

    checkpointer_close_all()


# The test files that take longest, longest first (by what they start: servers, processes, browsers;
# and by a run's durations on a loaded machine, 2026-12-02). pytest-xdist's `--dist loadfile`
# hands files out in collection order (pytest.ini turns off its reordering by test count, which
# put these few-test, long files last): started first, none of them keeps one worker busy at
# the end while the other has nothing left. A new file that takes over half a minute belongs here.
LONGEST_FIRST = (
    # The longest of all (a cluster under faults; a server running every docs example; agent
    # processes; a LangGraph Server), measured in the first run that had them: they go first.
    "moderation/tests/test_soak_run.py",
    "moderation/tests/test_docs.py",
    "e2e/test_agent_side.py",
    "e2e/test_typescript_agent_races.py",
    "e2e/test_typescript_client.py",
    "e2e/test_typescript_agent.py",
    "moderation/tests/review/test_deployments.py",
    "moderation/tests/review/test_deployment_races.py",
    "moderation/tests/test_cluster_workers.py",
    "moderation/tests/test_crash.py",
    "moderation/tests/test_concurrency.py",
    "moderation/tests/test_settings.py",
    "moderation/tests/policies/test_policy_races.py",
    "moderation/tests/api/test_api_server.py",
    "moderation/tests/web/test_policy_pages.py",
    "moderation/tests/delivery/test_delivery_server.py",
    "moderation/tests/test_outages.py",
    "moderation/tests/test_cluster.py",
    "moderation/tests/api/test_api_longpoll.py",
    "moderation/tests/review/test_withdraw.py",
    "moderation/tests/graphs/test_asks.py",
    "moderation/tests/policies/test_votes.py",
    "moderation/tests/test_item_add.py",
    "e2e/test_live.py",
    "moderation/tests/web/test_middleware.py",
    "moderation/tests/records/test_counts.py",
    "moderation/tests/policies/test_policy_races_server.py",
    "moderation/tests/live/test_live_server.py",
    "moderation/tests/live/test_live_sockets_server.py",
    "e2e/test_live_trust.py",
    "e2e/test_cluster.py",
    "moderation/tests/live/test_rights.py",
    "moderation/tests/records/test_audit.py",
    "moderation/tests/test_login_lockout.py",
)


def _longest_first(items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


# What a test module that starts processes (servers, workers, agents, browsers, commands) imports:
# its tests get the ``processes`` marker, and ``make test-quick`` leaves them out.
_PROCESS_STARTERS = (
    "subprocess",
    "multiprocessing",
    "e2e",
    "playwright",
    "moderation.tests.real_server",
    "moderation.tests.races",
    "moderation.tests.langgraph_server",
    "moderation.tests.deployments_support",
    "moderation.tests.cluster_support",
    "moderation.lab.runner",
)


def _starts_processes(module) -> bool:
    names = {
        getattr(value, "__name__", "") if isinstance(value, type(sys)) else getattr(value, "__module__", "") or ""
        for value in vars(module).values()
    }
    return any(name == prefix or name.startswith(f"{prefix}.") for name in names for prefix in _PROCESS_STARTERS)


def _processes_marked(items: list[pytest.Item]) -> None:
    verdicts: dict[str, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module.__name__ not in verdicts:
            verdicts[module.__name__] = _starts_processes(module)
        if verdicts[module.__name__]:
            item.add_marker(pytest.mark.processes)


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    _processes_marked(items)
    if not _postgres_pass():
        return
    problem = _postgres_reachable()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.exit(f"PostgreSQL is required in CI but not reachable: {problem}", returncode=1)
    skip = pytest.mark.skip(reason=f"PostgreSQL not reachable ({problem}); start it or run in CI")
    for item in items:
        item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    # The test database is dropped by pytest-django; its checkpoint file is ours to drop.
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        from pathlib import Path

        test_db = Path(db["TEST"]["NAME"])
        for leftover in test_db.parent.glob(f"{test_db.stem}-checkpoints.sqlite3*"):
            leftover.unlink(missing_ok=True)


def pytest_unconfigure(config):
    _IO_GUARD_REPORT.unlink(missing_ok=True)  # what it held failed its tests already
