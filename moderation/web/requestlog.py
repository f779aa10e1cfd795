"""What Django's request logger reports: a lost race is an ordinary answer, not a warning.

Django logs every 4xx response on ``django.request`` at WARNING. Our 409s are a reviewer
losing a race (about 1,600 a minute when busy) or a decision refused on an item that
needs attention; both are already in the attempts log, and reconcile logs an item
needing attention at ERROR when it happens. Other 4xx responses are still logged.
"""

import logging


class ConflictFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) != 409
