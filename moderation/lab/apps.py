"""The race lab, the fault injection and the soak's judge: a development app of its own.

Installed for development, the tests and the demo (DEBUG on), and in production only when an
operator sets REVIEWQUEUE_LAB=true (reviewqueue.settings); without it there is no /lab/, no
``racelab`` command, and REVIEWQUEUE_FAULTS is refused at start-up. Production code never imports
this package (.importlinter).
"""

from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "moderation.lab"
    label = "lab"
    verbose_name = "Race lab"

    def ready(self) -> None:
        from django.conf import settings

        from moderation.lab.faults import faults_install_from_setting

        if settings.REVIEWQUEUE_FAULTS:
            faults_install_from_setting(settings.REVIEWQUEUE_FAULTS)
