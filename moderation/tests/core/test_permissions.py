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
        f"{name} is a moderator: they can approve and reject items." for name in ("zoe", "yan", "xia")]
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
