"""moderation.graphs.registry: which graphs an item may run, checked at start-up."""

import re

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from moderation.graphs.registry import UnknownGraph, graph_name_validate, graphs_check
from moderation.items.models import QueueItem
from moderation.review.items import item_create
from moderation.tests.graphs_support import TEST_GRAPHS


def test_registered_graphs_pass_the_check(settings):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    graphs_check()
    assert graph_name_validate(name="t_hitl") == "t_hitl"
    assert graph_name_validate(name=None) == graph_name_validate(name="") == "moderation"


@pytest.mark.parametrize("name", ["nope", "T_HITL", 3, ["moderation"]])
def test_unknown_name_is_refused_listing_the_registered_ones(settings, name):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    with pytest.raises(UnknownGraph, match="this server runs moderation, t_failing, t_hitl"):
        graph_name_validate(name=name)


@pytest.mark.django_db
def test_item_create_with_an_unknown_graph_creates_nothing(settings):
    settings.REVIEWQUEUE_GRAPHS = dict(TEST_GRAPHS)
    with pytest.raises(ValidationError) as refused:
        item_create(title="t", body="b", source="s", graph="no_such_graph")
    assert "unknown graph 'no_such_graph'" in refused.value.message_dict["graph"][0]
    assert not QueueItem.objects.exists()


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("moderation.tests.no_such_module:build", "cannot be imported: ModuleNotFoundError"),
        ("moderation.tests.graphs_support:no_such_builder", "cannot be imported: AttributeError"),
        ("moderation.tests.graphs_support", "expected 'module.path:callable'"),
        ("moderation.tests.graphs_support:REFUND", "is not callable"),
    ],
)
def test_a_bad_dotted_path_stops_start_up_naming_the_graph(settings, path, words):
    settings.REVIEWQUEUE_GRAPHS = {**TEST_GRAPHS, "broken": path}
    with pytest.raises(ImproperlyConfigured) as stopped:
        graphs_check()
    assert "REVIEWQUEUE_GRAPHS['broken']" in str(stopped.value) and path in str(stopped.value)
    assert words in str(stopped.value)


@pytest.mark.parametrize(
    ("graphs", "words"),
    [
        ({"t_hitl": TEST_GRAPHS["t_hitl"]}, "must register the built-in 'moderation'"),
        ({**TEST_GRAPHS, "Bad-Name": TEST_GRAPHS["t_hitl"]}, "'Bad-Name' is not a valid graph name"),
    ],
)
def test_registry_without_the_built_in_graph_or_with_a_bad_name_is_refused(settings, graphs, words):
    settings.REVIEWQUEUE_GRAPHS = graphs
    with pytest.raises(ImproperlyConfigured, match=words):
        graphs_check()


def _manage(*args: str, **env: str):
    import os
    import subprocess
    import sys

    from django.conf import settings as django_settings

    return subprocess.run(
        [sys.executable, *args],
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        env={**os.environ, "DEBUG": "true", **env},
        timeout=300,
    )


@pytest.mark.processes
def test_a_command_that_runs_no_graph_never_imports_langgraph_or_langchain(tmp_path):
    """Graphs are checked by the server, the worker and the system checks, not at app load: moderator_add
    (help, or a run on a database) costs no LangGraph import (about a second of CPU)."""
    env = {"REVIEWQUEUE_VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    for args in (["--help"], ["ghost"]):
        done = _manage("-X", "importtime", "manage.py", "moderator_add", *args, **env)
        imported = {line.rpartition("|")[2].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
        assert "django" in imported and not imported & {"langgraph", "langchain", "langchain_core"}, args
    # Negative control: a command that checks (here `check` itself) imports every registered graph.
    done = _manage("-X", "importtime", "manage.py", "check", **env)
    assert done.returncode == 0 and "langgraph.graph" in done.stderr


@pytest.mark.processes
def test_a_graph_that_cannot_be_imported_still_stops_the_server_and_every_checked_command(tmp_path):
    import os

    from django.conf import settings as django_settings

    from e2e.forked import forked_run
    from e2e.server import LiveServer, ServerError

    bad = {"REVIEWQUEUE_EXTRA_GRAPHS": "my_agent=myapp.agnet:build", "REVIEWQUEUE_VAR_DIR": str(tmp_path)}
    error = "REVIEWQUEUE_GRAPHS['my_agent'] = 'myapp.agnet:build' cannot be imported"
    env = {**os.environ, "DEBUG": "true", **bad}
    for command in (["check"], ["db_worker", "--no-reload", "--no-startup-delay"], ["recover"]):
        # Forked (e2e.forked): its settings, and so its graphs, are read after the fork, as in a fresh interpreter.
        done = forked_run(["manage.py", *command], env=env, cwd=django_settings.BASE_DIR, timeout=300)
        assert done.returncode != 0 and error in done.stderr, (command, done.stderr[-2000:])
    # Commands that run no graph skip the checks, as moderator_add (and Django's createsuperuser) do: a broken
    # graph does not stop provisioning. Here they get past it to their own first query (no database yet).
    provisioning = (
        ["verify_audit"],
        ["apiclient_create", "ci"],
        ["apiclient_webhook", "list", "ci"],
        ["team", "payments"],
        ["team_lead", "alice"],
        ["deployment_list"],
        ["deployment_webhook_rotate", "x"],
    )
    for command in provisioning:
        done = forked_run(["manage.py", *command], env=env, cwd=django_settings.BASE_DIR, timeout=300)
        assert error not in done.stderr and "no such table" in done.stderr, (command, done.stderr[-2000:])
    server = LiveServer(tmp_path / "server", extra_env=bad)
    with pytest.raises(ServerError, match=re.escape(error)):
        server.start(timeout=120)
    server.close()
