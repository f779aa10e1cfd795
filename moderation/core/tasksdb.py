"""django-tasks-db as this project uses it: the one module that reaches past its public API.

The package documents its backend and its ``db_worker`` command. The worker loop (``Worker``, in
the command's module), its attributes, the row's claim and the locking helpers are internals the
lanes and the steady worker (``moderation.core.taskqueue``) and our ``db_worker`` build on. Each
one used is named here, and ``moderation/tests/core/test_tasksdb.py`` checks that each still has the
shape relied on and that the installed version is ``VETTED_VERSION``: an upgrade fails that test
first, and it says what to look at again. Nothing else imports ``django_tasks_db`` but its models.
"""

from __future__ import annotations

from django_tasks_db.management.commands.db_worker import Command as DbWorkerCommand
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.management.commands.db_worker import logger as worker_logger
from django_tasks_db.models import DBTaskResult, get_date_max
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

__all__ = [
    "VETTED_VERSION",
    "WORKER_ATTRIBUTES",
    "DBTaskResult",
    "DbWorkerCommand",
    "Worker",
    "exclusive_transaction",
    "get_date_max",
    "is_locked_database_exception",
    "worker_logger",
    "worker_tasks_run",
]

# The version whose internals were read against this module (requirements/runtime.in pins it).
VETTED_VERSION = "0.13.0"
# What the lanes read and set on a Worker besides its constructor's arguments.
WORKER_ATTRIBUTES = ("running", "process_all_queues", "_run_tasks")


def worker_tasks_run(worker: Worker) -> int:
    """How many tasks ``worker``'s loop has run (the package's private count, which ``max_tasks`` bounds)."""
    count: int = worker._run_tasks
    return count
