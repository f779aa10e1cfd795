import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from moderation.core.permissions import user_can_decide


def _user(username: str):
    return get_user_model().objects.get(username=username)


@pytest.mark.django_db
def test_moderator_add_makes_a_user_a_moderator_and_remove_takes_it_away(make_viewer, capsys):
    make_viewer("zoe")
    assert not user_can_decide(user=_user("zoe"))

    call_command("moderator_add", "zoe")
    call_command("moderator_add", "zoe")  # twice changes nothing
    assert user_can_decide(user=_user("zoe"))
    assert _user("zoe").groups.count() == 1
    assert "zoe is a moderator" in capsys.readouterr().out

    call_command("moderator_add", "zoe", "--remove")
    assert not user_can_decide(user=_user("zoe"))
    assert "zoe is no longer a moderator" in capsys.readouterr().out


@pytest.mark.django_db
def test_moderator_add_says_when_a_removed_user_can_still_decide(django_user_model, capsys):
    django_user_model.objects.create_superuser("root", password="pw-for-tests-1")
    call_command("moderator_add", "root", "--remove")
    assert "can still decide" in capsys.readouterr().out


@pytest.mark.django_db
def test_moderator_add_refuses_an_unknown_user_and_changes_nothing():
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("moderator_add", "ghost")
    assert not get_user_model().objects.filter(username="ghost").exists()


@pytest.mark.django_db
def test_moderator_add_takes_several_users_in_one_run_and_removes_them_too(make_viewer, capsys):
    for name in ("zoe", "yan", "xia"):
        make_viewer(name)
    call_command("moderator_add", "zoe", "yan", "xia")
    assert all(user_can_decide(user=_user(name)) for name in ("zoe", "yan", "xia"))
    assert capsys.readouterr().out.splitlines() == [
        f"{name} is a moderator: they can approve and reject items." for name in ("zoe", "yan", "xia")
    ]
    call_command("moderator_add", "zoe", "xia", "--remove")
    assert [user_can_decide(user=_user(name)) for name in ("zoe", "yan", "xia")] == [False, True, False]
    assert capsys.readouterr().out.splitlines() == ["zoe is no longer a moderator.", "xia is no longer a moderator."]


@pytest.mark.django_db
@pytest.mark.parametrize("remove", [False, True])
def test_moderator_add_with_an_unknown_name_among_several_changes_nobody(make_viewer, make_moderator, remove):
    make_viewer("zoe")
    make_moderator("yan")
    with pytest.raises(CommandError, match="no user named 'ghost', 'spook'.*nobody was changed"):
        call_command("moderator_add", "zoe", "ghost", "yan", "spook", *(["--remove"] if remove else []))
    assert [user_can_decide(user=_user(name)) for name in ("zoe", "yan")] == [False, True]


PASSWORD = "a-long-provisioned-pass-2026"


@pytest.mark.django_db
def test_moderator_add_creates_a_moderator_with_a_password_from_the_environment_without_a_prompt(client, monkeypatch, capsys):
    monkeypatch.setenv("ANN_PASSWORD", PASSWORD)
    call_command("moderator_add", "ann", "--password-from-env", "ANN_PASSWORD")
    assert "ann is a moderator" in capsys.readouterr().out
    answer = client.post("/accounts/login/", {"username": "ann", "password": PASSWORD})  # the real login form
    assert answer.status_code == 302 and client.get("/").status_code == 200
    ann = get_user_model().objects.get(username="ann")
    assert user_can_decide(user=ann) and not ann.is_staff and not ann.is_superuser
    # A provisioning script run again changes nothing: the account keeps its password.
    monkeypatch.setenv("ANN_PASSWORD", "another-long-pass-2026")
    call_command("moderator_add", "ann", "--password-from-env", "ANN_PASSWORD")
    assert "ann already exists; its password is unchanged." in capsys.readouterr().out
    assert get_user_model().objects.get(username="ann").check_password(PASSWORD)


@pytest.mark.django_db
@pytest.mark.parametrize("source", ["file", "stdin"])
def test_moderator_add_takes_the_password_from_a_file_or_standard_input(source, tmp_path, monkeypatch, capsys):
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")
    if source == "stdin":
        monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    call_command("moderator_add", "bea", "--password-file", "-" if source == "stdin" else str(path))
    bea = get_user_model().objects.get(username="bea")
    assert bea.check_password(PASSWORD) and user_can_decide(user=bea)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["--password-from-env", "UNSET_PASSWORD"], {}, "--password-from-env: UNSET_PASSWORD is empty or not set"),
        (["--password-from-env", "WEAK"], {"WEAK": "12345678"}, "This password is too common."),
        (["--password-from-env", "WEAK"], {"WEAK": "cy"}, "This password is too short."),
        (["--password-file", "/nonexistent/password"], {}, "--password-file: No such file or directory"),
    ],
)
def test_moderator_add_refuses_a_missing_or_weak_password_and_creates_nothing(args, env, error, monkeypatch):
    monkeypatch.delenv("UNSET_PASSWORD", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError, match=re.escape(error)):
        call_command("moderator_add", "cy", *args)
    assert not get_user_model().objects.filter(username="cy").exists()


@pytest.mark.django_db
def test_moderator_add_takes_one_user_per_password_and_never_the_password_itself(monkeypatch):
    monkeypatch.setenv("P", PASSWORD)
    with pytest.raises(CommandError, match="a password option takes one username"):
        call_command("moderator_add", "dee", "eve", "--password-from-env", "P")
    with pytest.raises(CommandError, match="a password option takes one username"):
        call_command("moderator_add", "dee", "--remove", "--password-from-env", "P")
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("moderator_add", "dee", "--password-from-env", "P", "--password-file", "-")
    assert not get_user_model().objects.filter(username__in=["dee", "eve"]).exists()


@pytest.mark.django_db
def test_team_lead_grants_the_team_page_of_the_leads_teams_and_remove_takes_it_away(payments, alice, make_moderator, capsys):
    from django.test import Client

    client = Client()
    client.force_login(alice)
    assert client.get("/team/").status_code == 403
    call_command("team_lead", "alice")
    call_command("team_lead", "alice")  # twice changes nothing
    assert "alice is a team lead: they see the team page (/team/) of Payments." in capsys.readouterr().out
    assert _user("alice").user_permissions.count() == 1
    assert client.get("/team/").status_code == 200
    make_moderator("zed")
    call_command("team_lead", "zed")
    assert "zed is a team lead, but a member of no team: add them to one (manage.py team <slug> --add zed)" in (
        capsys.readouterr().out
    )
    call_command("team_lead", "alice", "--remove")
    assert "alice is no longer a team lead." in capsys.readouterr().out
    assert client.get("/team/").status_code == 403


@pytest.mark.django_db
def test_team_lead_with_an_unknown_name_changes_nobody(alice):
    with pytest.raises(CommandError, match="no user named 'mallory': create them first.*nobody was changed"):
        call_command("team_lead", "alice", "mallory")
    assert not _user("alice").user_permissions.exists()
