"""The race lab: the seed's bug seen happening, the guard seen holding, with numbers."""

import io
import json
import sqlite3
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from moderation.core.checkpointer import checkpointer_target
from moderation.graphs.runtime import graph_get
from moderation.items.models import ItemStatus, QueueItem
from moderation.lab import store
from moderation.lab.waits import progress_wait
from moderation.policies.models import Team
from moderation.records.models import AuditLedgerEntry, DecisionAttempt, LabAccount
from moderation.records.selectors import QueueFilters, queue_counts, queue_pending
from moderation.review.decisions import item_decide
from moderation.review.items import item_create

RESULT_KEYS = {
    "strategy",
    "mode",
    "trials",
    "reviewers",
    "lost_decisions",
    "false_successes",
    "double_resumes",
    "double_resolutions",
    "votes_lost",
    "deadline_wins",
    "errors",
    "p50_ms",
    "p99_ms",
    "decisions_per_s",
}
ANOMALY_KEYS = (
    "lost_decisions",
    "false_successes",
    "double_resumes",
    "double_resolutions",
    "votes_lost",
    "misinformed_losers",
    "errors",
)
SLOW_KEYS = {"strategy", "hold_s", "others", "baseline_p50_ms", "during_p50_ms", "waited_ms", "errors"}
# Long beside a decision: a fresh clone's CI run saw a guarded decision on another item take half a
# second longer (the machine's noise, not a wait: quiet, it is 0 ms against global-lock's 1,066), so the
# hold leaves that noise well under the half of it that the waits below are judged against.
HOLD_S = 3.0


@pytest.fixture(autouse=True)
def lab_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path / "lab"


def _racelab_json(*args: str) -> tuple[dict, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("racelab", "--json", *args, stdout=out, stderr=err)
    return json.loads(out.getvalue()), err.getvalue()


def _small_guarded_run() -> dict:
    report, _ = _racelab_json("--strategy", "guarded", "--mode", "threads", "--trials", "1", "--reviewers", "2", "--hold", "0.05")
    return report


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_lab_shows_the_race_losing_decisions_and_the_guard_holding(make_item):
    real_item = make_item(title="A real post")
    lookalike = get_user_model().objects.create_user("lab-reviewer-99", password="a-real-password-1")

    report, stderr = _racelab_json(
        "--trials",
        "3",
        "--reviewers",
        "2",
        "--hold",
        str(HOLD_S),
        "--seed",
        "7",
        "--strategy",
        "naive",
        "--strategy",
        "global-lock",
        "--strategy",
        "item-lock",
        "--strategy",
        "row-lock",
        "--strategy",
        "guarded",
    )

    assert stderr == "", "--json turns the progress bar off"
    assert {"results", "slow_reviewer", "isolation"} <= report.keys()
    cells = {(r["strategy"], r["mode"]): r for r in report["results"]}
    strategies = ("naive", "global-lock", "item-lock", "row-lock", "guarded")
    assert set(cells) == {(s, m) for s in strategies for m in ("threads", "processes")}
    for row in report["results"]:
        assert row.keys() >= RESULT_KEYS
        assert (row["trials"], row["reviewers"]) == (3, 2)
        assert row["p50_ms"] <= row["p99_ms"] and row["decisions_per_s"] > 0

    assert cells["naive", "threads"]["lost_decisions"] >= 1
    assert cells["naive", "threads"]["false_successes"] >= 1
    # In-process locks hold inside one process and fail across processes.
    for strategy in ("global-lock", "item-lock"):
        assert cells[strategy, "threads"]["lost_decisions"] == 0
        assert cells[strategy, "processes"]["lost_decisions"] >= 1
    # The database's lock holds in both modes; so does the product's guard.
    for strategy in ("row-lock", "guarded"):
        for mode in ("threads", "processes"):
            row = cells[strategy, mode]
            assert (row["lost_decisions"], row["false_successes"], row["double_resumes"], row["errors"]) == (0, 0, 0, 0), row

    slow = {r["strategy"]: r for r in report["slow_reviewer"]}
    assert all(r.keys() >= SLOW_KEYS and r["errors"] == 0 for r in slow.values())
    assert slow["global-lock"]["waited_ms"] >= 0.75 * HOLD_S * 1000
    assert slow["item-lock"]["waited_ms"] < 0.5 * HOLD_S * 1000
    assert slow["guarded"]["waited_ms"] < 0.5 * HOLD_S * 1000
    if connection.vendor == "sqlite":  # one write lock for the whole database
        assert slow["row-lock"]["waited_ms"] >= 0.75 * HOLD_S * 1000
    else:
        assert slow["row-lock"]["waited_ms"] < 0.5 * HOLD_S * 1000

    isolation = report["isolation"]
    assert isolation["passed"] and isolation["b_still_paused"] and isolation["a_and_c_finished"]
    assert len(isolation["items"]["B"]["waiting_on"]) == 1 and not isolation["items"]["B"]["finished"]

    # Nothing of the lab is left, and nothing real was touched.
    assert not QueueItem.objects.filter(is_lab=True).exists()
    assert not DecisionAttempt.objects.exists()
    assert list(get_user_model().objects.filter(username__startswith="lab-reviewer-")) == [lookalike]
    assert QueueItem.objects.get(pk=real_item.pk).status == ItemStatus.PENDING
    b_thread = isolation["items"]["B"]["thread_id"]
    assert graph_get(name="moderation").get_state({"configurable": {"thread_id": b_thread}}).created_at is None

    assert json.loads((store.lab_dir() / "latest.json").read_text()) == report
    assert (store.lab_dir() / "latest.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.django_db(transaction=True)
def test_quorum_votes_and_the_deadline_race_the_guard_holds_and_a_naive_tally_loses_votes():
    """quorum:2 with veto, four reviewers (two approve, two reject) and the deadline all
    acting at the item's deadline: the guard counts every vote and resolves once; the
    naive tally (read the votes, add one, write them all back) loses votes and resolves
    twice on the same items."""
    report, _ = _racelab_json(
        "--strategy",
        "naive-tally",
        "--strategy",
        "guarded",
        "--mode",
        "threads",
        "--trials",
        "4",
        "--reviewers",
        "4",
        "--policy",
        "quorum:2",
        "--policy",
        "veto",
        "--deadline",
        "1s",
        "--hold",
        "0.05",
        "--seed",
        "3",
    )

    assert report["config"]["policy"] == {
        "approvals": 2,
        "majority": False,
        "veto": True,
        "deadline_seconds": 1,
        "on_deadline": "reject",
    }
    cells = {r["strategy"]: r for r in report["results"]}
    guarded, naive = cells["guarded"], cells["naive-tally"]
    assert {key: guarded[key] for key in ANOMALY_KEYS} == dict.fromkeys(ANOMALY_KEYS, 0), guarded
    assert naive["votes_lost"] > 0 and naive["double_resolutions"] > 0, naive
    assert not Team.objects.exists() and not QueueItem.objects.filter(is_lab=True).exists()
    assert not LabAccount.objects.exists()


def _rows_snapshot() -> dict[str, list[tuple]]:
    """Every row of every table but the lab's own marker table, in a stable order; with the
    checkpoint tables too (their own SQLite file, or the same PostgreSQL database)."""
    # sqlite_sequence is SQLite's own AUTOINCREMENT counter, not a row of anyone's data.
    # The audit ledger is append-only and the lab leaves its signed trace there: checked apart.
    skip = {"sqlite_sequence", LabAccount._meta.db_table, AuditLedgerEntry._meta.db_table}
    snapshot = {}
    with connection.cursor() as cursor:
        for table in sorted(set(connection.introspection.table_names()) - skip):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            snapshot[table] = sorted(map(repr, cursor.fetchall()))
    target = checkpointer_target()
    if connection.vendor == "sqlite":
        with sqlite3.connect(target) as checkpoints:
            tables = [t for (t,) in checkpoints.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in sorted(tables):
                snapshot[f"checkpoints:{table}"] = sorted(map(repr, checkpoints.execute(f'SELECT * FROM "{table}"')))
    return snapshot


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_a_lab_run_leaves_every_other_row_as_it_was(make_item, make_moderator, make_viewer):
    """Real rows that look like the lab's (a source of "racelab", names like its users')
    are neither hidden, changed, promoted nor deleted."""
    decided = make_item(title="Real, from a feed called racelab", source="racelab")
    pending = make_item(title="Real and pending", source="racelab")
    make_item(title="Ordinary")
    item_decide(item_public_id=decided.public_id, reviewer=make_moderator("alice"), decision="approve")
    viewer = make_viewer("lab-reviewer-2")
    sso_viewer = make_viewer("lab-reviewer-1")
    sso_viewer.set_unusable_password()  # say, an account that logs in through single sign-on
    sso_viewer.save()
    assert queue_counts().pending == 2 and queue_counts().decided_today == 1
    assert pending.pk in {item.pk for item in queue_pending(filters=QueueFilters(), cursor=None, per_page=25).object_list}
    before = _rows_snapshot()
    ledger_before = list(AuditLedgerEntry.objects.values())

    _small_guarded_run()

    after = _rows_snapshot()
    assert after.keys() == before.keys()
    changed = [table for table in before if before[table] != after[table]]
    assert changed == [], {table: (before[table], after[table]) for table in changed}
    ledger_after = list(AuditLedgerEntry.objects.values())
    assert ledger_after[: len(ledger_before)] == ledger_before  # appended to, never changed
    real = set(QueueItem.objects.values_list("public_id", flat=True))
    assert ledger_after[len(ledger_before) :] and all(e["item_public_id"] not in real for e in ledger_after[len(ledger_before) :])
    assert not get_user_model().objects.get(pk=viewer.pk).has_perm("moderation.decide_item")
    assert not LabAccount.objects.exists() and not QueueItem.objects.filter(is_lab=True).exists()


def test_no_public_input_can_mark_an_item_as_the_labs():
    assert not QueueItem._meta.get_field("is_lab").editable  # so no ModelForm, admin or fixture form sets it
    with pytest.raises(TypeError):
        item_create(title="t", body="b", source="racelab", is_lab=True)  # type: ignore[call-arg]


@pytest.mark.django_db(transaction=True)
def test_table_output_progress_bar_and_png_chart(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    chart = tmp_path / "lab.png"
    call_command(
        "racelab",
        "--strategy",
        "row-lock",
        "--mode",
        "threads",
        "--trials",
        "2",
        "--reviewers",
        "2",
        "--hold",
        "0.05",
        "--chart",
        str(chart),
        stdout=out,
        stderr=err,
    )
    text = out.getvalue()
    assert "lost  false ok  2x resume" in text
    assert "Isolation: B never resumed, waiting on 1 ask(s) (pending); A finished=True, C finished=True -> held" in text
    assert text.count("row-lock") >= 2  # the race table and the slow-reviewer table
    assert "isolation" in text.lower() and "-> held" in text
    assert "2/" in err.getvalue() and "isolation check" in err.getvalue()
    assert chart.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trials", "0"], "--trials must be between 1 and 1000"),
        (["--reviewers", "1"], "--reviewers must be between 2 and 32"),
        (["--strategy", "optimistic"], "unknown strategy 'optimistic'"),
        (["--mode", "fibers"], "--mode must be threads, processes or both"),
        (["--delay", "-5"], "--delay must be between 0 and 5000"),
        (["--hold", "0"], "--hold must be between 0.05 and 30"),
        (["--seed", "-1"], "--seed must be zero or positive"),
        (["--time-limit", "0"], "--time-limit must be a positive number"),
        (["--chart", "lab.gif"], "--chart must end in .png or .svg"),
        (["--chart", "/no/such/dir/lab.png"], "does not exist"),
        (["--policy", "quorum:0"], r"--policy quorum:N needs N, the approvals, a whole number from 2 to 50, not '0'"),
        (["--policy", "quorum:two"], "a whole number from 2 to 50, not 'two'"),
        (["--policy", "nonsense"], r"unknown --policy 'nonsense'; use quorum:N \(N approvals\), veto or majority"),
        (["--policy", "quorum:5"], r"quorum:5 can never be reached by 4 reviewers; give --reviewers 5 or more"),
        (["--policy", "majority", "--policy", "quorum:2"], "majority and quorum:N do not combine"),
        (["--deadline", "x"], "--deadline must be whole seconds from 1 to 60, like 1s, not 'x'"),
        (["--deadline", "0s"], "--deadline must be whole seconds"),
        (["--on-deadline", "approve"], "--on-deadline needs --deadline"),
        (["--deadline", "1s", "--on-deadline", "shrug"], "--on-deadline must be reject, approve, escalate, not 'shrug'"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("racelab", *args)


def test_a_langgraph_race_against_a_server_that_is_not_there_is_refused():
    from moderation.tests.langgraph_server import free_port

    with pytest.raises(CommandError, match="cannot reach the deployment"):
        call_command("racelab", "--langgraph-url", f"http://127.0.0.1:{free_port()}")


def test_only_one_lab_run_at_a_time(monkeypatch):
    monkeypatch.setattr(store, "LOCK_WAIT_S", 0.0)
    with store.lab_lock(), pytest.raises(CommandError, match="another lab run is in progress"):
        call_command("racelab", "--trials", "1")


@pytest.mark.django_db(transaction=True)
def test_lab_page_is_for_staff_and_shows_the_latest_run(client, make_moderator):
    page = reverse("lab:page")
    assert client.get(page).status_code == 302
    assert client.get(reverse("lab:status")).status_code == 401

    moderator = make_moderator()
    client.force_login(moderator)
    assert client.get(page).status_code == 403
    assert client.get(reverse("lab:status")).status_code == 403
    assert client.post(reverse("lab:run")).status_code == 403

    moderator.is_staff = True
    moderator.save()
    assert b"No lab run has finished yet" in client.get(page).content
    assert client.get(reverse("lab:chart")).status_code == 404

    _small_guarded_run()
    response = client.get(page)
    assert response.status_code == 200
    assert b'data-strategy="guarded" data-mode="threads"' in response.content
    assert b"isolation held" in response.content
    chart = client.get(reverse("lab:chart"))
    assert chart["Content-Type"] == "image/svg+xml"
    assert client.get(reverse("lab:status")).json()["state"] == "done"


@pytest.mark.django_db(transaction=True)
def test_page_starts_one_background_run_and_reports_its_progress(client, make_moderator, monkeypatch):
    monkeypatch.setattr(
        store,
        "PAGE_RUN_ARGS",
        ["--strategy", "guarded", "--mode", "threads", "--trials", "1", "--reviewers", "2", "--hold", "0.05"],
    )
    staff = make_moderator()
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    run, status = reverse("lab:run"), reverse("lab:status")

    started = client.post(run, HTTP_ACCEPT="application/json")
    assert started.status_code == 202 and started.json()["state"] == "starting"
    again = client.post(run, HTTP_ACCEPT="application/json")
    assert again.status_code == 409 and again.json()["error"] == "busy"

    seen = set()

    def state_read() -> dict:
        state = client.get(status).json()
        seen.add(state["state"])
        return state

    # A run that reports progress is waited for however long it takes; one that stopped moving is not.
    state = progress_wait(state_read, done=lambda state: state["state"] not in ("starting", "running"), stall=60, poll=0.2)
    assert state["state"] == "done", (state, (store.lab_dir() / "run.log").read_text())
    assert seen <= {"starting", "running", "done"}
    assert json.loads((store.lab_dir() / "latest.json").read_text())["results"][0]["strategy"] == "guarded"
    assert not QueueItem.objects.filter(is_lab=True).exists()


def test_a_run_that_died_is_reported_failed(lab_dir):
    lab_dir.mkdir(parents=True)
    (lab_dir / "status.json").write_text(json.dumps({"state": "running", "done": 3, "total": 10}))
    assert store.lab_status()["state"] == "failed"
    (lab_dir / "status.json").write_text(json.dumps({"state": "starting", "requested_ts": time.time()}))
    assert store.lab_status()["state"] == "starting"
