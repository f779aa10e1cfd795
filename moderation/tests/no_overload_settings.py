"""Settings for the negative control in test_overload: no ``DatabaseUnavailableMiddleware``."""

from reviewqueue.settings import *  # noqa: F403

MIDDLEWARE = [m for m in MIDDLEWARE if m != "moderation.core.overload.DatabaseUnavailableMiddleware"]  # noqa: F405
