"""On PostgreSQL, at most one start-marked checkpoint per graph thread and namespace.

The resume lock keeps a second start of a thread from running (``moderation.core.resumelock``),
but on PostgreSQL it is a session lock on Django's connection: a backend terminated under a
start releases it while the start's graph runs on (the checkpointer has connections of its
own), and a second start then finds no checkpoint yet. This index is what that second start
meets instead: its checkpoint's insert fails, and ``graph_start`` joins the first start's state.

The marker is ``moderation.graphs.runtime._START_MARK`` as of this migration. SQLite's
checkpointer (another file, ``INSERT OR REPLACE``, which would replace the first start's
checkpoint instead of failing) gets none: its lock is a ``flock`` no backend can lose.
A thread already started twice (before this index) makes the migration stop, naming it.
"""

from django.db import migrations

INDEX = "checkpoints_one_start"  # moderation.graphs.runtime.START_INDEX
PREDICATE = "metadata->>'reviewqueue_run' = 'start'"
DUPLICATES = f"""
SELECT thread_id, checkpoint_ns, count(*) FROM checkpoints WHERE {PREDICATE}
GROUP BY thread_id, checkpoint_ns HAVING count(*) > 1 ORDER BY thread_id LIMIT 20
"""
# CONCURRENTLY: the checkpoints table is written by every start and resume; building the index must not stop them.
CREATE = f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON checkpoints (thread_id, checkpoint_ns) WHERE {PREDICATE}"
DROP = f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(DUPLICATES)
        twice = cursor.fetchall()
    if twice:
        threads = ", ".join(f"{thread} ({n} starts)" for thread, _ns, n in twice)
        raise RuntimeError(
            f"graph threads already started more than once: {threads}. Each needs an operator's look "
            f"(its item's asks may name the interrupts of either start); to index anyway, clear the "
            f"'reviewqueue_run' mark of all but one start checkpoint of each, then migrate again."
        )
    schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY refuses to run in a transaction

    dependencies = [("moderation", "0030_deployment_interrupts")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
