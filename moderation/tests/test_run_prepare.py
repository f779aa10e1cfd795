"""`make run`'s preparation is one Django start-up (manage.py run_prepare), not five."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from e2e.forked import forked_run
from moderation.management.commands import recover

BASE_DIR = Path(__file__).resolve().parents[2]


def test_make_run_prepares_in_one_command_and_a_second_start_keeps_the_data(tmp_path):
    makefile = (BASE_DIR / "Makefile").read_text()
    run = makefile.partition("\nrun: install\n")[2].partition("\n\n")[0]
    assert "manage.py run_prepare --host $(HOST) --port $(PORT)" in run
    assert run.count("manage.py") == 1 and "python -c" not in run, run  # one Django start-up before the server's
    env = {**os.environ, "DEBUG": "true", "REVIEWQUEUE_VAR_DIR": str(tmp_path)}
    for key in ("DATABASE_URL", "REDIS_URL"):
        env.pop(key, None)
    for start in ("first", "second"):
        done = forked_run(["manage.py", "run_prepare", "--port", "8010"], env=env, cwd=BASE_DIR, timeout=600)
        assert done.returncode == 0, f"{start} start:\n{done.stdout}\n{done.stderr}"
        assert "reviewqueue is running at http://127.0.0.1:8010/" in done.stdout
        assert "demo password: review-demo-2026" in done.stdout
        assert "recover: checked" in done.stdout
    assert "Demo data: 0 users and 0 items created (existing ones kept)." in done.stdout, done.stdout
    assert "No migrations to apply." in done.stdout, done.stdout
    assert (tmp_path / "static" / "moderation").exists() or any((tmp_path / "static").iterdir())  # collectstatic ran


class _Unrepaired(recover.Command):
    def handle(self, *args, **options):
        raise CommandError("recover: 1 could not be repaired.", returncode=recover.EXIT_ITEMS_FAILED)


class _Broken(recover.Command):
    def handle(self, *args, **options):
        raise CommandError("recover crashed")


@pytest.mark.django_db
@pytest.mark.parametrize(("command", "starts"), [(_Unrepaired, True), (_Broken, False)])
def test_items_recover_could_not_repair_do_not_stop_the_start_but_a_crash_does(
    command, starts, monkeypatch, settings, tmp_path, capsys
):
    """recover's exit status 2 (items marked needs attention) starts anyway, as `make run` always did."""
    settings.STATIC_ROOT, settings.DEBUG = tmp_path, True  # seed_demo runs in development only
    from django.core import management

    real = management.load_command_class
    monkeypatch.setattr(management, "load_command_class", lambda app, name: command() if name == "recover" else real(app, name))
    if starts:
        call_command("run_prepare", "--port", "8011")
        out, err = capsys.readouterr()
        assert "recover: 1 could not be repaired." in err and "reviewqueue is running at http://127.0.0.1:8011/" in out
    else:
        with pytest.raises(CommandError, match="recover crashed"):
            call_command("run_prepare")
