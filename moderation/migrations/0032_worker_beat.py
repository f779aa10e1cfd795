"""Task workers' heartbeats (``moderation.records.workers``): what /readyz and the staff banner read."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('moderation', '0031_checkpoints_one_start'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkerBeat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('worker_id', models.CharField(max_length=200, unique=True)),
                ('host', models.CharField(max_length=255)),
                ('pid', models.PositiveIntegerField()),
                ('metrics_port', models.PositiveIntegerField(default=0)),
                ('started_at', models.DateTimeField()),
                ('beat_at', models.DateTimeField(db_index=True)),
            ],
        ),
    ]
