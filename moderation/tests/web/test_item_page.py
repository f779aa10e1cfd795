"""The item page renders every ask through one path, and its forms decide through the guard."""

import json
import re
from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from moderation.api.clients import apiclient_create
from moderation.graphs.outcome import AppliedState
from moderation.graphs.runtime import graph_values
from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.records.models import DecisionAttempt
from moderation.review.apply import ApplyOutcome, ApplyResult, item_apply
from moderation.review.decisions import item_decide
from moderation.review.items import item_create
from moderation.review.outcomes import item_outcome_report
from moderation.review.submissions import Submission, item_submit
from moderation.tests.graphs_support import (
    AGENT_GRAPHS,
    PLAIN_AGENT,
    REFUND_GRAPH,
    TEST_GRAPHS,
    wrong_type_edit,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_graphs")]


@pytest.fixture
def _graphs():
    # Inline apply set here too: the suite's env switch is read after settings are loaded.
    with override_settings(REVIEWQUEUE_GRAPHS=TEST_GRAPHS, REVIEWQUEUE_APPLY_INLINE=True):
        yield


def _refund(**graph_input):
    return item_create(
        title="Refund A-1001", body="The customer asks for a refund.", source="agent", graph=REFUND_GRAPH, graph_input=graph_input
    )


@pytest.fixture
def post(client, django_capture_on_commit_callbacks):
    """client.post, then what the commit set off (the inline apply: the test's transaction never commits)."""

    def send(url, data, **extra):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(url, data, **extra)

    return send


def _url(item):
    return reverse("moderation:item", args=[item.public_id])


def _ask(item):
    return ReviewAsk.objects.get(item=item, status=AskStatus.PENDING).interrupt_id


def _edit(item, **fields):
    return {
        "ask": _ask(item),
        "action-0-type": "edit",
        "action-0-arg-order_id": "A-1001",
        "action-0-arg-amount": "80",
        "action-0-arg-currency": "EUR",
        **fields,
    }


def _buttons(html):
    return re.findall(r'<button class="(\w+)" name="action-0-type" value="(\w+)"', html)


def test_moderation_ask_offers_only_approve_and_reject(client, alice, make_item):
    item = make_item(title="Hello")
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert _buttons(html) == [("approve", "approve"), ("reject", "reject")]
    assert 'value="edit"' not in html and 'value="respond"' not in html and "<fieldset" not in html
    assert "<code>publish</code>" in html and "Publish this post?" in html


def test_a_content_item_shows_its_fields_once_not_again_as_the_asks_raw_arguments(client, alice, make_item):
    """Issue 40.10: the page showed the post, then its title, excerpt, source, flags ([]) and risk again as the ask's args."""
    item = make_item(title="Hello", body="A calm post about tea.")
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    main = html.split("<main>")[1]
    assert main.count("Hello") == 1 and main.count("A calm post about tea.") == 1
    assert 'class="args"' not in main and "[]" not in main
    assert "no flags" in main and "Risk score" in main  # the prescreen, in words, once


def test_only_the_allowed_types_are_offered(client, alice):
    item = _refund(allowed=["approve", "respond"])
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert _buttons(html) == [("approve", "approve"), ("respond", "respond")]
    assert 'value="edit"' not in html and 'value="reject"' not in html
    assert "(required to respond)" in html


def test_edit_form_is_built_from_args_schema(client, alice):
    item = _refund()
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert _buttons(html) == [("approve", "approve"), ("reject", "reject"), ("respond", "respond")]
    amount = re.search(r'<input type="number" id="decide-form-action-0-arg-amount"[^>]*>', html).group(0)
    assert all(part in amount for part in ('value="120"', "required", 'step="any"', 'min="0"', 'max="150"'))
    assert '<label for="decide-form-action-0-arg-amount">Amount' in html
    assert re.search(
        r'<select id="decide-form-action-0-arg-currency" name="action-0-arg-currency" required>\s*'
        r'<option value="EUR" selected>EUR</option><option value="USD">USD</option>',
        html,
    )
    assert (
        '<input type="text" id="decide-form-action-0-arg-order_id" name="action-0-arg-order_id" value="A-1001" required>' in html
    )
    assert '<input type="checkbox" id="decide-form-action-0-arg-notify" name="action-0-arg-notify">' in html
    # The edit's own submit button comes before every other: Enter in an input submits the edit.
    assert html.index('value="edit"') < html.index('value="approve"')
    assert "action-0-args" not in html


def test_without_args_schema_each_argument_has_its_own_input_typed_by_its_value(client, alice):
    item = _refund(schema=False)
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert (
        '<input type="text" id="decide-form-action-0-arg-order_id" name="action-0-arg-order_id" value="A-1001" required>' in html
    )
    assert (
        '<input type="number" id="decide-form-action-0-arg-amount" name="action-0-arg-amount" value="120" required step="any">'
        in html
    )
    assert '<input type="text" id="decide-form-action-0-arg-currency" name="action-0-arg-currency" value="EUR" required>' in html
    assert 'name="action-0-args"' not in html  # no editor of the whole arguments as JSON


def test_editing_one_argument_through_its_own_input_reaches_the_graph_typed(post, client, alice):
    item = _refund(schema=False)
    client.force_login(alice)
    response = post(
        _url(item),
        {
            "ask": _ask(item),
            "action-0-type": "edit",
            "action-0-arg-order_id": "A-1001",
            "action-0-arg-amount": "80",
            "action-0-arg-currency": "EUR",
        },
    )
    assert response.status_code == 302
    assert graph_values(name=REFUND_GRAPH, thread_id=item.thread_id)["result"]["args"] == [
        {"order_id": "A-1001", "amount": 80, "currency": "EUR"}
    ]
    bad = _refund(schema=False)
    response = post(
        _url(bad),
        {
            "ask": _ask(bad),
            "action-0-type": "edit",
            "action-0-arg-order_id": "A-1001",
            "action-0-arg-amount": "eighty",
            "action-0-arg-currency": "EUR",
        },
    )
    assert response.status_code == 400
    assert (
        '<p class="field-error" id="decide-form-action-0-arg-amount-error" role="alert">enter a number</p>'
        in response.content.decode()
    )


def test_a_script_may_still_post_the_whole_arguments_as_json(post, client, alice):
    item = _refund(schema=False)
    client.force_login(alice)
    post(_url(item), {"ask": _ask(item), "action-0-type": "edit", "action-0-args": '{"order_id": "A-1001", "amount": 5}'})
    assert graph_values(name=REFUND_GRAPH, thread_id=item.thread_id)["result"]["args"] == [{"order_id": "A-1001", "amount": 5}]


def _diff_rows(html):
    table = re.search(r'<table class="args diff" aria-label="What the edit changed in refund">(.*?)</table>', html, re.S)
    rows = re.findall(r'<tr class="change-(\w+)"><th scope="row">(.*?)</th>(.*?)</tr>', table.group(1), re.S)
    return [(kind, arg, " ".join(re.sub(r"<[^>]+>", " ", cells).split())) for kind, arg, cells in rows]


def test_what_an_edit_changed_is_shown_after_the_decision_and_in_the_history(post, client, alice):
    item = _refund()
    client.force_login(alice)
    post(_url(item), _edit(item, **{"action-0-arg-amount": "80", "action-0-arg-notify": "on"}))
    expected = [("changed", "amount", "120 → 80"), ("added", "notify", "true (added)")]
    assert _diff_rows(client.get(_url(item)).content.decode()) == expected
    history = client.get(reverse("moderation:item-history", args=[item.public_id])).content.decode()
    assert _diff_rows(history) == expected


@pytest.mark.parametrize(
    ("fields", "field", "error"),
    [
        ({"action-0-arg-amount": "200"}, "action-0-arg-amount", "200 is greater than the maximum of 150"),
        ({"action-0-arg-amount": "lots"}, "action-0-arg-amount", "enter a number"),
        ({"action-0-arg-order_id": ""}, "action-0-arg-order_id", "required"),
    ],
)
def test_a_bad_edit_is_400_next_to_its_field_and_changes_nothing(post, client, alice, fields, field, error):
    item = _refund()
    client.force_login(alice)
    response = post(_url(item), _edit(item, **fields))
    html = response.content.decode()
    assert response.status_code == 400
    assert re.search(rf'<p class="field-error" id="decide-form-{field}-error" role="alert">{re.escape(error)}</p>', html)
    assert re.search(rf'id="decide-form-{field}"[^>]*aria-invalid="true"', html)
    assert "Nothing was recorded" in html
    if field == "action-0-arg-amount":
        assert f'value="{fields[field]}"' in html  # what the reviewer typed is still there to correct
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.decided_by is None
    assert ReviewAsk.objects.get(item=item).status == AskStatus.PENDING
    assert not DecisionAttempt.objects.filter(item=item).exists()


def test_a_response_without_a_message_is_400_on_the_note(post, client, alice):
    item = _refund()
    client.force_login(alice)
    response = post(_url(item), {"ask": _ask(item), "action-0-type": "respond", "note": "  "})
    assert response.status_code == 400
    assert 'id="decide-form-note-error"' in response.content.decode()
    assert ReviewAsk.objects.get(item=item).status == AskStatus.PENDING


def test_a_type_not_allowed_is_refused(post, client, alice, make_item):
    item = make_item()
    client.force_login(alice)
    response = post(_url(item), {"ask": _ask(item), "action-0-type": "respond", "note": "hi"})
    assert response.status_code == 400 and "publish allows approve, reject, not respond" in response.content.decode()
    assert not DecisionAttempt.objects.filter(item=item).exists()


def test_the_loser_is_told_what_the_winner_edited_and_sees_their_note(post, client, alice, bob):
    item = _refund()
    ask = _ask(item)
    client.force_login(alice)
    assert post(_url(item), _edit(item)).status_code == 302
    client.force_login(bob)
    response = post(_url(item), {"ask": ask, "action-0-type": "approve", "note": "looks right to me"})
    html = response.content.decode()
    assert response.status_code == 409
    assert "alice edited refund (amount 120 → 80) first" in html
    assert "Already reviewed by alice (edited refund" in html
    assert '<blockquote id="lost-note">looks right to me</blockquote>' in html


def test_several_asks_get_a_form_each_posting_its_own_ask(post, client, alice):
    item = item_create(title="Pair", body="Two things at once.", source="agent", graph="t_parallel")
    asks = list(ReviewAsk.objects.filter(item=item).order_by("position"))
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    forms = re.findall(r'<form method="post" class="decide-form ask" id="([\w-]+)" data-ask="([^"]+)">', html)
    assert forms == [("decide-form", asks[0].interrupt_id), ("decide-form-2", asks[1].interrupt_id)]
    assert "(2 requests, each decided on its own)" in html
    notify = next(a for a in asks if a.payload["action_requests"][0]["name"] == "notify")
    assert post(_url(item), {"ask": notify.interrupt_id, "action-0-type": "reject"}).status_code == 302
    notify.refresh_from_db()
    assert notify.status == AskStatus.DECIDED and notify.decisions == [{"type": "reject"}]
    html = client.get(_url(item)).content.decode()
    assert html.count('class="decide-form ask"') == 1 and "alice</strong> rejected notify" in html


def test_an_ask_of_several_actions_posts_a_decision_each(post, client, alice):
    item = _refund(actions=2)
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert html.count('type="radio" name="action-0-type"') == 4 and html.count('type="radio" name="action-1-type"') == 4
    response = post(
        _url(item),
        {
            "ask": _ask(item),
            "action-0-type": "reject",
            "action-0-message": "already refunded",
            "action-1-type": "edit",
            "action-1-arg-order_id": "A-1002",
            "action-1-arg-amount": "10",
            "action-1-arg-currency": "USD",
        },
    )
    assert response.status_code == 302
    ask = ReviewAsk.objects.get(item=item)
    assert ask.decisions == [
        {"type": "reject", "message": "already refunded"},
        {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "A-1002", "amount": 10, "currency": "USD"}}},
    ]
    item.refresh_from_db()
    assert item.status == ItemStatus.DECIDED


def test_a_missing_choice_among_several_actions_is_400(post, client, alice):
    item = _refund(actions=2)
    client.force_login(alice)
    response = post(_url(item), {"ask": _ask(item), "action-0-type": "approve"})
    assert response.status_code == 400 and "choose what to do with refund" in response.content.decode()


@override_settings(REVIEWQUEUE_APPLY_INLINE=False)
def test_applying_then_the_result(post, client, alice):
    item = _refund()
    client.force_login(alice)
    post(_url(item), {"ask": _ask(item), "action-0-type": "approve"})
    html = client.get(_url(item)).content.decode()
    assert re.search(r'id="applying" role="status">\s*<p>Decided by <strong>alice</strong> · applying…', html)
    item_apply(item_id=item.pk)
    html = client.get(_url(item)).content.decode()
    assert 'id="applying"' not in html
    assert 'id="applied-result" data-state="finished"' in html and '<th scope="row">decisions</th><td>approve</td>' in html


def test_a_response_that_makes_the_graph_ask_again(post, client, alice):
    item = _refund()
    client.force_login(alice)
    first = _ask(item)
    post(_url(item), {"ask": first, "action-0-type": "respond", "note": "check the order first"})
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.applied_result["state"] == "asked again"
    html = client.get(_url(item)).content.decode()
    second = _ask(item)
    assert second != first and f'data-ask="{second}"' in html
    assert "a new review was requested: 1 new request above" in html
    assert "alice</strong> answered refund (“check the order first”)" in html


def test_a_failed_apply_says_an_operator_must_recover(client, alice):
    item = _refund()
    failed = {"state": "failed", "error": "RuntimeError: tool down"}
    QueueItem.objects.filter(pk=item.pk).update(apply_state="failed", applied_result=failed)
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert 'data-state="failed"' in html and "RuntimeError: tool down" in html and "manage.py recover" in html


@override_settings(REVIEWQUEUE_APPLY_INLINE=False)
def test_an_item_of_a_graph_not_loaded_says_so_and_can_still_be_decided(post, client, alice):
    item = _refund()
    client.force_login(alice)
    with override_settings(REVIEWQUEUE_GRAPHS={k: v for k, v in TEST_GRAPHS.items() if k != REFUND_GRAPH}):
        html = client.get(_url(item)).content.decode()
        assert (
            'id="graph-not-loaded"' in html and f"Graph not loaded: this server does not run <code>{REFUND_GRAPH}</code>" in html
        )
        post(_url(item), {"ask": _ask(item), "action-0-type": "approve"})
        assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.GRAPH_NOT_LOADED)]
        html = client.get(_url(item)).content.decode()
        assert 'id="graph-not-loaded"' in html and 'id="applying"' in html
    assert 'id="graph-not-loaded"' not in client.get(_url(item)).content.decode()
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)]


def test_queue_names_the_graph_and_the_actions_asked_about(client, alice, make_item):
    _refund(actions=2)
    make_item(title="Plain post")
    client.force_login(alice)
    html = client.get(reverse("moderation:queue")).content.decode()
    assert html.count('<code class="graph" title="graph">t_refund</code>') == 1
    assert html.count('<code class="action" title="action asked about">refund</code>') == 2
    assert html.count('<code class="action" title="action asked about">publish</code>') == 1
    assert '<code class="graph" title="graph">moderation</code>' not in html


def test_item_decide_by_another_moderator_shows_on_the_page(client, alice, bob):
    item = _refund()
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert 'id="decision"' in html and "bob</strong> approved refund · " in html and "decide-form" not in html


def test_the_page_shows_what_the_submitter_sent_escaped_and_readable(client, alice):
    item = _refund()
    QueueItem.objects.filter(pk=item.pk).update(
        metadata={
            "order": 4711,
            "customer": {"name": "<b>Ann</b>", "tags": ["vip"]},
            "comment": "first line\nsecond line",
        }
    )
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    listed = re.search(
        r'<details class="metadata" id="item-metadata" open>\s*<summary>(.*?)</summary>\s*<dl>(.*?)</dl>', html, re.S
    )
    assert listed and listed.group(1) == "Metadata from the submitter (3 fields)"
    assert re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", listed.group(2), re.S) == [
        ("order", "4711"),
        (
            "customer",
            "{\n  &quot;name&quot;: &quot;&lt;b&gt;Ann&lt;/b&gt;&quot;,\n  &quot;tags&quot;: [\n    &quot;vip&quot;\n  ]\n}",
        ),
        ("comment", "first line\nsecond line"),
    ]
    QueueItem.objects.filter(pk=item.pk).update(metadata={})
    assert 'id="item-metadata"' not in client.get(_url(item)).content.decode()


def test_an_agents_description_keeps_its_lines(client, alice):
    item = _refund()
    ask = ReviewAsk.objects.get(item=item)
    payload = ask.payload
    payload["action_requests"][0]["description"] = "Refund <the> order\nonly if it arrived broken"
    ReviewAsk.objects.filter(pk=ask.pk).update(payload=payload)
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert '<p class="action-description">Refund &lt;the&gt; order<br>only if it arrived broken</p>' in html


LANGCHAIN_DESCRIPTION = "Tool execution requires approval\n\nTool: refund_payment\nArgs: {'order_id': 'A-17', 'amount': 120}"
LANGCHAIN_ASK = {
    "action_requests": [
        {"name": "refund_payment", "args": {"order_id": "A-17", "amount": 120}, "description": LANGCHAIN_DESCRIPTION}
    ],
    "review_configs": [{"action_name": "refund_payment", "allowed_decisions": ["approve", "edit", "reject"]}],
}


@override_settings(REVIEWQUEUE_GRAPHS=AGENT_GRAPHS)
@pytest.mark.parametrize(
    ("body", "shown"),
    [
        # What interrupts_forward sent before: the description (with LangChain's call in it), or a per-call ask as JSON.
        (f"refund_payment: {LANGCHAIN_DESCRIPTION}", False),
        ("refund_payment: Tool execution requires approval", False),
        ("The customer wrote: it arrived broken.", True),
    ],
)
def test_an_agents_tool_call_is_shown_once(client, alice, body, shown):
    # LangChain's HumanInTheLoopMiddleware writes the call into the description it makes itself.
    api_client = apiclient_create(name="support-agent", scopes=["items:write"])[0]
    item = item_submit(
        client=api_client, submission=Submission(title="Approve refund_payment", body=body, source="agent", ask=LANGCHAIN_ASK)
    ).item
    client.force_login(alice)
    html = client.get(_url(item)).content.decode()
    assert "Tool: refund_payment" not in html and "Args: " not in html
    assert html.count('<p class="action-description">Tool execution requires approval</p>') == 1
    assert html.count('<th scope="row">amount</th><td>120</td>') == 1  # the arguments, listed once
    assert ('<div class="body">' in html) is shown


def _meta_line(client, item) -> str:
    line = re.search(r'id="item-meta">(.*?)</p>', client.get(_url(item)).content.decode(), re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", "", line).split())


def test_a_decided_item_says_when_it_was_decided_not_that_it_waits(client, alice, bob, make_item):
    item = make_item(title="Decided long ago")
    client.force_login(alice)
    assert _meta_line(client, item) == "From test · waiting since 0 minutes ago"
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    QueueItem.objects.filter(pk=item.pk).update(
        created_at=timezone.now() - timedelta(hours=3), decided_at=timezone.now() - timedelta(minutes=5)
    )
    assert _meta_line(client, item) == "From test · submitted 3 hours ago, decided 5 minutes ago"


def test_a_wrong_type_edit_the_tool_refused_shows_its_error_not_done(post, client, alice):
    # LangChain's middleware as it comes sends no args_schema: the page takes any JSON, the tool refuses it.
    with override_settings(REVIEWQUEUE_GRAPHS=AGENT_GRAPHS):
        item = item_create(
            title="Refund", body="Hi, order A-17 arrived broken. Please refund 120 EUR.", source="agent", graph=PLAIN_AGENT
        )
        client.force_login(alice)
        edit = wrong_type_edit()
        post(_url(item), {"ask": _ask(item), "action-0-type": "edit", "action-0-args": json.dumps(edit["edited_action"]["args"])})
        item.refresh_from_db()
        html = client.get(_url(item)).content.decode()

    assert item.applied_result["state"] == "finished with errors"
    assert 'id="applied-result" data-state="finished with errors" role="alert"' in html
    assert "Done: the decision was carried out" not in html
    errors = re.search(r'<ul class="attention-list" id="applied-errors">(.*?)</ul>', html, re.S).group(1)
    assert "<strong>tool refund_payment</strong>: Error invoking tool" in errors
    assert "amount: Input should be a valid number" in errors


@override_settings(REVIEWQUEUE_GRAPHS=AGENT_GRAPHS)
def test_a_pass_through_item_shows_the_decisions_returned_and_the_agents_report(post, client, alice):
    api_client = apiclient_create(name="support-agent", scopes=["items:write"])[0]
    item = item_submit(
        client=api_client,
        submission=Submission(
            title="Agent: delete C-7",
            body="b",
            source="agent",
            ask={
                "action_requests": [{"name": "delete_customer", "args": {"id": "C-7"}, "description": ""}],
                "review_configs": [{"action_name": "delete_customer", "allowed_decisions": ["approve", "reject"]}],
            },
        ),
    ).item
    client.force_login(alice)
    post(_url(item), {"ask": _ask(item), "action-0-type": "approve"})

    html = client.get(_url(item)).content.decode()
    assert 'data-state="finished"' in html and '<p id="applied-summary">returned to the agent: approved</p>' in html
    assert '<pre class="value" id="applied-decisions">{\n  &quot;decisions&quot;: [' in html
    assert 'id="agent-outcome"' not in html

    item_outcome_report(client=api_client, item_public_id=str(item.public_id), status="failed", message="CRM <down>")
    html = client.get(_url(item)).content.decode()
    assert 'id="agent-outcome" data-status="failed" role="alert"' in html and "The agent reports: failed" in html
    assert '<blockquote id="agent-outcome-message">CRM &lt;down&gt;</blockquote>' in html
    history = client.get(reverse("moderation:item-history", args=[item.public_id])).content.decode()
    assert (
        'by its agent <strong>support-agent</strong>: <span class="outcome outcome-failed">failed</span> — CRM &lt;down&gt;'
        in history
    )
