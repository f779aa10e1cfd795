from django.db import migrations, models
from django.db.models import Count


def pending_fill(apps, schema_editor):
    """Start the pending counters (moderation.records.counts) from a real COUNT of the items already pending."""
    QueueItem = apps.get_model("moderation", "QueueItem")
    PendingCounter = apps.get_model("moderation", "PendingCounter")
    # The bands as moderation.records.counts.priority_band draws them (frozen here, as a migration must be).
    totals: dict[tuple, int] = {}
    rows = (
        QueueItem.objects.using(schema_editor.connection.alias).filter(is_lab=False, status="pending").order_by()
        .values("team_id", "graph", "priority").annotate(total=Count("id"))
    )
    for row in rows:
        band = "high" if row["priority"] >= 10 else "low" if row["priority"] < 0 else "normal"
        key = (row["team_id"] or 0, row["graph"], band)
        totals[key] = totals.get(key, 0) + row["total"]
    PendingCounter.objects.bulk_create([
        PendingCounter(team_key=team, graph=graph, band=band, shard=0, n=n) for (team, graph, band), n in totals.items()
    ])


class Migration(migrations.Migration):

    dependencies = [
        ("moderation", "0020_team_policy_override"),
    ]

    operations = [
        migrations.CreateModel(
            name="PendingCounter",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("team_key", models.PositiveIntegerField()),
                ("graph", models.CharField(max_length=64)),
                ("band", models.CharField(max_length=8)),
                ("shard", models.PositiveSmallIntegerField()),
                ("n", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("team_key", "graph", "band", "shard"), name="pending_counter_key"),
                ],
            },
        ),
        migrations.RunPython(pending_fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="queueitem",
            index=models.Index(condition=models.Q(("is_lab", False), ("status", "pending")), fields=["team", "created_at"],
                               name="item_pending_team_age_idx"),
        ),
    ]
