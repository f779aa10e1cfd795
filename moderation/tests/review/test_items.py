"""item_create: bad fields create nothing, and the pre-screen never holds the write lock."""

import threading
import uuid

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection

from moderation.core.checkpointer import checkpointer_get
from moderation.core.faults import fault_inject
from moderation.items.models import QueueItem
from moderation.review.items import item_create, item_start_state

FIXED_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")


def _graph_thread_exists(public_id: uuid.UUID) -> bool:
    return checkpointer_get().get_tuple({"configurable": {"thread_id": f"item-{public_id}"}}) is not None


@pytest.fixture
def fixed_id(monkeypatch):
    monkeypatch.setattr("moderation.review.items.uuid.uuid4", lambda: FIXED_ID)
    return FIXED_ID


@pytest.mark.postgres_variant
@pytest.mark.django_db
@pytest.mark.parametrize("field", ["title", "body", "source", "team"])
def test_nul_in_any_field_is_refused_and_creates_nothing(field, fixed_id):
    """Before the team's lookup (by slug, or by the source), which PostgreSQL failed with a DataError."""
    fields = {"title": "A title", "body": "A body.", "source": "test", "team": "payments"}
    fields[field] = fields[field][:3] + "\x00" + fields[field][3:]
    with pytest.raises(ValidationError) as caught:
        item_create(**fields)
    assert caught.value.message_dict[field] == [f"{field} must not contain NUL (\\u0000) characters"]
    assert not QueueItem.objects.exists()
    assert not _graph_thread_exists(fixed_id)


@pytest.mark.django_db
def test_body_over_the_limit_is_refused_naming_it_and_creates_nothing(settings, fixed_id):
    settings.ITEM_BODY_MAX_LENGTH = 50
    with pytest.raises(ValidationError) as caught:
        item_create(title="Long", body="x" * 51, source="test")
    assert caught.value.message_dict["body"] == ["body is 51 characters; the limit is 50 (ITEM_BODY_MAX_LENGTH)"]
    assert not QueueItem.objects.exists()
    assert not _graph_thread_exists(fixed_id)
    assert item_create(title="Long", body="x" * 50, source="test").body == "x" * 50


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["title", "body", "source", "item_id"])
def test_an_input_may_not_replace_what_moderators_read_and_creates_nothing(key, monkeypatch):
    """It did: a FREE MONEY body was pre-screened as the input's harmless one (risk 0)."""
    public_id = uuid.uuid4()
    monkeypatch.setattr("moderation.review.items.uuid.uuid4", lambda: public_id)
    with pytest.raises(ValidationError) as caught:
        item_create(title="Offer", body="FREE MONEY, click here", source="test", graph_input={key: "harmless", "n": 1})
    assert key in caught.value.message_dict["input"][0]
    assert not QueueItem.objects.exists() and not _graph_thread_exists(public_id)


def test_the_start_state_is_the_items_own_text_whatever_its_input_holds():
    # A row accepted before inputs were checked (queued, or recovered) starts from what moderators read too.
    item = QueueItem(
        public_id=FIXED_ID,
        title="Offer",
        body="FREE MONEY",
        source="test",
        graph_input={"body": "harmless", "title": "hi", "messages": []},
    )
    assert item_start_state(item=item) == {
        "item_id": str(FIXED_ID),
        "title": "Offer",
        "body": "FREE MONEY",
        "source": "test",
        "messages": [],
    }


@pytest.mark.django_db(transaction=True)
def test_another_writer_is_not_blocked_while_an_item_is_prescreened():
    """On SQLite the write lock is database-wide: held through a slow pre-screen, it
    would make every decision and login wait (or fail with "database is locked")."""
    if connection.vendor != "sqlite":
        pytest.skip("about SQLite's database-wide write lock")
    inside, release = threading.Event(), threading.Event()
    created = {}

    def stall(item_key):
        inside.set()
        release.wait(60)

    def create():
        try:
            created["item"] = item_create(title="Slow", body="Screened slowly.", source="test")
        finally:
            connection.close()

    with fault_inject("in_prescreen_node", stall):
        creator = threading.Thread(target=create)
        creator.start()
        try:
            assert inside.wait(10)
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout = 1000")  # fail in 1 s, not SQLite's 5
            try:
                Group.objects.create(name="written during the pre-screen")
            except OperationalError as exc:  # the write lock was held: busy after 1 s
                pytest.fail(f"a write during the pre-screen failed: {exc}")
            assert creator.is_alive()  # the pre-screen was still running
        finally:
            release.set()
            creator.join(10)
    assert QueueItem.objects.filter(pk=created["item"].pk).exists()


@pytest.mark.django_db
def test_admin_refuses_a_body_over_the_limit_on_the_form(admin_client, settings):
    settings.ITEM_BODY_MAX_LENGTH = 50
    response = admin_client.post("/admin/moderation/queueitem/add/", {"title": "Long", "body": "x" * 51, "source": "admin"})
    assert response.status_code == 200
    assert "body is 51 characters; the limit is 50 (ITEM_BODY_MAX_LENGTH)" in response.content.decode()
    assert not QueueItem.objects.exists()
