"""On PostgreSQL, a task row inserted NOTIFYs the workers' lanes (``moderation.core.taskqueue.TaskWake``).

NOTIFY inside the enqueuing transaction is delivered when it commits, never if it rolls
back: a lane woken always finds the task committed. Notifications with the same payload in
one transaction are folded into one. SQLite has none: its lanes poll.
"""

from django.db import migrations

CHANNEL = "reviewqueue_tasks"  # moderation.core.taskqueue.TASKS_CHANNEL, as of this migration
TABLE = "django_tasks_database_dbtaskresult"

CREATE = f"""
CREATE FUNCTION reviewqueue_task_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', NEW.queue_name);
    RETURN NULL;
END $$;
CREATE TRIGGER reviewqueue_task_queued AFTER INSERT ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION reviewqueue_task_queued();
"""
DROP = f"""
DROP TRIGGER IF EXISTS reviewqueue_task_queued ON {TABLE};
DROP FUNCTION IF EXISTS reviewqueue_task_queued();
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("moderation", "0028_team_reason_rules"),
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
    ]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP))]
