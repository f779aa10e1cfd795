"""Settings for the negative control in test_api_server: submits pick random thread ids.

That is what a check-then-insert submit does (``items.item_create``'s uuid4): concurrent
submits of one key each start a graph thread before one row insert wins.
"""

from reviewqueue.settings import *  # noqa: F403

INSTALLED_APPS = [  # noqa: F405
    "moderation.tests.naive_submit_apps.NaiveSubmitConfig" if app == "moderation" else app
    for app in INSTALLED_APPS  # noqa: F405
]
