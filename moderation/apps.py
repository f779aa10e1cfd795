from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class ModerationConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "moderation"

    def ready(self) -> None:
        # A graph that cannot be imported stops the server (reviewqueue.asgi), the worker and every command
        # that runs the system checks, by name; not at app load, so a process that runs no graph
        # (moderator_add) never imports LangGraph.
        checks.register(_graphs_checked)

        post_migrate.connect(_moderators_group_ensure, sender=self)
        connection_created.connect(_sqlite_audit_function_install, dispatch_uid="moderation.records.audit.sqlite")
        connection_created.connect(_postgres_pool_check_install, dispatch_uid="moderation.core.dbpool")
        from django.core.signals import got_request_exception

        from moderation.core.overload import request_exception_seen

        got_request_exception.connect(request_exception_seen, dispatch_uid="moderation.core.overload")
        import os

        from moderation.core.ioguard import ENV as IO_GUARD_ENV
        from moderation.core.ioguard import io_guard_install

        if os.environ.get(IO_GUARD_ENV):  # the test suite's (moderation.core.ioguard): never in production
            io_guard_install(report=os.environ[IO_GUARD_ENV])
        # A logout deletes its session row; moderation.live.rights tells that session's sockets.
        from moderation.live.rights import rights_signals_connect

        rights_signals_connect()
        from axes.signals import user_locked_out

        from moderation.records.metrics import metrics_lockout_record

        user_locked_out.connect(metrics_lockout_record, dispatch_uid="moderation.records.metrics.lockout")


def _graphs_checked(**kwargs) -> list[checks.CheckMessage]:
    from moderation.graphs.registry import graphs_check

    try:
        graphs_check()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="moderation.E001")]
    return []


def _moderators_group_ensure(sender, **kwargs) -> None:
    # Permissions exist only after post_migrate, so the group is wired up here.
    from django.contrib.auth.models import Group, Permission

    from moderation.core.permissions import MODERATORS_GROUP

    permission = Permission.objects.filter(content_type__app_label="moderation", codename="decide_item").first()
    if permission is not None:
        Group.objects.get_or_create(name=MODERATORS_GROUP)[0].permissions.add(permission)


def _sqlite_audit_function_install(sender, connection, **kwargs) -> None:
    # The append-only triggers on SQLite ask this function whether the guard is lifted.
    if connection.vendor == "sqlite":
        from moderation.records.audit import audit_sqlite_function_install

        audit_sqlite_function_install(wrapper=connection)


def _postgres_pool_check_install(sender, connection, **kwargs) -> None:
    # The first connection of a pool comes before this; every later one is lent through the check.
    if connection.vendor == "postgresql" and connection.pool is not None:
        from moderation.core.dbpool import pool_check_install

        pool_check_install(pool=connection.pool)
