from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import migrations, models

SEARCH_INDEX = "item_search_gin"
# moderation.models.queue_rank and its steps, frozen as of this migration.
RANK_PRIORITY_STEP = timedelta(hours=6)
RANK_RISK_STEP = timedelta(minutes=3)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def queue_rank(*, priority, risk, created_at):
    return (created_at - priority * RANK_PRIORITY_STEP - risk * RANK_RISK_STEP - _EPOCH) // timedelta(microseconds=1)


def ranks_fill(apps, schema_editor):
    """Existing items get the rank they would have had at creation (the formula in models)."""
    QueueItem = apps.get_model("moderation", "QueueItem")
    batch = []
    rows = QueueItem.objects.using(schema_editor.connection.alias).only("id", "created_at", "priority", "risk")
    for item in rows.iterator(chunk_size=2000):
        item.rank = queue_rank(priority=item.priority, risk=item.risk, created_at=item.created_at)
        batch.append(item)
        if len(batch) == 2000:
            QueueItem.objects.bulk_update(batch, ["rank"])
            batch = []
    QueueItem.objects.bulk_update(batch, ["rank"])


def _search_index():
    from django.contrib.postgres.indexes import GinIndex
    from django.contrib.postgres.search import SearchVector

    # The very expression moderation.records.selectors searches with; a test checks the planner uses it.
    return GinIndex(SearchVector("title", "body", config="english"), name=SEARCH_INDEX)


def search_index_create(apps, schema_editor):
    """PostgreSQL only: SQLite has no GIN, and its queue search is a plain substring match."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(apps.get_model("moderation", "QueueItem"), _search_index())


def search_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(apps.get_model("moderation", "QueueItem"), _search_index())


class Migration(migrations.Migration):

    dependencies = [
        ('moderation', '0014_reason_codes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='queueitem',
            name='rank',
            # moderation.models.QueueRankField: a bigint column to the database and to migrations.
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(ranks_fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='queueitem',
            index=models.Index(fields=['status', 'is_lab', 'rank', 'id'], name='item_status_lab_rank_idx'),
        ),
        migrations.RunPython(search_index_create, search_index_drop),
    ]
