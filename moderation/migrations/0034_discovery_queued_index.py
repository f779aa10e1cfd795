"""On PostgreSQL, an index for a deployment webhook's one question: is this thread's discovery already queued?

Each webhook asks it (``moderation.review.deployments._discovery_queued``) before it queues one.
Without the index the answer read every queued discovery's arguments: 0.4 ms with none queued,
3 ms behind 10,000 and 13 ms behind 50,000, which is what a stopped worker or a slow deployment
leaves while a fleet's runs keep ending. The index holds only queued (``READY``) discoveries, so it
stays as small as the backlog and the answer does not grow with it.

The task's path is ``deployment_discover_task``'s as of this migration
(``moderation.tests.review.test_deployments`` fails if the check stops using the index). SQLite, the
single-host default, gets none: its backlogs stay small.
"""

from django.db import migrations

INDEX = "reviewqueue_discovery_queued"  # moderation.review.deployments.DISCOVERY_QUEUED_INDEX
TABLE = "django_tasks_database_dbtaskresult"
PREDICATE = "status = 'READY' AND task_path = 'moderation.review.deployments.deployment_discover_task'"
# CONCURRENTLY: every submit, decision and webhook writes the task table; building the index must not stop them.
CREATE = f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON {TABLE} ((args_kwargs -> 'args')) WHERE {PREDICATE}"
DROP = f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}"


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY refuses to run in a transaction

    dependencies = [
        ("moderation", "0033_reason_code_kind"),
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
    ]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False)]
