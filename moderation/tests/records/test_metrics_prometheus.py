"""/metrics as a real Prometheus sees it, and the alert rules shipped for it (docs/operators/alerts.yml).

Debian's ``prometheus`` package (``make prometheus``) gives ``prometheus`` and ``promtool``;
missing, these tests fail in CI (``CI=true``) and skip elsewhere. Two servers and a task
worker share one SQLite database, so this runs in the SQLite pass: what is checked is what
each process reports and how Prometheus adds them up, not the cluster's locking.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from e2e.children import children_adopt
from e2e.server import ROOT, LiveServer, free_port
from moderation.tests.form_session import FormSession

pytestmark = pytest.mark.timeout(600)

RULES = ROOT / "docs" / "operators" / "alerts.yml"
PASSWORD = "metrics-test-pw-1"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} not installed (make prometheus: Debian's prometheus package)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def test_the_alert_rules_pass_promtool_check():
    done = subprocess.run([_tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


_RULE_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'reviewqueue_workers_alive{{instance="s1"}}'
        values: '1 1 0 0 0 0'
      - series: 'reviewqueue_workers_alive{{instance="s2"}}'
        values: '1 1 0 0 0 0'
      - series: 'reviewqueue_unapplied_oldest_seconds{{instance="s1"}}'
        values: '0 0 120 240 360 480'
      - series: 'reviewqueue_unapplied_oldest_seconds{{instance="s2"}}'
        values: '0 0 120 240 360 480'
      - series: 'reviewqueue_deadline_overdue_seconds{{instance="s1"}}'
        values: '0 0 400 500 600 700'
      - series: 'reviewqueue_deadline_overdue_seconds{{instance="s2"}}'
        values: '0 0 400 500 600 700'
      - series: 'reviewqueue_webhook_attempts_total{{endpoint="3", instance="w1"}}'
        values: '0+10x30'
      - series: 'reviewqueue_webhook_failures_total{{endpoint="3", instance="w1"}}'
        values: '0+8x30'
    alert_rule_test:
      - eval_time: 1m
        alertname: ReviewQueueNoWorker
        exp_alerts: []
      - eval_time: 5m
        alertname: ReviewQueueNoWorker
        exp_alerts:
          - exp_labels: {{severity: page}}
            exp_annotations:
              summary: "No reviewqueue task worker is alive"
              description: "Decisions are not applied, webhooks not sent, deadlines not fired until one runs
                (manage.py db_worker); /readyz lists the workers last seen."
      - eval_time: 3m
        alertname: ReviewQueueUnappliedDecisions
        exp_alerts: []
      - eval_time: 5m
        alertname: ReviewQueueUnappliedDecisions
        exp_alerts:
          - exp_labels: {{severity: page}}
            exp_annotations:
              summary: "A decision has waited 8m 0s to be applied"
              description: "Is a task worker running (/readyz, manage.py db_worker), or stuck on a graph (its log)?"
      - eval_time: 5m
        alertname: ReviewQueueAgeingPastDeadline
        exp_alerts:
          - exp_labels: {{severity: page}}
            exp_annotations:
              summary: "An item has waited 11m 40s past its deadline"
              description: "Deadlines are not being fired: is a task worker running (manage.py db_worker)?"
      - eval_time: 30m
        alertname: ReviewQueueWebhookFailures
        exp_alerts:
          - exp_labels: {{severity: warn, endpoint: "3"}}
            exp_annotations:
              summary: "Webhook endpoint 3: 80% of attempts fail"
              description: "Deliveries are retried with backoff until WEBHOOK_RETRY_FOR; see the admin's deliveries."
"""


def test_the_alerts_fire_when_their_conditions_hold(tmp_path):
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(_RULE_TESTS.format(rules=json.dumps(str(RULES))))
    done = subprocess.run([_tool("promtool"), "test", "rules", str(tests)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


class Prometheus:
    """A Prometheus on a loopback port, scraping the given targets every second, with our rules loaded."""

    def __init__(self, workdir: Path, *, servers: list[str], worker: str) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {"job_name": "reviewqueue", "static_configs": [{"targets": servers}]},
                        {"job_name": "reviewqueue-worker", "static_configs": [{"targets": [worker]}]},
                    ],
                }
            )
        )
        self.log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                _tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        children_adopt(self.process)

    def api(self, path: str, **params: str):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)["data"]

    def value(self, query: str) -> float | None:
        """The single value ``query`` has now (None: no series yet, or Prometheus not up yet)."""
        try:
            result = self.api("query", query=query)["result"]
        except OSError:
            return None
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def wait(self, query: str, expected: float) -> None:
        """Wait until ``query`` gives ``expected``: on progress, however slow the machine (the test's timeout bounds it)."""
        while (seen := self.value(query)) != expected:
            assert self.process.poll() is None, (self.log.flush(), Path(self.log.name).read_text()[-3000:])
            time.sleep(0.5)
        assert seen == expected

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def site(tmp_path):
    worker_port = free_port()
    # The worker applies decisions (the in-process suite's inline apply is off), on its own port.
    env = {"REVIEWQUEUE_APPLY_INLINE": "", "METRICS_WORKER_PORT": str(worker_port)}
    first = LiveServer(tmp_path / "s1", health_path="/healthz", extra_env=env)
    seeded = first.seed(users=["alice", "bob"], password=PASSWORD, sessions=False, items=3, prefix="Metrics")
    second = LiveServer(tmp_path / "s2", database_url=first.database_url, health_path="/healthz", extra_env=env)
    servers = [first, second]
    prometheus = None
    try:
        for server in servers:
            server.start(timeout=120)
        first.worker_start(worker_id="metrics-worker")
        first.worker_wait_ready("metrics-worker")
        prometheus = Prometheus(tmp_path, servers=[s.netloc for s in servers], worker=f"127.0.0.1:{worker_port}")
        yield servers, seeded.items, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        for server in servers:
            server.close()


def test_a_real_prometheus_adds_up_two_servers_and_a_worker(site):
    (one, two), items, prometheus = site
    alice, bob = FormSession(one.netloc, "alice", PASSWORD), FormSession(two.netloc, "bob", PASSWORD)
    assert alice.decide(one.netloc, items[0], "approve")[0] == 200
    assert bob.decide(two.netloc, items[0], "reject")[0] == 409  # lost, on the other server
    assert bob.decide(two.netloc, items[1], "reject")[0] == 200

    prometheus.wait('count(up{job="reviewqueue"} == 1)', 2)
    prometheus.wait('sum(up{job="reviewqueue-worker"})', 1)
    # Events: each counted once, by the process where it happened, added up by Prometheus.
    prometheus.wait('sum(reviewqueue_decisions_total{outcome="won"})', 2)
    prometheus.wait('sum(reviewqueue_decisions_total{outcome="lost"})', 1)
    prometheus.wait(f'reviewqueue_decisions_total{{outcome="won", instance="{one.netloc}"}}', 1)
    prometheus.wait("sum(reviewqueue_time_to_decision_seconds_count)", 2)
    # Applies happen in the worker, and only it reports them.
    prometheus.wait('sum(reviewqueue_apply_lag_seconds_count{job="reviewqueue-worker"})', 2)
    prometheus.wait('sum(reviewqueue_apply_lag_seconds_count{job="reviewqueue"})', 0)
    # The queue's state: the same from both servers (one item left, of no team, normal band), none from the worker.
    prometheus.wait('count(reviewqueue_pending_items{team="", graph="moderation", band="normal"} == 1)', 2)
    prometheus.wait('count(reviewqueue_pending_items{job="reviewqueue-worker"}) or vector(0)', 0)
    # The workers' heartbeats, as every server reads them: one worker alive, every decision applied.
    prometheus.wait("count(reviewqueue_workers_alive == 1)", 2)
    prometheus.wait("max(reviewqueue_unapplied_oldest_seconds)", 0)
    # The rules loaded and evaluate (a worker is up: ReviewQueueNoWorker is not firing).
    rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == {
        "ReviewQueueAgeingPastDeadline",
        "ReviewQueueApplyLag",
        "ReviewQueueApplyFailures",
        "ReviewQueueWebhookFailures",
        "ReviewQueueNoWorker",
        "ReviewQueueUnappliedDecisions",
    }
    assert all(rule["health"] in ("ok", "unknown") for rule in rules), rules
    # Firing, not pending: on a busy machine one slow scrape of the worker makes it pending for a moment.
    assert prometheus.value('ALERTS{alertname="ReviewQueueNoWorker", alertstate="firing"}') is None
