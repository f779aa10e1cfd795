"""The TypeScript client's own tests (clients/typescript/test, Node's test runner) against a real server.

One server and its worker (which sweeps deadlines), an API client's token, a moderator's
session (the tests decide as the item page does), and a PostgreSQL database of the tests'
own for LangGraph.js's PostgresSaver; the Python client's advisory keys of a few thread ids
go in too, so the TypeScript lock is checked to take the same ones. The package is
type-checked and built (``tsc``: the published dist/ with its declarations), and the
TypeScript examples of docs/integrators/typescript-agents.md are run as written against
that build (they import ``@reviewqueue/client`` by its name), with the output their
``expect`` markers name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from e2e.children import children_adopt, children_forget
from e2e.node import CLIENT, node_modules_ready, node_run, postgres_database
from e2e.server import LiveServer
from moderation.tests.docs_examples import page_blocks
from moderation.tests.real_server import CSRF
from reviewqueue_client.locks import _advisory_key

pytestmark = [pytest.mark.either_pass, pytest.mark.timeout(900)]

THREADS = ("support-thread-1", "", "é✓ thread with spaces", "x" * 300)
PAGE = "integrators/typescript-agents.md"
EXAMPLES = [b for b in page_blocks(PAGE) if b.language == "ts" and not b.skip]


@pytest.fixture(scope="module")
def node_env(tmp_path_factory):
    node_modules_ready()
    server = LiveServer(
        tmp_path_factory.mktemp("ts-client"), extra_env={"DECISION_RATE_LIMIT": "0", "DEADLINE_SWEEP_INTERVAL": "0.2"}
    )
    seeded = server.seed(users=["alice"])
    token = server.tool("apiclient", "ts-client")
    try:
        server.start()
        server.worker_start(worker_id="ts-client")
        server.worker_wait_ready("ts-client")
        with postgres_database() as postgres_url:
            yield {
                "RQ_URL": server.url,
                "RQ_TOKEN": token,
                "RQ_CSRF": CSRF,
                "RQ_POSTGRES_URL": postgres_url,
                "RQ_COOKIE": f"sessionid={seeded.sessions['alice']}; csrftoken={CSRF}",
                "RQ_ADVISORY_VECTORS": json.dumps({t: str(_advisory_key(t)) for t in THREADS}),
            }
    finally:
        server.close()


def test_the_package_type_checks_and_builds_its_published_layout():
    node_modules_ready()
    done = node_run(["npm", "run", "--silent", "typecheck"], env={}, timeout=300)
    assert done.returncode == 0, done.stdout
    done = node_run(["npm", "run", "--silent", "build"], env={}, timeout=300)
    assert done.returncode == 0, done.stdout
    package = json.loads((CLIENT / "package.json").read_text())
    for entry in package["exports"].values():
        for path in entry.values():
            assert (CLIENT / path).is_file(), path
    assert set(package["dependencies"]) == {"standardwebhooks"}
    assert set(package["peerDependencies"]) == {"@langchain/langgraph"}


@pytest.mark.parametrize("suite", ["client", "webhooks", "locks", "langgraph"])
def test_node_suite(node_env, suite):
    done = node_run(
        ["node", "--import", "tsx", "--test", "--test-reporter=spec", f"test/{suite}.test.ts"], env=node_env, timeout=600
    )
    assert done.returncode == 0, done.stdout[-12000:]
    assert "# fail 0" in done.stdout or "ℹ fail 0" in done.stdout, done.stdout[-6000:]


def test_the_docs_examples_run_as_written(node_env):
    assert len(EXAMPLES) >= 2 and all(b.runs_in == "e2e/test_typescript_client.py" for b in EXAMPLES)
    done = node_run(["npm", "run", "--silent", "build"], env={}, timeout=300)
    assert done.returncode == 0, done.stdout
    examples = CLIENT / "docs-examples"  # inside the package: its examples import it by its name
    examples.mkdir(exist_ok=True)
    env = {"REVIEWQUEUE_URL": node_env["RQ_URL"], "REVIEWQUEUE_TOKEN": node_env["RQ_TOKEN"]}
    for block in EXAMPLES:
        script = examples / f"example-{block.line}.ts"
        script.write_text(block.code)
        done = node_run(["node", "--import", "tsx", str(script.relative_to(CLIENT))], env=env, timeout=300)
        assert done.returncode == block.status, f"{block.id}:\n{done.stdout[-4000:]}"
        for text in block.expect:
            assert text in done.stdout, f"{block.id}: {text!r} not in its output:\n{done.stdout[-4000:]}"


LOCK_WAITER = """
import pg from "pg";
import { postgresThreadLock } from "../src/locks.ts";
const pool = new pg.Pool({ connectionString: process.env.RQ_POSTGRES_URL });
console.log("trying");
await postgresThreadLock(pool)(process.env.RQ_THREAD, async () => console.log("got", Date.now() / 1000));
await pool.end();
"""


def test_a_python_replica_holding_a_threads_lock_holds_off_a_typescript_one(node_env, tmp_path):
    """The Python client's PostgreSQL lock (``postgres_thread_lock``'s key, held by a Python session) excludes the
    TypeScript client's on the same thread; another thread's is free."""
    import psycopg

    script = CLIENT / "docs-examples" / "lock-waiter.ts"
    script.parent.mkdir(exist_ok=True)
    script.write_text(LOCK_WAITER)
    with psycopg.connect(node_env["RQ_POSTGRES_URL"], autocommit=True) as python_replica:
        python_replica.execute("SELECT pg_advisory_lock(%s)", (_advisory_key("support-thread-1"),))
        other = node_run(
            ["node", "--import", "tsx", str(script.relative_to(CLIENT))],
            env={**node_env, "RQ_THREAD": "support-thread-2"},
            timeout=120,
        )
        assert other.returncode == 0 and "got" in other.stdout, other.stdout
        waiter = subprocess.Popen(
            ["node", "--import", "tsx", str(script.relative_to(CLIENT))],
            cwd=CLIENT,
            env={**os.environ, **node_env, "RQ_THREAD": "support-thread-1"},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        children_adopt(waiter)
        try:
            assert waiter.stdout.readline().strip() == "trying"
            time.sleep(1.0)  # time enough to take a free lock (the other thread's took well under that)
            released = time.time()
            python_replica.execute("SELECT pg_advisory_unlock(%s)", (_advisory_key("support-thread-1"),))
            out, _ = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                os.killpg(waiter.pid, signal.SIGKILL)
            children_forget(waiter)
    got = float(out.split()[1])
    assert got >= released - 0.05, (got, released)  # only once the Python session let go (clocks of one machine)
