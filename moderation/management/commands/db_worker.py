"""django-tasks-db's worker, plus the sweeps: ``manage.py db_worker`` runs them all.

Listed before django_tasks_db in INSTALLED_APPS, so this command is the one Django runs.
It processes every queue by default: ``apply`` (graphs resumed after decisions,
``moderation.apply``) and ``default`` (webhook deliveries).

A worker killed mid-task leaves that task claimed for good (the database backend does
not reclaim it); the sweep, in a thread of every worker, queues again what such a task
left undone: webhook deliveries whose lease ran out, and decisions not yet applied.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import connection
from django_tasks_db.management.commands.db_worker import Command as DbWorkerCommand

from moderation.apply import applies_sweep
from moderation.delivery.sending import deliveries_sweep

logger = logging.getLogger("moderation.worker")


class Command(DbWorkerCommand):
    help = DbWorkerCommand.help + "; every queue by default; and queue again what a killed worker left undone"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.set_defaults(queue_name="*")

    def handle(self, *args, **options):
        threading.Thread(target=_sweep_forever, name="worker-sweep", daemon=True).start()
        return super().handle(*args, **options)


def _sweep_forever() -> None:
    while True:
        time.sleep(settings.WEBHOOK_SWEEP_INTERVAL)
        for sweep in (applies_sweep, deliveries_sweep):
            try:
                sweep()
            except Exception:  # a database hiccup must not end the sweeping for good
                logger.exception("%s failed; trying again in %s s", sweep.__name__, settings.WEBHOOK_SWEEP_INTERVAL)
        connection.close()  # this thread's own connection; idle until the next sweep
