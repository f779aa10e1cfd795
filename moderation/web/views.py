"""HTTP views: translate requests into service calls and outcomes into responses."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.csrf import csrf_failure as csrf_failure_page
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from moderation.core.bulkhead import bulkhead_stats
from moderation.core.cursors import CursorInvalid
from moderation.core.faults import fault_point
from moderation.core.jsonparse import json_parse
from moderation.core.permissions import user_can_decide
from moderation.graphs.asks import AskSpec
from moderation.graphs.passthrough import NAME as ASK_GRAPH
from moderation.graphs.passthrough import ask_context, ask_external
from moderation.graphs.registry import graph_loaded, graph_names
from moderation.live.sockets import (
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
    live_socket_admit,
    live_sockets_stats,
    live_state_read,
)
from moderation.live.waits import waits_stats
from moderation.policies.teams import item_decide_refusal
from moderation.records.claims import (
    Claim,
    claim_live,
    claim_take,
    claims_live,
    next_item_pick,
)
from moderation.records.models import AttemptOrigin
from moderation.records.reasons import reason_codes_active, reason_rule
from moderation.records.selectors import (
    QUEUE_ORDERS,
    RISK_BANDS,
    item_ask_get,
    item_asks_open,
    item_asks_settled,
    item_get,
    item_outcome_report_get,
    item_vote_panel,
    items_needing_attention,
    items_recently_decided,
    queue_counts,
    queue_cursor_read,
    queue_filters_read,
    queue_pending,
    queue_tallies,
)
from moderation.records.workers import item_apply_wait, wait_minutes, work_state
from moderation.review.bulk import BulkResult, items_decide_bulk
from moderation.review.decisions import DecisionError, DecisionOutcome, InvalidDecision, item_decide
from moderation.web.decision_forms import (
    FormInvalid,
    ask_forms_build,
    form_decision_read,
    form_field_for,
)
from moderation.web.display import (
    ask_body_display,
    ask_context_display,
    edits_display,
    metadata_display,
    value_display,
)
from moderation.web.health import health_redact, health_report, readiness_report
from moderation.web.ratelimit import reviewer_rate_check


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    filters, problems = queue_filters_read(params=request.GET)
    try:
        cursor = queue_cursor_read(token=request.GET.get("cursor"), order=filters.order)
    except CursorInvalid as exc:
        problems.append(str(exc))
        cursor = None
    page = queue_pending(filters=filters, cursor=cursor, per_page=settings.QUEUE_PAGE_SIZE, viewer=request.user)
    query = filters.as_query()
    # "Next item" follows the order and filters this moderator last looked at the queue in;
    # written only when they change, not as a session UPDATE on every page load.
    if request.session.get(_QUEUE_QUERY) != (encoded := urlencode(query)):
        request.session[_QUEUE_QUERY] = encoded
    claims = claims_live(items=page.object_list)
    tallies = queue_tallies(items=page.object_list)
    can_decide = user_can_decide(user=request.user)
    for item in page.object_list:
        item.live_claim = claims.get(item.pk)
        item.tally_line = tallies.get(item.pk, "")
        # A row its viewer may not decide (their own request) gets no checkbox, and says why.
        item.refusal = item_decide_refusal(item=item, user=request.user) if can_decide else ""
    return render(
        request,
        "moderation/queue.html",
        {
            "page": page,
            "filters": filters,
            "problems": problems,
            "next_query": urlencode({**query, "cursor": page.next_cursor}) if page.next_cursor else None,
            "previous_query": urlencode({**query, "cursor": page.previous_cursor}) if page.previous_cursor else None,
            "orders": list(QUEUE_ORDERS),
            "risk_bands": list(RISK_BANDS),
            "graphs": graph_names(),
            "counts": queue_counts(),
            "recent": items_recently_decided(limit=5, viewer=request.user),
            "attention": items_needing_attention(viewer=request.user),
            "reasons": reason_codes_active(),
            "reason_required": settings.REJECT_REASON_REQUIRED,
            "bulk_max": settings.BULK_MAX_ITEMS,
            # live.js re-reads this page in the background; only a person's view shows messages.
            "live_refresh": request.headers.get("X-Live-Refresh") == "1",
        },
    )


@login_required
@require_POST
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """The queue's bulk bar: one decision for the ticked items (or every item the page showed), judged per item."""
    back = f"{reverse('moderation:queue')}?{request.session.get(_QUEUE_QUERY, '')}".rstrip("?")
    if not user_can_decide(user=request.user):
        return _bulk_page(request, back=back, error="You do not have permission to decide items.", status=403)
    wait = reviewer_rate_check(user_id=request.user.pk)
    if wait is not None:
        return _bulk_page(request, back=back, error=_rate_limited_message(wait), status=429)
    items = request.POST.getlist("items")
    if request.POST.get("all_on_page"):
        items += request.POST.getlist("page_items")
    try:
        results = items_decide_bulk(
            item_public_ids=items,
            reviewer=request.user,
            decision=request.POST.get("decision", ""),
            note=request.POST.get("note", ""),
            reason=request.POST.get("reason") or None,
            origin=AttemptOrigin.DASHBOARD,
        )
    except DecisionError as exc:
        return _bulk_page(request, back=back, error=f"Nothing was decided: {exc}", status=exc.http_status)
    return _bulk_page(request, back=back, results=results)


def _bulk_page(
    request: HttpRequest,
    *,
    back: str,
    results: list[BulkResult] | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    return render(request, "moderation/bulk_result.html", {"results": results or [], "error": error, "back": back}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def item_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    item = item_get(public_id=public_id, viewer=request.user)
    if item is None:
        raise Http404("No such item")
    if request.method == "GET":
        claim = claim_take(item=item, user=request.user) if item.is_pending and user_can_decide(user=request.user) else None
        return _item_page(request, item=item, claim=claim)
    wants_json = "application/json" in request.headers.get("Accept", "")
    wait = reviewer_rate_check(user_id=request.user.pk)
    if wait is not None:
        if wants_json:
            return _rate_limited_json(wait)
        return _item_page(request, item=item, error=_rate_limited_message(wait), status=429)
    ask_id = request.POST.get("ask") or None
    spec = _posted_spec(item=item, ask_id=ask_id)
    try:
        posted = form_decision_read(spec=spec, data=request.POST)
        outcome = item_decide(
            item_public_id=item.public_id,
            reviewer=request.user,
            ask=ask_id,
            decision=posted.decision,
            decisions=posted.decisions,
            note=posted.note,
            reason=posted.reason,
            origin=AttemptOrigin.DASHBOARD,
        )
    except FormInvalid as exc:
        if wants_json:
            return _error_json(exc)
        return _item_page(request, item=item, error=_NOT_RECORDED, posted=request.POST, errors={exc.field: str(exc)}, status=400)
    except DecisionError as exc:
        if wants_json:
            return _error_json(exc)
        mark = form_field_for(spec=spec, guard_field=exc.field)
        return _item_page(
            request,
            item=item,
            error=_NOT_RECORDED if mark else str(exc),
            posted=request.POST,
            errors={mark: str(exc).removeprefix(f"{exc.field}: ")} if mark else {},
            status=exc.http_status,
        )
    if wants_json:
        return _outcome_json(outcome)
    fault_point("before_response", item_key=outcome.item_public_id)
    if outcome.counted and not outcome.won:
        messages.success(request, outcome.message())
        return redirect("moderation:item", public_id=item.public_id)
    if outcome.won:
        messages.success(request, outcome.message())
        item.refresh_from_db(fields=["status"])
        if settings.NEXT_ITEM_AFTER_DECISION and not item.is_pending:
            return redirect(f"{reverse('moderation:next')}?after={item.public_id}")
        return redirect("moderation:item", public_id=item.public_id)
    item.refresh_from_db()
    return _item_page(request, item=item, lost=outcome, lost_note=posted.note, lost_reason=posted.reason, status=409)


_NOT_RECORDED = "Nothing was recorded: correct the field marked below and send again."


def _posted_spec(*, item, ask_id: str | None) -> AskSpec | None:
    """The ask a form was posted for (by default the only open one), to read its fields by."""
    if ask_id:
        ask = item_ask_get(item=item, interrupt_id=ask_id)
    else:
        open_asks = item_asks_open(item=item)
        ask = open_asks[0] if len(open_asks) == 1 else None
    return AskSpec.from_payload(ask.payload) if ask else None


def _item_page(
    request: HttpRequest,
    *,
    item,
    status: int = 200,
    error: str = "",
    lost: DecisionOutcome | None = None,
    lost_note: str = "",
    lost_reason: str = "",
    posted=None,
    errors: dict[str, str] | None = None,
    claim: Claim | None = None,
) -> HttpResponse:
    panel = item_vote_panel(item=item, viewer=request.user)
    rule = reason_rule(team_id=item.team_id, graph=item.graph)
    settled = item_asks_settled(item=item, messages=user_can_decide(user=request.user))
    open_asks = item_asks_open(item=item)
    return render(
        request,
        "moderation/item.html",
        {
            "item": item,
            "metadata": metadata_display(item.metadata),
            "panel": panel,
            "body": _body_shown(item, asks=open_asks),
            "context": ask_context_display(context=ask_context(graph=item.graph, graph_input=item.graph_input)),
            "forms": ask_forms_build(
                asks=open_asks, posted=posted, errors=errors, reasons=rule.codes, vote=bool(panel and panel.quorum)
            ),
            "settled": settled,
            "settled_edits": [(one, edits_display(edits=one.edits)) for one in settled],
            # Why this viewer gets no decision form (the guard's own reasons); "": they may decide.
            "refusal": item_decide_refusal(item=item, user=request.user) if item.is_pending else "",
            "error": error,
            "lost": lost,
            "lost_message": lost.message() if lost else "",
            "lost_note": lost_note,
            "lost_reason": lost_reason,
            "note_max_length": settings.DECISION_NOTE_MAX_LENGTH,
            "reason_required": rule.required,
            "external": ask_external(graph=item.graph, graph_input=item.graph_input),
            "live_refresh": request.headers.get("X-Live-Refresh") == "1",
            "claim": claim or (claim_live(item=item) if item.is_pending else None),
            "graph_loaded": graph_loaded(name=item.graph),
            # A pass-through item's decisions as its agent gets them (None: not a pass-through, or not finished).
            "applied_decisions": value_display(item.applied_result["decisions"]) if "decisions" in item.applied_result else None,
            "outcome_report": item_outcome_report_get(item=item),
            "apply_wait": _apply_wait(item),
        },
        status=status,
    )


def _body_shown(item, *, asks) -> str:
    """An agent's ask shows its call once: the body only where it says more than the call (``ask_body_display``)."""
    if item.graph != ASK_GRAPH:
        return item.body
    actions = [action for ask in (asks or item.asks.all()) for action in AskSpec.from_payload(ask.payload).actions]
    return ask_body_display(body=item.body, actions=actions, ask=(item.graph_input or {}).get("ask"))


def _apply_wait(item) -> dict | None:
    """How long this item's decision has waited for a worker, once past ``APPLY_WAIT_NOTICE`` (None: not waiting)."""
    waited = item_apply_wait(item=item)
    if waited is None or waited < settings.APPLY_WAIT_NOTICE:
        return None
    return {"minutes": wait_minutes(waited), "workers_alive": work_state().alive}


_QUEUE_QUERY = "queue_query"


@login_required
@require_GET
def next_item(request: HttpRequest) -> HttpResponse:
    """The next pending item nobody else has claimed, in this moderator's queue order, claimed for them.

    ``?after=<id>``: the item just decided or skipped, never picked again.
    """
    if not user_can_decide(user=request.user):
        return redirect("moderation:queue")
    filters, _ = queue_filters_read(params=QueryDict(request.session.get(_QUEUE_QUERY, "")))

    def candidates():
        cursor = None
        while True:
            page = queue_pending(filters=filters, cursor=cursor, per_page=settings.QUEUE_PAGE_SIZE, viewer=request.user)
            yield from page.object_list
            if page.next_cursor is None:
                return
            cursor = queue_cursor_read(token=page.next_cursor, order=filters.order)

    item = next_item_pick(candidates=candidates(), user=request.user, skip_public_id=request.GET.get("after"))
    if item is None:
        messages.info(request, "Nothing left to review.")
        return redirect("moderation:queue")
    return redirect("moderation:item", public_id=item.public_id)


@login_required
@require_POST
def item_claim(request: HttpRequest, public_id: str) -> JsonResponse:
    """Activity on an item's page (a key pressed, a field typed in): claim it, or renew the claim."""
    item = item_get(public_id=public_id, viewer=request.user)
    if item is None:
        return _json_error(404, "not_found", "no such item")
    if not user_can_decide(user=request.user):
        return _json_error(403, "forbidden", "only moderators claim items")
    claim = claim_take(item=item, user=request.user) if item.is_pending else None
    if claim is None:
        return JsonResponse({"claimed": False})
    return JsonResponse(
        {
            "claimed": True,
            "holder": claim.holder,
            "mine": claim.holder_id == request.user.pk,
            "seconds_left": claim.seconds_left(),
        }
    )


_REFUSED = {
    CLOSE_UNAUTHENTICATED: (401, "unauthenticated", "log in first"),
    CLOSE_FORBIDDEN: (403, "forbidden", "this account is not active"),
    CLOSE_NOT_FOUND: (404, "not_found", "no such item"),
}


@never_cache
@require_GET
def live_state(request: HttpRequest, public_id: UUID | None = None) -> JsonResponse:
    """The live socket's state snapshot, over HTTP, for the same people the socket admits.

    live.js checks what a live event claims against it (events travel through the shared
    channel layer, where they could be forged), and asks it whether its session is really
    over before it stops for a ``session.ended``.
    """
    item_public_id = str(public_id) if public_id else None
    refusal = live_socket_admit(user=request.user, item_public_id=item_public_id)
    if refusal is not None:
        return _json_error(*_REFUSED[refusal])
    return JsonResponse(
        live_state_read(
            username=request.user.get_username(),
            item_public_id=item_public_id,
            can_decide=user_can_decide(user=request.user),
        )
    )


@require_POST
def api_decide(request: HttpRequest, public_id: str) -> JsonResponse:
    """POST {"decision": "approve"|"reject", "note": "...", "reason": "spam"} -> 200 won / 409 lost."""
    if not request.user.is_authenticated:
        return _json_error(401, "unauthenticated", "log in first")
    wait = reviewer_rate_check(user_id=request.user.pk)
    if wait is not None:
        return _rate_limited_json(wait)
    if request.content_type != "application/json":
        return _json_error(415, "unsupported_media_type", "send the decision as application/json")
    try:
        body: Any = json_parse(request.body or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: brackets nested past the parser's depth
        return _json_error(400, "malformed_json", "the request body is not valid JSON")
    if not isinstance(body, dict):
        return _json_error(400, "malformed_json", "the body must be a JSON object")
    try:
        outcome = item_decide(
            item_public_id=public_id,
            reviewer=request.user,
            decision=body.get("decision"),
            note=body.get("note", ""),
            ask=body.get("ask"),
            decisions=body.get("decisions"),
            reason=body.get("reason"),
            origin=AttemptOrigin.API,
        )
    except DecisionError as exc:
        return _error_json(exc)
    return _outcome_json(outcome)


def _outcome_json(outcome: DecisionOutcome) -> JsonResponse:
    fault_point("before_response", item_key=outcome.item_public_id)
    return JsonResponse(
        {
            "outcome": "won" if outcome.won else "voted" if outcome.counted else "lost",
            "applied": outcome.won,
            "message": outcome.message(),
            "requested": outcome.requested,
            "seconds_ago": outcome.seconds_ago(),
            "attempt": outcome.attempt_ref,
            "applying": outcome.applying,
            **outcome.winner_payload(),
        },
        status=200 if outcome.accepted else 409,
    )


def _rate_limited_message(wait: int) -> str:
    return (
        f"Too many decisions: at most {settings.DECISION_RATE_LIMIT} every {settings.DECISION_RATE_WINDOW} s. "
        f"Nothing was applied; try again in {wait} s."
    )


def _rate_limited_json(wait: int) -> JsonResponse:
    response = _json_error(429, "rate_limited", _rate_limited_message(wait))
    response["Retry-After"] = str(wait)
    return response


def _error_json(exc: DecisionError | FormInvalid) -> JsonResponse:
    """The one JSON answer of the session's decision endpoints to a decision refused (a form the guard never saw
    is an invalid decision too)."""
    if isinstance(exc, FormInvalid):
        exc = InvalidDecision(str(exc), field=exc.field)
    return _json_error(exc.http_status, exc.code, str(exc), **({"field": exc.field} if exc.field else {}))


def _json_error(status: int, code: str, message: str, **extra: str) -> JsonResponse:
    """The session endpoints' one shape of a refusal, as the API's: ``{"error": code, "message": ..., **extra}``."""
    return JsonResponse({"error": code, "message": message, **extra}, status=status)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: the API answers JSON like every other refusal; pages keep Django's."""
    if request.path.startswith("/api/"):
        return _json_error(403, "forbidden", f"CSRF check failed: {reason}; nothing was applied")
    return csrf_failure_page(request, reason=reason)


def healthz(request: HttpRequest) -> JsonResponse:
    """For load balancers: 200 when the database, checkpointer and channel layer answer.

    Anyone gets ok per check; staff also get backends, errors and timings, and ``live``:
    this process's open sockets and their group memberships (numbers that stay up after
    everyone left mean sockets were not cleaned up), ``longpoll``: its open long-poll
    waits, and ``bulkhead``: its outside requests running, waiting and refused per class.
    Not "loopback callers": behind a proxy on the same host every request comes from loopback.
    """
    ok, checks = health_report()
    if not (request.user.is_active and request.user.is_staff):
        return JsonResponse({"ok": ok, "checks": health_redact(checks)}, status=200 if ok else 503)
    return JsonResponse(
        {"ok": ok, "checks": checks, "live": live_sockets_stats(), "longpoll": waits_stats(), "bulkhead": bulkhead_stats()},
        status=200 if ok else 503,
    )


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """For monitoring (not the load balancer's probe: with no worker every server would leave it): /healthz's
    checks, and ``workers`` (any heard from within the grace) and ``unapplied`` (the oldest decision not yet
    applied, against ``READY_UNAPPLIED_MAX``); 503 when one fails.

    Anyone gets ok, counts and ages per check; staff also get the dependencies' detail and
    each worker seen in the last day (host, pid, metrics port, last beat).
    """
    ok, checks, state = readiness_report()
    status = 200 if ok else 503
    work = {name: checks.pop(name) for name in ("workers", "unapplied")}
    if not (request.user.is_active and request.user.is_staff):
        return JsonResponse({"ok": ok, "checks": {**health_redact(checks), **work}}, status=status)
    seen = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "metrics_port": w.metrics_port,
            "started_at": w.started_at.isoformat(),
            "beat_age_seconds": round(w.beat_age_seconds, 1),
            "alive": w.alive,
        }
        for w in (state.workers if state else [])
    ]
    return JsonResponse({"ok": ok, "checks": {**checks, **work}, "workers": seen}, status=status)
