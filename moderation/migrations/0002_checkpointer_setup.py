"""The LangGraph checkpointer's tables, created by the library's own setup (idempotent).

Where the checkpoints live is frozen here as of this migration (moderation.core.checkpointer
reads it the same way at run time): a SQLite file beside the database's, or the same PostgreSQL
database, reached through SESSION_DATABASE_URL when one is set.
"""

import sqlite3
from pathlib import Path

from django.conf import settings
from django.db import migrations


def setup_checkpointer(apps, schema_editor):
    db = schema_editor.connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        from langgraph.checkpoint.sqlite import SqliteSaver

        name = Path(str(db["NAME"]))
        conn = sqlite3.connect(str(name.with_name(f"{name.stem}-checkpoints.sqlite3")), timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            SqliteSaver(conn).setup()
        finally:
            conn.close()
        return
    import dj_database_url
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.conninfo import make_conninfo
    from psycopg.rows import dict_row

    if settings.SESSION_DATABASE_URL:  # a session-mode pooler (or PostgreSQL itself) beside a transaction-mode one
        db = dict(dj_database_url.parse(settings.SESSION_DATABASE_URL))
    target = make_conninfo(
        host=db.get("HOST") or "", port=str(db.get("PORT") or ""), dbname=db["NAME"], user=db.get("USER") or "",
        password=db.get("PASSWORD") or "",
    )
    # setup() runs CREATE INDEX CONCURRENTLY, which refuses to run in a transaction.
    with psycopg.connect(target, autocommit=True, row_factory=dict_row) as conn:
        PostgresSaver(conn).setup()


class Migration(migrations.Migration):
    dependencies = [("moderation", "0001_initial")]

    operations = [migrations.RunPython(setup_checkpointer, migrations.RunPython.noop, elidable=False)]
