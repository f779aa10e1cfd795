"""Bench-only settings: the product's settings plus a trivial floor endpoint.

Nothing here ships in the product: ``/bench/ping`` exists only under this module, and
the ``bench`` app only stamps the moment the winner's commit is announced onto the
live event (so watchers can measure commit-to-receipt latency).
"""

from reviewqueue.settings import *  # noqa: F401,F403
from reviewqueue.settings import INSTALLED_APPS

ROOT_URLCONF = "bench.urls"
INSTALLED_APPS = [*INSTALLED_APPS, "bench.apps.BenchConfig"]
# Sessions are made directly in the database; nothing hashes a password in a timed path.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"moderation": {"handlers": ["console"], "level": "WARNING"}},
}
