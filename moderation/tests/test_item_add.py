"""manage.py item_add: one item, or many from a file or stdin, a bad line never stopping the rest."""

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from moderation.items.models import QueueItem

BASE_DIR = Path(__file__).resolve().parents[2]


def _add(*args: str) -> tuple[str, str, str]:
    """Run the command; its output, its error output and its CommandError ("" if none)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("item_add", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), str(exc)
    return out.getvalue(), err.getvalue(), ""


@pytest.mark.django_db
def test_a_file_adds_every_good_line_and_reports_each_bad_one(tmp_path, settings):
    settings.ITEM_BODY_MAX_LENGTH = 100
    lines = [
        {"title": "First", "body": "Nothing to see."},
        {"title": "", "body": "No title."},
        {"title": "Second", "body": "BUY NOW http://spam.test", "source": "feed"},
        {"title": "Too long", "body": "z" * 101},
        {"title": "Third", "body": "Also fine."},
    ]
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n", encoding="utf-8")

    out, err, error = _add("--file", str(path), "--source", "import")
    assert error == "3 lines refused: 2, 4, 6"

    assert list(QueueItem.objects.values_list("title", "source")) == [
        ("First", "import"),
        ("Second", "feed"),
        ("Third", "import"),
    ]
    second = QueueItem.objects.get(title="Second")
    assert f"line 3: added {second.public_id} (risk 25, flags: 1 link, watch words: buy now)" in out
    assert "Added 3 items in" in out
    assert err.splitlines() == [
        "line 2: refused: title: This field cannot be blank.",
        "line 4: refused: body: body is 101 characters; the limit is 100 (ITEM_BODY_MAX_LENGTH)",
        "line 6: refused: not valid JSON: Expecting value (column 1)",
    ]


@pytest.mark.django_db
def test_csv_on_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('title,body\r\nOne,"Multi\r\nline"\r\nTwo,Plain\r\n'))
    out, err, error = _add("--file", "-", "--format", "csv")
    assert err == error == ""
    assert list(QueueItem.objects.values_list("title", "body", "source")) == [
        ("One", "Multi\r\nline", "cli"),
        ("Two", "Plain", "cli"),
    ]
    assert out.count("added") == 2


@pytest.mark.django_db
def test_single_item_and_wrong_combinations(tmp_path, monkeypatch):
    out, _, _ = _add("--title", "Solo", "--body", "Just one.")
    assert out.startswith(f"Added {QueueItem.objects.get().public_id} (risk 0, flags: none)")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    for args, message in [
        (["--title", "Solo"], "give --title and --body for one item, or --file for many"),
        (["--file", "x.jsonl", "--title", "Solo"], "give either --file or --title/--body, not both"),
        (["--file", str(tmp_path / "missing.jsonl")], "cannot read .*missing.jsonl: No such file or directory"),
        (["--file", "-", "--format", "csv"], "the CSV header must name title, body .*missing: title, body.*"),
    ]:
        assert re.fullmatch(message, _add(*args)[2])
    assert QueueItem.objects.count() == 1


def test_team_policy_and_requester_for_one_item_and_as_defaults_of_a_file(tmp_path, payments):
    out, _, error = _add(
        "--title",
        "Refund",
        "--body",
        "Order 7.",
        "--team",
        "payments",
        "--policy",
        '{"approvals": 2, "veto": true}',
        "--requested-by",
        "carol",
    )
    assert error == ""
    item = QueueItem.objects.get()
    assert (item.team, item.requested_by.username, item.policy["approvals"], item.policy["veto"]) == (payments, "carol", 2, True)

    path = tmp_path / "items.csv"
    path.write_text(
        "title,body,policy,requested_by\r\n"
        'Own,a,"{""approvals"": 1}",alice\r\n'  # its own policy and requester
        "Default,b,,\r\n"  # the options' policy and requester
        'Unreachable,c,"{""approvals"": 3}",alice\r\n'  # alice cannot vote on her own request
        "Stranger,d,,nobody\r\n",
        encoding="utf-8",
    )
    out, err, error = _add("--file", str(path), "--team", "payments", "--policy", '{"approvals": 2}', "--requested-by", "bob")
    assert error == "2 lines refused: 4, 5"
    assert err.splitlines() == [
        "line 4: refused: policy.approvals: 3 approvals can never be reached: team Payments has 2 moderator(s) who may vote",
        "line 5: refused: requested_by: no user named 'nobody' on this server",
    ]
    added = {
        i.title: (i.team.slug, i.policy["approvals"], i.requested_by and i.requested_by.username)
        for i in QueueItem.objects.exclude(pk=item.pk)
    }
    assert added == {"Own": ("payments", 1, "alice"), "Default": ("payments", 2, "bob")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--requested-by", "nobody"], "--requested-by: no user named 'nobody' on this server"),
        (["--team", "nosuch"], "--team: no team 'nosuch'"),
        (["--policy", "{approvals"], "--policy is not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
        (["--policy", "[2]"], "--policy must be a JSON object, not list"),
        (
            ["--team", "payments", "--policy", '{"approvals": 4}'],
            "policy.approvals: 4 approvals can never be reached: team Payments has 3 moderator(s) who may vote",
        ),
        (["--policy", '{"on_deadline": "approve"}'], "policy.deadline_seconds: on_deadline needs deadline_seconds"),
        (
            ["--team", "payments", "--policy", '{"deadline_seconds": 1, "on_deadline": "approve"}'],
            "policy.on_deadline: a submitter may make the policy of team Payments (unless the team allows weaker policies) "
            "stricter, never weaker: on_deadline approve approves without a moderator; it has no deadline action",
        ),
    ],
)
def test_a_bad_team_policy_or_requester_adds_nothing(tmp_path, payments, args, message):
    path = tmp_path / "items.jsonl"
    path.write_text('{"title": "A", "body": "a"}\n', encoding="utf-8")
    assert _add("--title", "Solo", "--body", "One.", *args)[2] == message
    error = _add("--file", str(path), *args)[2]
    assert error == message or error == "1 line refused: 1"  # options checked up front, or per line
    assert not QueueItem.objects.exists()


def test_starting_item_add_does_not_import_matplotlib():
    """matplotlib (~1 s to import) is only for the race lab's chart; item_add loads the
    URLs (system checks) and must not pay for it on every invocation."""
    code = (
        "import sys, django; django.setup();"
        "from django.core import checks; checks.run_checks();"
        "import moderation.management.commands.item_add;"
        "print('matplotlib' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "reviewqueue.settings"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
