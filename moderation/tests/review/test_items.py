"""item_create: bad fields create nothing, and the pre-screen never holds the write lock."""

import threading
import uuid

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection

from moderation.core.checkpointer import checkpointer_get
from moderation.core.faults import fault_inject
from moderation.models import QueueItem
from moderation.review.items import item_create

FIXED_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")


def _graph_thread_exists(public_id: uuid.UUID) -> bool:
    return checkpointer_get().get_tuple({"configurable": {"thread_id": f"item-{public_id}"}}) is not None


@pytest.fixture
def fixed_id(monkeypatch):
    monkeypatch.setattr("moderation.review.items.uuid.uuid4", lambda: FIXED_ID)
    return FIXED_ID


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["title", "body", "source"])
def test_nul_in_any_field_is_refused_and_creates_nothing(field, fixed_id):
    fields = {"title": "A title", "body": "A body.", "source": "test"}
    fields[field] = fields[field][:3] + "\x00" + fields[field][3:]
    with pytest.raises(ValidationError) as caught:
        item_create(**fields)
    assert "Null characters are not allowed." in caught.value.message_dict[field]
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
    response = admin_client.post(
        "/admin/moderation/queueitem/add/", {"title": "Long", "body": "x" * 51, "source": "admin"}
    )
    assert response.status_code == 200
    assert "body is 51 characters; the limit is 50 (ITEM_BODY_MAX_LENGTH)" in response.content.decode()
    assert not QueueItem.objects.exists()
