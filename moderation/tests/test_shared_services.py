"""The tests share one PostgreSQL server with each other (two passes, two workers each) and with
whatever else runs on the machine: a test may end only its own database's backends.

A Node test once ended every backend holding an advisory lock on the server, and with them the
pooled connections of a cluster test running beside it in the other pass (a moderator's decision
answered 503 "the database connection was lost" in two CI runs, 2026-12-05).
"""

from __future__ import annotations

import re
import subprocess

from django.conf import settings

# A statement that ends backends chosen by a query (not one given pid), up to its closing quote.
_BY_QUERY = re.compile(r"pg_terminate_backend\(pid\)[^\"'`]*")


def terminations_unscoped(source: str) -> list[str]:
    """The statements in ``source`` that end backends found by a query not limited to one database."""
    joined = re.sub(r"[\"']\s*\n\s*[\"']", "", source)  # a statement written as adjacent string literals
    return [m.group(0) for m in _BY_QUERY.finditer(joined) if not re.search(r"datname|database\s*=", m.group(0))]


def test_every_test_that_ends_backends_ends_only_its_own_databases():
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.ts"], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    ).stdout.split()
    sources = {
        path: (settings.BASE_DIR / path).read_text()
        for path in files
        if path != "moderation/tests/test_shared_services.py"  # its controls
    }
    assert sum(1 for source in sources.values() if "pg_terminate_backend(pid)" in source) >= 5
    found = {path: terminations_unscoped(source) for path, source in sources.items()}
    assert {path: statements for path, statements in found.items() if statements} == {}


def test_negative_control_the_statement_that_ended_every_databases_advisory_lock_holders_is_seen():
    old = """await pool.query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()");"""
    scoped = """"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()","""
    assert len(terminations_unscoped(old)) == 1
    assert terminations_unscoped(scoped) == []
