"""The base of the commands that provision accounts, teams, clients and deployments, or read the audit log."""

from django.core.management.base import BaseCommand


class ProvisioningCommand(BaseCommand):
    """A command that runs no graph: as Django's ``createsuperuser``, it skips the system checks, which
    import every registered graph (a CPU-second per run), so a broken graph never stops provisioning."""

    requires_system_checks = []
