"""The admin: decided items are view-only, the audit head is never editable, edits are on record."""

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from moderation.items.models import QueueItem
from moderation.review.decisions import item_decide
from moderation.review.items import ItemNotEditable, item_content_edit


def _change_url(item):
    return reverse("admin:moderation_queueitem_change", args=[item.pk])


def _form(item, **changes):
    data = {"title": item.title, "body": item.body, "source": item.source, "_save": "Save"}
    return {**data, **changes}


@pytest.mark.django_db
def test_decided_item_is_view_only(admin_client, alice, make_item):
    item = make_item(body="The decided text.")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    page = admin_client.get(_change_url(item)).content.decode()
    assert 'name="body"' not in page and "The decided text." in page
    response = admin_client.post(_change_url(item), _form(item, body="Rewritten after the fact."))
    assert response.status_code == 403
    assert QueueItem.objects.get(pk=item.pk).body == "The decided text."
    assert not LogEntry.objects.exists()


@pytest.mark.django_db
def test_audit_head_and_count_are_never_editable(admin_client, make_item):
    item = make_item()
    page = admin_client.get(_change_url(item)).content.decode()
    assert 'name="title"' in page
    assert 'name="audit_head"' not in page and 'name="attempt_count"' not in page
    admin_client.post(_change_url(item), _form(item, audit_head="f" * 64, attempt_count="7"))
    item.refresh_from_db()
    assert (item.audit_head, item.attempt_count) == ("", 0)


@pytest.mark.django_db
def test_pending_item_edit_is_logged_with_what_it_replaced(admin_client, make_item):
    item = make_item(title="Old title")
    response = admin_client.post(_change_url(item), _form(item, title="New title"))
    assert response.status_code == 302
    assert QueueItem.objects.get(pk=item.pk).title == "New title"
    entry = LogEntry.objects.get(object_id=str(item.pk))
    assert entry.get_change_message() == "changed title from 'Old title' to 'New title'"
    page = admin_client.get(_change_url(item)).content.decode()
    assert "changed title from &#x27;Old title&#x27; to &#x27;New title&#x27;" in page


@pytest.mark.django_db
def test_edit_refused_if_the_item_was_decided_while_the_form_was_open(admin_client, alice, make_item):
    item = make_item(body="What alice saw.")
    form_opened = admin_client.get(_change_url(item))
    assert form_opened.status_code == 200
    # The admin's permission check saw a pending item; the decision lands before the save.
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    with pytest.raises(ItemNotEditable, match="approved"):
        item_content_edit(item_pk=item.pk, changes={"body": "Swapped."})
    assert QueueItem.objects.get(pk=item.pk).body == "What alice saw."
