import importlib

from django.db import migrations, models

# SQLite rebuilds the attempts table to add its columns, dropping the audit triggers: put them back as 0011 does.
sqlite_triggers_restore = importlib.import_module("moderation.migrations.0011_review_asks").sqlite_triggers_restore

DEFAULT_REASONS = [
    ("spam", "Spam or advertising"),
    ("abuse", "Abusive, harassing or hateful"),
    ("off_topic", "Off topic"),
    ("duplicate", "Duplicate"),
    ("other", "Other (say why in the note)"),
]


def reasons_seed(apps, schema_editor):
    ReasonCode = apps.get_model("moderation", "ReasonCode")
    for n, (code, label) in enumerate(DEFAULT_REASONS):
        ReasonCode.objects.get_or_create(code=code, defaults={"label": label, "ordering": n * 10})


def reasons_unseed(apps, schema_editor):
    apps.get_model("moderation", "ReasonCode").objects.filter(code__in=[code for code, _ in DEFAULT_REASONS]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('moderation', '0013_item_claims'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReasonCode',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('code', models.SlugField(max_length=32, unique=True)),
                ('label', models.CharField(max_length=100)),
                ('active', models.BooleanField(default=True)),
                ('ordering', models.PositiveSmallIntegerField(default=0)),
            ],
            options={
                'ordering': ['ordering', 'code'],
            },
        ),
        migrations.AddField(
            model_name='decisionattempt',
            name='origin',
            field=models.CharField(blank=True, choices=[('dashboard', 'Dashboard'), ('api', 'API'), ('lab', 'Race lab')], default='', max_length=16),
        ),
        migrations.AddField(
            model_name='decisionattempt',
            name='reason',
            field=models.CharField(blank=True, default='', max_length=32),
        ),
        migrations.AddField(
            model_name='reviewask',
            name='reason',
            field=models.CharField(blank=True, default='', max_length=32),
        ),
        migrations.RunPython(sqlite_triggers_restore, migrations.RunPython.noop),
        migrations.RunPython(reasons_seed, reasons_unseed),
    ]
