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
