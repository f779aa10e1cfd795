"""django-tasks-db's internals that moderation.core.tasksdb names: still there, still the shape relied on.

An upgrade of the package fails here first (the version, then whichever internal moved), before a
lane or the steady worker misbehaves in a real worker.
"""

from __future__ import annotations

import ast
import inspect
from importlib.metadata import version
from pathlib import Path

from django.db import models

from moderation.core import tasksdb

ROOT = Path(__file__).resolve().parents[3]
# The keyword arguments our db_worker builds a Worker with (moderation/management/commands/db_worker.py).
WORKER_ARGUMENTS = {
    "queue_names",
    "excluded_queue_names",
    "interval",
    "batch",
    "backend_name",
    "startup_delay",
    "max_tasks",
    "worker_id",
}


def test_the_installed_version_is_the_one_whose_internals_were_read():
    assert version("django-tasks-db") == tasksdb.VETTED_VERSION, (
        "django-tasks-db changed: read moderation/core/tasksdb.py's internals against the new version "
        "(the Worker loop and its attributes, the claim, the locking helpers), then update VETTED_VERSION"
    )


def test_a_worker_takes_the_arguments_and_has_the_attributes_the_lanes_use():
    assert set(inspect.signature(tasksdb.Worker.__init__).parameters) >= WORKER_ARGUMENTS
    worker = tasksdb.Worker(
        queue_names=["*"],
        excluded_queue_names=[],
        interval=1.0,
        batch=True,
        backend_name="default",
        startup_delay=False,
        max_tasks=None,
        worker_id="probe",
    )
    for name in (*WORKER_ARGUMENTS, *tasksdb.WORKER_ATTRIBUTES):
        assert hasattr(worker, name), name
    assert worker.process_all_queues and worker.running
    assert tasksdb.worker_tasks_run(worker) == 0
    for method in ("run", "run_task"):
        assert callable(getattr(tasksdb.Worker, method)), method
    assert "db_task_result" in inspect.signature(tasksdb.Worker.run_task).parameters


def test_the_claim_and_the_locking_helpers_are_there():
    assert isinstance(tasksdb.DBTaskResult.objects.all(), models.QuerySet)
    for method in ("ready", "get_locked"):
        assert callable(getattr(tasksdb.DBTaskResult.objects.all(), method)), method
    assert list(inspect.signature(tasksdb.DBTaskResult.claim).parameters)[1:] == ["worker_id"]
    assert tasksdb.get_date_max().year >= 9999
    assert callable(tasksdb.exclusive_transaction) and callable(tasksdb.is_locked_database_exception)
    assert all(callable(getattr(tasksdb.DbWorkerCommand, m)) for m in ("add_arguments", "handle", "configure_logging"))


def test_only_the_wrapper_reaches_past_the_packages_models():
    """Every other module imports django_tasks_db's models at most (the tests' negative controls aside)."""
    outside = []
    for path in ROOT.joinpath("moderation").rglob("*.py"):
        if path == ROOT / "moderation/core/tasksdb.py" or "tests" in path.parts or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else ([a.name for a in node.names] if isinstance(node, ast.Import) else [])
            )
            outside += [
                f"{path.relative_to(ROOT)}: {n}"
                for n in names
                if n.startswith("django_tasks_db") and n != "django_tasks_db.models"
            ]
    assert outside == []
