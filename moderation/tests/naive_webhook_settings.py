"""Settings for the negative control in test_deployments_server: the deployment webhook of old.

It read the thread from the deployment in the request, holding the request's database
connection (taken by the token's check) while the deployment answered.
"""

from reviewqueue.settings import *  # noqa: F403

INSTALLED_APPS = [  # noqa: F405
    "moderation.tests.naive_webhook_apps.NaiveWebhookConfig" if app == "moderation" else app
    for app in INSTALLED_APPS  # noqa: F405
]
