import json
import uuid

import pytest
from django.urls import reverse

from moderation.items.models import ItemStatus, QueueItem
from moderation.records.models import DecisionAttempt
from moderation.review.decisions import item_decide
from moderation.review.items import lab_item_create
from moderation.tests.graphs_support import item_resumes, item_waiting_on


def _item_url(item):
    return reverse("moderation:item", args=[item.public_id])


def _api_url(item_or_id):
    return reverse("moderation:api-decide", args=[getattr(item_or_id, "public_id", item_or_id)])


def _post_json(client, url, payload, **extra):
    return client.post(url, data=json.dumps(payload), content_type="application/json", **extra)


@pytest.mark.django_db
def test_pages_require_login(client, make_item):
    item = make_item()
    for url in (reverse("moderation:queue"), _item_url(item)):
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login"))


@pytest.mark.django_db
def test_login_form_logs_a_moderator_in(client, alice):
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post(reverse("login"), {"username": "alice", "password": "pw-for-tests-1"})
    assert response.status_code == 302 and response.url == reverse("moderation:queue")


@pytest.mark.django_db
def test_queue_lists_pending_oldest_first_with_counts_and_payload(client, alice, bob, make_item):
    first = make_item(title="First", body="Visit http://spam.test now")
    make_item(title="Second")
    decided = make_item(title="Decided")
    item_decide(item_public_id=decided.public_id, reviewer=bob, decision="reject")
    client.force_login(alice)
    response = client.get(reverse("moderation:queue"))
    html = response.content.decode()
    assert response.status_code == 200
    assert html.index("First") < html.index("Second")
    assert f'data-item="{first.public_id}"' in html and f'data-item="{decided.public_id}"' not in html
    assert "1 link" in html  # the graph's pre-screen flags are shown
    assert response.context["counts"].pending == 2
    assert response.context["counts"].decided_today == 1


@pytest.mark.django_db
def test_item_page_shows_what_the_graph_asks_and_buttons(client, alice, make_item):
    item = make_item(title="Loud", body="BUY NOW AND CLICK HERE, THIS IS ALL CAPS TEXT")
    client.force_login(alice)
    html = client.get(_item_url(item)).content.decode()
    assert "Review requested" in html and "shouting" in html
    assert 'value="approve"' in html and 'value="reject"' in html


@pytest.mark.django_db
def test_item_page_for_unknown_item_is_404(client, alice):
    client.force_login(alice)
    assert client.get(reverse("moderation:item", args=[uuid.uuid4()])).status_code == 404
    assert client.get(reverse("moderation:item", args=["nope"])).status_code == 404


@pytest.mark.django_db
def test_winner_is_redirected_to_a_clear_success(client, alice, make_item, settings):
    settings.NEXT_ITEM_AFTER_DECISION = False  # (with it, the winner lands on the next item: test_claims)
    item = make_item(title="Nice post")
    client.force_login(alice)
    response = client.post(_item_url(item), {"decision": "approve", "note": "ok"}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "You approved “Nice post”." in html
    assert 'id="decision"' in html and "alice" in html
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.APPROVED


@pytest.mark.django_db
def test_loser_gets_409_page_naming_the_winner(client, alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    client.force_login(bob)
    response = client.post(_item_url(item), {"decision": "reject"})
    html = response.content.decode()
    assert response.status_code == 409
    assert "Already reviewed by alice (approved, 0 s ago) — your decision was not applied" in html
    assert 'id="lost-notice"' in html and 'id="decide-form"' not in html


@pytest.mark.django_db
def test_form_post_with_bad_decision_shows_error_and_changes_nothing(client, alice, make_item):
    item = make_item()
    client.force_login(alice)
    response = client.post(_item_url(item), {"decision": "maybe"})
    assert response.status_code == 400 and "decision must be one of approve, reject" in response.content.decode()
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert DecisionAttempt.objects.count() == 0


@pytest.mark.postgres_variant
@pytest.mark.django_db
@pytest.mark.parametrize("via", ["api", "form"])
def test_a_nul_in_the_note_is_refused_before_anything_is_resumed(client, alice, bob, make_item, via):
    """It used to reach the graph, then fail the write on PostgreSQL: the item could never be decided."""
    item = make_item()
    client.force_login(alice)
    if via == "api":
        refused = _post_json(client, _api_url(item), {"decision": "approve", "note": "spam\u0000"})
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_decision"
        assert "NUL" in refused.json()["message"]
    else:
        refused = client.post(_item_url(item), {"decision": "approve", "note": "spam\x00"})
        assert refused.status_code == 400 and "NUL" in refused.content.decode()
    assert item_waiting_on(item) == [item.asks.get().interrupt_id] and item_resumes(item) == 0
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert DecisionAttempt.objects.count() == 0
    client.force_login(bob)  # the item is still decidable by anyone
    assert _post_json(client, _api_url(item), {"decision": "reject", "note": "fine"}).status_code == 200


@pytest.mark.postgres_variant
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("via", "field"),
    [
        ("api", "reason"),
        ("form", "reason"),
        ("form-json", "reason"),
        ("bulk", "reason"),
        ("api", "ask"),
        ("form", "ask"),
        ("form-json", "ask"),  # bulk names no ask
    ],
)
def test_a_nul_in_the_ask_or_the_reason_is_a_clear_400_on_every_path(client, alice, make_item, reasons, via, field):
    """Only notes were checked: PostgreSQL failed the ask's or the reason code's lookup with a 500."""
    posted = {"decision": "reject", "reason": "spam\x00"} if field == "reason" else {"decision": "approve", "ask": "9e5c\x00"}
    item = make_item()
    client.force_login(alice)
    if via == "api":
        refused = _post_json(client, _api_url(item), posted)
        assert (refused.status_code, refused.json()["error"], refused.json()["field"]) == (400, "invalid_decision", field)
        assert "NUL" in refused.json()["message"]
    elif via == "form-json":
        refused = client.post(_item_url(item), posted, headers={"Accept": "application/json"})
        assert (refused.status_code, refused.json()["field"]) == (400, field) and "NUL" in refused.json()["message"]
    elif via == "form":
        refused = client.post(_item_url(item), posted)
        assert refused.status_code == 400 and "NUL" in refused.content.decode()
    else:
        refused = client.post(reverse("moderation:bulk"), {**posted, "items": [str(item.public_id)]})
        assert refused.status_code == 400 and "reason" in refused.content.decode() and "NUL" in refused.content.decode()
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert DecisionAttempt.objects.count() == 0 and item_resumes(item) == 0


@pytest.mark.django_db
def test_non_moderator_sees_no_buttons_and_forged_post_is_refused(client, make_viewer, make_item):
    item = make_item()
    client.force_login(make_viewer())
    html = client.get(_item_url(item)).content.decode()
    assert 'id="decide-form"' not in html and "not a moderator" in html
    assert client.post(_item_url(item), {"decision": "approve"}).status_code == 403
    assert _post_json(client, _api_url(item), {"decision": "approve"}).status_code == 403
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING


@pytest.mark.django_db
def test_accept_json_on_the_form_endpoint(client, alice, bob, make_item):
    item = make_item()
    client.force_login(alice)
    won = client.post(_item_url(item), {"decision": "approve"}, headers={"Accept": "application/json"})
    assert won.status_code == 200 and won.json()["outcome"] == "won"
    client.force_login(bob)
    lost = client.post(_item_url(item), {"decision": "reject"}, headers={"Accept": "application/json"})
    assert lost.status_code == 409 and lost.json()["winner"] == "alice"


@pytest.mark.django_db
def test_api_win_then_loss(client, alice, bob, make_item):
    item = make_item(title="T")
    client.force_login(alice)
    won = _post_json(client, _api_url(item), {"decision": "reject", "note": "spam"})
    assert won.status_code == 200
    body = won.json()
    assert (body["outcome"], body["applied"], body["winner"], body["status"]) == ("won", True, "alice", "rejected")
    client.force_login(bob)
    lost = _post_json(client, _api_url(item), {"decision": "approve"})
    assert lost.status_code == 409
    body = lost.json()
    assert (body["outcome"], body["applied"], body["winner"], body["status"], body["requested"]) == (
        "lost",
        False,
        "alice",
        "rejected",
        "approve",
    )
    assert body["message"].startswith("Already reviewed by alice (rejected, ")
    assert body["decided_at"] and body["seconds_ago"] >= 0


@pytest.mark.django_db
def test_api_names_attempts_by_item_and_place_not_by_global_row_id(client, alice, bob, make_item):
    make_item()  # attempts on other items must not show in this item's names
    item_decide(item_public_id=make_item().public_id, reviewer=alice, decision="approve")
    item = make_item()
    client.force_login(alice)
    won = _post_json(client, _api_url(item), {"decision": "approve"}).json()
    client.force_login(bob)
    lost = _post_json(client, _api_url(item), {"decision": "reject"}).json()
    assert (won["attempt"], lost["attempt"]) == (f"{item.public_id}-1", f"{item.public_id}-2")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("send", "status", "error"),
    [
        (lambda c, url: c.post(url, data="{not json", content_type="application/json"), 400, "malformed_json"),
        (lambda c, url: c.post(url, data="[1]", content_type="application/json"), 400, "malformed_json"),
        # Deeper than the JSON parser's recursion limit (it raises RecursionError, not ValueError).
        (lambda c, url: c.post(url, data="[" * 100_000 + "]" * 100_000, content_type="application/json"), 400, "malformed_json"),
        (
            lambda c, url: c.post(url, data='{"a":' * 100_000 + "1" + "}" * 100_000, content_type="application/json"),
            400,
            "malformed_json",
        ),
        (lambda c, url: c.post(url, {"decision": "approve"}), 415, "unsupported_media_type"),
        (lambda c, url: _post_json(c, url, {}), 400, "invalid_decision"),
        (lambda c, url: _post_json(c, url, {"decision": "burn"}), 400, "invalid_decision"),
        (lambda c, url: _post_json(c, url, {"decision": "approve", "note": "x" * 5000}), 400, "invalid_decision"),
        (lambda c, url: c.get(url), 405, None),
    ],
)
def test_api_bad_input_gets_clear_error_and_changes_nothing(client, alice, make_item, send, status, error):
    item = make_item()
    client.force_login(alice)
    response = send(client, _api_url(item))
    assert response.status_code == status
    if error:
        assert response.json()["error"] == error and response.json()["message"]
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert DecisionAttempt.objects.count() == 0


@pytest.mark.django_db
def test_api_unknown_item_and_anonymous(client, alice):
    assert _post_json(client, _api_url(uuid.uuid4()), {"decision": "approve"}).status_code == 401
    client.force_login(alice)
    missing = _post_json(client, _api_url(uuid.uuid4()), {"decision": "approve"})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


@pytest.mark.django_db
def test_api_requires_csrf_for_browser_sessions(alice, make_item):
    from django.test import Client

    item = make_item()
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    refused = _post_json(client, _api_url(item), {"decision": "approve"})
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert "CSRF" in refused.json()["message"]
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING


@pytest.mark.django_db
def test_csrf_refusals_answer_json_on_the_api_even_anonymous_and_html_on_pages(alice, make_item):
    from django.test import Client

    item = make_item()
    anonymous = Client(enforce_csrf_checks=True)
    refused = _post_json(anonymous, _api_url(item), {"decision": "approve"})
    assert refused.status_code == 403 and refused["Content-Type"] == "application/json"
    assert refused.json()["error"] == "forbidden"
    anonymous.force_login(alice)
    page = anonymous.post(_item_url(item), {"decision": "approve"})
    assert page.status_code == 403 and page["Content-Type"].startswith("text/html")
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert DecisionAttempt.objects.count() == 0


@pytest.mark.django_db
def test_notes_are_shown_to_moderators_only(client, alice, bob, make_item, make_viewer):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="private reasoning")
    client.force_login(bob)
    assert "private reasoning" in client.get(_item_url(item)).content.decode()
    client.force_login(make_viewer("dave"))
    page = client.get(_item_url(item)).content.decode()
    assert "private reasoning" not in page and "rejected" in page


@pytest.mark.django_db
def test_html_in_content_and_notes_is_escaped(client, alice, bob, make_item):
    item = make_item(title="<script>alert(1)</script>", body="<img src=x onerror=alert(2)>")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="<b>bold</b>")
    client.force_login(bob)
    for url in (reverse("moderation:queue"), _item_url(item)):
        html = client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html and "<img src=x" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;" in client.get(_item_url(item)).content.decode()


@pytest.mark.django_db
def test_a_flood_of_decisions_is_rate_limited_with_a_clear_message(client, alice, make_item, settings):
    settings.DECISION_RATE_LIMIT = 3
    settings.DECISION_RATE_WINDOW = 60
    items = [make_item() for _ in range(5)]
    client.force_login(alice)
    statuses = [_post_json(client, _api_url(item), {"decision": "approve"}).status_code for item in items[:4]]
    assert statuses == [200, 200, 200, 429]
    limited = _post_json(client, _api_url(items[4]), {"decision": "approve"})
    assert limited.status_code == 429 and limited.json()["error"] == "rate_limited"
    assert "at most 3 every 60 s" in limited.json()["message"] and int(limited["Retry-After"]) >= 1
    page = client.post(_item_url(items[4]), {"decision": "approve"})
    assert page.status_code == 429 and "Too many decisions" in page.content.decode()
    assert QueueItem.objects.get(pk=items[3].pk).status == ItemStatus.PENDING
    assert QueueItem.objects.get(pk=items[4].pk).status == ItemStatus.PENDING


@pytest.mark.django_db
def test_item_needing_attention_is_visible_on_queue_and_item_pages(client, alice, make_item):
    item = make_item(title="Stuck one")
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.NEEDS_ATTENTION, attention="apply node failed: KeyError")
    client.force_login(alice)
    queue_html = client.get(reverse("moderation:queue")).content.decode()
    assert "Needs attention" in queue_html and "apply node failed: KeyError" in queue_html
    item_html = client.get(_item_url(item)).content.decode()
    assert 'id="attention"' in item_html and 'id="decide-form"' not in item_html
    refused = _post_json(client, _api_url(item), {"decision": "approve"})
    assert refused.status_code == 409 and refused.json()["error"] == "needs_attention"


@pytest.mark.django_db
def test_race_lab_items_never_show_in_the_queue(client, alice, make_item):
    make_item(title="Real one")
    make_item(title="Real, from a feed called racelab", source="racelab")
    lab_item_create(title="Lab one", body="Raced by the lab.")
    client.force_login(alice)
    response = client.get(reverse("moderation:queue"))
    assert [i.title for i in response.context["page"].object_list] == ["Real one", "Real, from a feed called racelab"]
    assert response.context["counts"].pending == 2


@pytest.mark.django_db
def test_race_lab_link_only_for_staff(client, alice):
    client.force_login(alice)
    assert "Race lab" not in client.get(reverse("moderation:queue")).content.decode()
    alice.is_staff = True
    alice.save()
    assert 'href="/lab/"' in client.get(reverse("moderation:queue")).content.decode()


@pytest.mark.django_db
def test_no_race_lab_link_where_the_lab_app_is_not_installed(client, alice, settings):
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "moderation.lab"]
    page = client.get(reverse("moderation:queue"))
    assert page.status_code == 200 and "Race lab" not in page.content.decode()


@pytest.mark.django_db
def test_background_refresh_does_not_consume_flash_messages(client, alice, make_item):
    item = make_item(title="Flash")
    client.force_login(alice)
    client.post(_item_url(item), {"decision": "approve"})
    background = client.get(reverse("moderation:queue"), headers={"X-Live-Refresh": "1"})
    assert "You approved" not in background.content.decode()
    assert "You approved “Flash”." in client.get(_item_url(item)).content.decode()


@pytest.mark.django_db
def test_a_lost_race_is_not_logged_as_a_warning_but_other_client_errors_are(client, alice, bob, make_item, caplog):
    item = make_item()
    client.force_login(alice)
    assert _post_json(client, _api_url(item), {"decision": "approve"}).status_code == 200
    client.force_login(bob)
    with caplog.at_level("INFO"):
        assert _post_json(client, _api_url(item), {"decision": "reject"}).status_code == 409
        assert client.post(_item_url(item), {"decision": "reject"}).status_code == 409
    assert not [r for r in caplog.records if r.name == "django.request"], caplog.text
    with caplog.at_level("INFO"):
        assert _post_json(client, _api_url(item), {"decision": "burn"}).status_code == 400
    assert [r.levelname for r in caplog.records if r.name == "django.request"] == ["WARNING"]


@pytest.mark.django_db
def test_live_state_endpoint_answers_what_the_socket_would(client, alice, make_viewer, make_item):
    item = make_item(title="Stated")
    item_url = reverse("moderation:api-item-state", args=[item.public_id])
    queue_url = reverse("moderation:api-queue-state")
    assert client.get(item_url).status_code == 401 and client.get(queue_url).json()["error"] == "unauthenticated"
    client.force_login(make_viewer())
    # A viewer's socket is admitted (read-only), so is its snapshot; it says the viewer cannot decide.
    viewed = client.get(item_url).json()
    assert viewed["can_decide"] is False and viewed["item"]["status"] == "pending"
    client.force_login(alice)
    assert client.get(reverse("moderation:api-item-state", args=[uuid.uuid4()])).status_code == 404
    assert client.post(item_url).status_code == 405

    pending = client.get(item_url)
    assert pending.json()["can_decide"] is True
    assert pending.json()["item"] == {"item": str(item.public_id), "title": "Stated", "status": "pending"}
    assert "no-store" in pending["Cache-Control"]
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    decided = client.get(item_url).json()["item"]
    assert (decided["winner"], decided["status"]) == ("alice", "rejected")
    assert client.get(queue_url).json()["counts"] == {"pending": 0, "decided_today": 1}
