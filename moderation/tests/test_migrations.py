"""Migration 0007: a database with an unsigned attempts log (no release wrote one) is refused.
Migration 0031: a thread already started twice stops it, named, before any index is built."""

import importlib
import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from moderation.graphs.runtime import START_INDEX
from moderation.records.audit import audit_verify
from moderation.tests.graphs_support import one_start_index_dropped

BEFORE, AFTER = ("moderation", "0006_lab_marker"), ("moderation", "0007_audit_keyed_ledger")


def _unsigned_log_write(apps):
    """One attempt on one item, as the code before 0007 wrote it (unsigned; no release did)."""
    User, Item, Attempt = (
        apps.get_model(*m) for m in (("auth", "User"), ("moderation", "QueueItem"), ("moderation", "DecisionAttempt"))
    )
    alice = User.objects.create(username="alice")
    now = timezone.now()
    item = Item.objects.create(
        title="t", body="b", source="s", thread_id="item-x", status="approved", decided_by=alice, decided_at=now
    )
    Attempt.objects.create(
        item=item,
        reviewer=alice,
        requested="approve",
        outcome="won",
        winner=alice,
        winner_status="approved",
        winner_decided_at=now,
        requested_at=now,
        recorded_at=now,
        seq=1,
        prev_hash="",
        entry_hash="0" * 64,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("unsigned", [False, True])
def test_0007_signs_nothing_old_and_refuses_a_database_with_an_unsigned_log(unsigned):
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    executor.loader.build_graph()
    if unsigned:
        _unsigned_log_write(executor.loader.project_state([BEFORE]).apps)
    executor = MigrationExecutor(connection)
    if unsigned:
        with pytest.raises(RuntimeError, match="an attempts log from before the audit log was signed, which no release wrote"):
            executor.migrate([AFTER])
        apps = executor.loader.project_state([BEFORE]).apps
        apps.get_model("moderation", "DecisionAttempt").objects.all().delete()  # 0006 had no triggers
        apps.get_model("moderation", "QueueItem").objects.all().delete()
    executor.migrate([AFTER])
    call_command("migrate", "moderation", verbosity=0)  # later migrations, which today's models need
    assert [p.problem for p in audit_verify().problems] == []


def _start_index_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [START_INDEX])
        return cursor.fetchone()[0] == 1


@pytest.mark.postgres_variant
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the index is PostgreSQL's (SQLite's lock cannot be lost)")
@pytest.mark.django_db(transaction=True)
def test_0031_names_the_threads_already_started_twice_and_builds_no_index():
    migration = importlib.import_module("moderation.migrations.0031_checkpoints_one_start")
    start = json.dumps({"reviewqueue_run": "start"})
    with one_start_index_dropped():  # as a database from before 0031 is
        with connection.cursor() as cursor:
            for thread, checkpoint in (("started-twice", "1"), ("started-twice", "2"), ("started-once", "1")):
                cursor.execute(
                    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata) "
                    "VALUES (%s, '', %s, '{}', %s)",
                    [thread, checkpoint, start],
                )
        with (
            connection.schema_editor(atomic=False) as editor,
            pytest.raises(RuntimeError, match=r"already started more than once: started-twice \(2 starts\)\. "),
        ):
            migration.create(None, editor)
        assert not _start_index_exists()
        with connection.cursor() as cursor:  # the operator's way out, as the error words it: one start mark left
            cursor.execute("UPDATE checkpoints SET metadata = '{}' WHERE thread_id = 'started-twice' AND checkpoint_id = '2'")
        with connection.schema_editor(atomic=False) as editor:
            migration.create(None, editor)
        assert _start_index_exists()
        with connection.cursor() as cursor:  # the context puts back the index it dropped
            cursor.execute(f"DROP INDEX {START_INDEX}")
            cursor.execute("DELETE FROM checkpoints WHERE thread_id IN ('started-twice', 'started-once')")
