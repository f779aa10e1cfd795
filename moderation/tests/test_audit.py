import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from moderation.audit import audit_verify
from moderation.decisions import item_decide
from moderation.models import DecisionAttempt


@pytest.fixture
def history(alice, bob, make_moderator, make_item):
    carol = make_moderator("carol")
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    item_decide(item_public_id=item.public_id, reviewer=carol, decision="reject")
    other = make_item()
    item_decide(item_public_id=other.public_id, reviewer=bob, decision="reject")
    return item


def _problems():
    return [str(p) for p in audit_verify()]


@pytest.mark.django_db
def test_intact_log_verifies(history):
    assert _problems() == []
    call_command("verify_audit")
    attempts = list(DecisionAttempt.objects.filter(item=history).order_by("seq"))
    assert [a.seq for a in attempts] == [1, 2, 3]
    assert attempts[1].prev_hash == attempts[0].entry_hash


@pytest.mark.django_db
def test_edited_entry_is_detected(history):
    DecisionAttempt.objects.filter(item=history, seq=2).update(requested="approve")
    assert any("entry 2: content does not match its hash (edited)" in p for p in _problems())
    with pytest.raises(CommandError, match="audit log broken"):
        call_command("verify_audit")


@pytest.mark.django_db
def test_edited_winner_is_detected(history, make_moderator):
    mallory = make_moderator("mallory")
    DecisionAttempt.objects.filter(item=history, seq=1).update(winner=mallory, reviewer=mallory)
    assert any("entry 1: content does not match" in p for p in _problems())


@pytest.mark.django_db
def test_deleted_middle_entry_is_detected(history):
    DecisionAttempt.objects.filter(item=history, seq=2).delete()
    problems = _problems()
    assert any("entry 3: expected entry 2" in p for p in problems)
    assert any("entry 3: does not link" in p for p in problems)


@pytest.mark.django_db
def test_deleted_last_entry_is_detected(history):
    DecisionAttempt.objects.filter(item=history, seq=3).delete()
    assert any("entries deleted" in p for p in _problems())


@pytest.mark.django_db
def test_reordered_entries_are_detected(history):
    first, second = DecisionAttempt.objects.filter(item=history).order_by("seq")[:2]
    DecisionAttempt.objects.filter(pk=first.pk).update(seq=100)
    DecisionAttempt.objects.filter(pk=second.pk).update(seq=1)
    DecisionAttempt.objects.filter(pk=first.pk).update(seq=2)
    problems = _problems()
    assert any("does not link" in p for p in problems)
    assert any("content does not match" in p for p in problems)
