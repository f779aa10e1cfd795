from django.db import migrations


def setup_checkpointer(apps, schema_editor):
    from moderation.core.checkpointer import checkpointer_setup

    checkpointer_setup()


class Migration(migrations.Migration):
    dependencies = [("moderation", "0001_initial")]

    operations = [migrations.RunPython(setup_checkpointer, migrations.RunPython.noop, elidable=False)]
