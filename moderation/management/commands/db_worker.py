"""django-tasks-db's worker, plus the webhook sweep: ``manage.py db_worker`` runs both.

Listed before django_tasks_db in INSTALLED_APPS, so this command is the one Django runs.
A worker killed mid-task leaves that task claimed for good (the database backend does
not reclaim it); the sweep, in a thread of every worker, re-queues the lost deliveries.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import connection
from django_tasks_db.management.commands.db_worker import Command as DbWorkerCommand

from moderation.delivery.sending import deliveries_sweep

logger = logging.getLogger("moderation.delivery")


class Command(DbWorkerCommand):
    help = DbWorkerCommand.help + ", and re-queue webhook deliveries whose attempt was lost"

    def handle(self, *args, **options):
        threading.Thread(target=_sweep_forever, name="webhook-sweep", daemon=True).start()
        return super().handle(*args, **options)


def _sweep_forever() -> None:
    while True:
        time.sleep(settings.WEBHOOK_SWEEP_INTERVAL)
        try:
            deliveries_sweep()
        except Exception:  # a database hiccup must not end the sweeping for good
            logger.exception("webhook sweep failed; trying again in %s s", settings.WEBHOOK_SWEEP_INTERVAL)
        finally:
            connection.close()  # this thread's own connection; idle until the next sweep
