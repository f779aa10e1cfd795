"""The audit log becomes keyed (HMAC) and globally anchored, and append-only in the database.

No release ever wrote the plain SHA-256 chains that came before: a database holding one is a
development database of that time, and this migration refuses it rather than carry a path to
re-sign it (start from a fresh database).

Then triggers refuse row UPDATE and DELETE on both tables unless the guard is lifted
(moderation.records.audit.audit_guard_lifted). TRUNCATE fires no row triggers on
PostgreSQL, which is how the test suite empties tables there.
"""

from django.db import migrations, models

TABLES = ("moderation_decisionattempt", "moderation_auditledgerentry")
# moderation.records.audit's names for the guard, frozen as of this migration.
GUARD_SETTING = "reviewqueue.audit_guard_lifted"
SQLITE_GUARD_FUNCTION = "reviewqueue_audit_guard_lifted"


def unsigned_refuse(apps, schema_editor):
    if apps.get_model("moderation", "DecisionAttempt").objects.exists():
        raise RuntimeError(
            "this database holds an attempts log from before the audit log was signed, which no release wrote: "
            "migrate a fresh database instead"
        )


def triggers_create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(
                f"""CREATE FUNCTION {table}_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF current_setting('{GUARD_SETTING}', true) = 'on' THEN
                        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
                        RETURN NEW;
                    END IF;
                    RAISE EXCEPTION '% on %: the audit log is append-only', TG_OP, TG_TABLE_NAME
                        USING ERRCODE = 'restrict_violation';
                END $$""",
                None,  # no parameters: the % in RAISE is PL/pgSQL's, not a placeholder
            )
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {table}_append_only()"
            )
        elif vendor == "sqlite":
            for op in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"WHEN NOT {SQLITE_GUARD_FUNCTION}() "
                    f"BEGIN SELECT RAISE(ABORT, '{op} on {table}: the audit log is append-only'); END"
                )


def triggers_drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {table}_append_only()")
        elif vendor == "sqlite":
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op}")


class Migration(migrations.Migration):

    dependencies = [
        ('moderation', '0006_lab_marker'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditLedgerEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.PositiveBigIntegerField(unique=True)),
                ('kind', models.CharField(choices=[('attempt', 'Attempt'), ('purge', 'Purge')], max_length=16)),
                ('item_public_id', models.UUIDField()),
                ('attempt_seq', models.PositiveIntegerField(default=0)),
                ('entry_hash', models.CharField(blank=True, default='', max_length=64)),
                ('recorded_at', models.DateTimeField()),
                ('prev_mac', models.CharField(blank=True, default='', max_length=64)),
                ('mac', models.CharField(max_length=64)),
                ('key_id', models.CharField(max_length=16)),
            ],
            options={
                'verbose_name_plural': 'audit ledger entries',
                'ordering': ['seq'],
            },
        ),
        migrations.AddField(
            model_name='decisionattempt',
            name='content_digest',
            field=models.CharField(default='', max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='decisionattempt',
            name='key_id',
            field=models.CharField(default='', max_length=16),
            preserve_default=False,
        ),
        migrations.RunPython(unsigned_refuse, migrations.RunPython.noop),
        migrations.RunPython(triggers_create, triggers_drop),
    ]
