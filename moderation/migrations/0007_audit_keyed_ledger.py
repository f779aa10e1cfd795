"""The audit log becomes keyed (HMAC) and globally anchored, and append-only in the database.

Existing entries were plain SHA-256 chains. They are checked as such first (a broken
chain stops the migration: re-signing it would bless the tampering), then re-signed
with the current AUDIT_KEY in order, and entered into the new global ledger in the
order they were recorded. Their content digest is the item's content at migration time.

Then triggers refuse row UPDATE and DELETE on both tables unless the guard is lifted
(see moderation.records.audit.audit_guard_lifted). TRUNCATE fires no row triggers on
PostgreSQL, which is how the test suite empties tables there.
"""

import hashlib
import json

from django.db import migrations, models

TABLES = ("moderation_decisionattempt", "moderation_auditledgerentry")


def _legacy_digest(attempt, item_public_id):
    iso = lambda v: v.isoformat() if v else ""  # noqa: E731
    fields = {
        "item": item_public_id, "seq": attempt.seq, "prev": attempt.prev_hash, "reviewer": attempt.reviewer_id,
        "requested": attempt.requested, "note": attempt.note, "outcome": attempt.outcome, "winner": attempt.winner_id,
        "winner_status": attempt.winner_status, "winner_decided_at": iso(attempt.winner_decided_at),
        "detail": attempt.detail, "requested_at": iso(attempt.requested_at), "recorded_at": iso(attempt.recorded_at),
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def resign(apps, schema_editor):
    from django.conf import settings

    from moderation.records.audit import attempt_digest, audit_key_id, item_content_digest, ledger_digest

    QueueItem = apps.get_model("moderation", "QueueItem")
    DecisionAttempt = apps.get_model("moderation", "DecisionAttempt")
    AuditLedgerEntry = apps.get_model("moderation", "AuditLedgerEntry")
    if not DecisionAttempt.objects.exists():
        return
    if not settings.AUDIT_KEY:
        raise RuntimeError("AUDIT_KEY must be set to sign the existing attempts log")
    key_id, key = audit_key_id(key=settings.AUDIT_KEY), settings.AUDIT_KEY.encode()
    signed = {}
    for item in QueueItem.objects.order_by("id"):
        item_id = str(item.public_id)
        prev_old, prev_new, count = "", "", 0
        content = item_content_digest(title=item.title, body=item.body, source=item.source)
        for attempt in DecisionAttempt.objects.filter(item=item).order_by("seq"):
            if attempt.prev_hash != prev_old or _legacy_digest(attempt, item_id) != attempt.entry_hash:
                raise RuntimeError(f"the attempts log of item {item_id} is broken at entry {attempt.seq}; not re-signing it")
            prev_old, count = attempt.entry_hash, count + 1
            attempt.prev_hash, attempt.key_id, attempt.content_digest = prev_new, key_id, content
            attempt.entry_hash = attempt_digest(attempt=attempt, item_public_id=item_id, key=key)
            prev_new = attempt.entry_hash
            DecisionAttempt.objects.filter(pk=attempt.pk).update(
                prev_hash=attempt.prev_hash, key_id=key_id, content_digest=content, entry_hash=attempt.entry_hash
            )
            signed[attempt.pk] = (item_id, attempt.seq, attempt.entry_hash, attempt.recorded_at)
        if item.attempt_count != count or item.audit_head != prev_old:
            raise RuntimeError(f"the attempts log of item {item_id} does not end at its recorded head; not re-signing it")
        QueueItem.objects.filter(pk=item.pk).update(audit_head=prev_new)
    prev = ""
    order = sorted(signed.values(), key=lambda v: (v[3], v[0], v[1]))
    for seq, (item_id, attempt_seq, entry_hash, recorded_at) in enumerate(order, start=1):
        entry = AuditLedgerEntry(
            seq=seq, kind="attempt", item_public_id=item_id, attempt_seq=attempt_seq, entry_hash=entry_hash,
            recorded_at=recorded_at, prev_mac=prev, key_id=key_id,
        )
        entry.mac = ledger_digest(entry=entry, key=key)
        entry.save(force_insert=True)
        prev = entry.mac


def unsign(apps, schema_editor):
    """Back to plain chains, so that 0005's code (and a re-applied 0006) finds them whole."""
    QueueItem = apps.get_model("moderation", "QueueItem")
    DecisionAttempt = apps.get_model("moderation", "DecisionAttempt")
    for item in QueueItem.objects.filter(attempt_count__gt=0).order_by("id"):
        prev = ""
        for attempt in DecisionAttempt.objects.filter(item=item).order_by("seq"):
            attempt.prev_hash = prev
            prev = _legacy_digest(attempt, str(item.public_id))
            DecisionAttempt.objects.filter(pk=attempt.pk).update(prev_hash=attempt.prev_hash, entry_hash=prev)
        QueueItem.objects.filter(pk=item.pk).update(audit_head=prev)


def triggers_create(apps, schema_editor):
    from moderation.records.audit import GUARD_SETTING, SQLITE_GUARD_FUNCTION

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
        migrations.RunPython(resign, unsign),
        migrations.RunPython(triggers_create, triggers_drop),
    ]
