"""Read-only queries for the dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import (
    BooleanField,
    Prefetch,
    Q,
    QuerySet,
    prefetch_related_objects,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr
from django.utils import timezone

from moderation.core.cursors import CursorInvalid, cursor_make, cursor_read
from moderation.core.text import TextInvalid, text_check, text_excerpt
from moderation.graphs.asks import PAST, ActionEdit, AskSpec, ask_edits_diff, decisions_describe
from moderation.graphs.registry import graph_names
from moderation.items.models import DECIDED_STATUSES, RISK_BANDS, AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.models import OnDeadline, Vote
from moderation.policies.rules import policy_parse, tally_describe
from moderation.policies.teams import eligible_voters, user_is_supervisor, user_team_ids
from moderation.records.counts import counted_day, counts_read
from moderation.records.models import AttemptOutcome, OutcomeReport

# An API item shows its asks with who decided each and the votes on each: three queries for a whole page.
_ASKS = Prefetch("asks", queryset=ReviewAsk.objects.select_related("decided_by").prefetch_related("votes__voter"))
_API_ITEM_RELATED = ("decided_by", "team", "requested_by", "outcome_report")


def items_visible_q(*, viewer: AbstractBaseUser | None) -> Q:
    """The items ``viewer`` may see: those of no team and of the teams they are a member of now; all for a
    supervisor (or ``viewer`` None: a caller that is not a person, like a test or the worker).

    The team ids are read first (a handful), so the queue's index walk gets a plain ``IN``
    rather than a join on memberships; once per user object, as Django caches permissions
    on it (a queue page asks three times: the page, "recently decided", "needs attention").
    """
    if viewer is None or user_is_supervisor(user=viewer):
        return Q()
    return Q(team__isnull=True) | Q(team_id__in=user_team_ids(user=viewer))


def _queue_items() -> QuerySet[QueueItem]:
    # Race-lab items live in the same table while a lab run goes; reviewers never see them.
    # ``IN (false)``, not ``= False``: Django writes the latter as ``NOT is_lab`` on SQLite,
    # which SQLite cannot match to the indexes' ``is_lab`` column, so the queue page sorted
    # every pending row (300 ms at a million); ``IN`` is an equality it seeks on.
    return QueueItem.objects.filter(is_lab__in=[False])


@dataclass(frozen=True)
class QueueCounts:
    pending: int
    decided_today: int
    # Per queue: an item's queue is the graph that asks about it.
    pending_by_graph: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {"pending": self.pending, "decided_today": self.decided_today}


# The queue's orders: the sort keys a cursor walks, each ending in id so no two rows tie.
QUEUE_ORDERS = {
    "priority": ("rank", "id"),
    "oldest": ("created_at", "id"),
    "newest": ("-created_at", "-id"),
}
QUEUE_ORDER_DEFAULT = "priority"
_FILTER_MAX_LENGTH = {"source": 100, "flag": 200, "q": 200}
# PostgreSQL's full-text configuration; migration 0015 indexes this very expression.
SEARCH_CONFIG = "english"


@dataclass(frozen=True)
class QueueFilters:
    """What the queue page shows: an order and filters, each "" when not in use."""

    order: str = QUEUE_ORDER_DEFAULT
    source: str = ""
    flag: str = ""
    risk: str = ""
    graph: str = ""
    q: str = ""

    def as_query(self) -> dict[str, str]:
        """The query parameters that give these filters back (defaults left out)."""
        values = {
            "order": "" if self.order == QUEUE_ORDER_DEFAULT else self.order,
            "source": self.source,
            "flag": self.flag,
            "risk": self.risk,
            "graph": self.graph,
            "q": self.q,
        }
        return {name: value for name, value in values.items() if value}

    @property
    def narrowed(self) -> bool:
        return any((self.source, self.flag, self.risk, self.graph, self.q))


def queue_filters_read(*, params: Mapping[str, str]) -> tuple[QueueFilters, list[str]]:
    """The page's order and filters from its query string, and what was wrong with it.

    A bad value never narrows the queue: any bad filter drops them all (the moderator
    sees the whole queue and a message naming each bad value, not a subset that looks
    complete); a bad order falls back to the default one.
    """
    problems = []
    order = params.get("order") or QUEUE_ORDER_DEFAULT
    if order not in QUEUE_ORDERS:
        problems.append(f"Unknown order “{order}”: use one of {', '.join(QUEUE_ORDERS)}. Showing the priority order.")
        order = QUEUE_ORDER_DEFAULT
    values = {name: (params.get(name) or "").strip() for name in ("source", "flag", "risk", "graph", "q")}
    bad = []
    for name, limit in _FILTER_MAX_LENGTH.items():
        if "\x00" in values[name] or len(values[name]) > limit:
            bad.append(f"{name} must be at most {limit} characters of text")
    if values["risk"] and values["risk"] not in RISK_BANDS:
        bad.append(f"risk must be one of {', '.join(RISK_BANDS)}, not “{values['risk']}”")
    if values["graph"] and values["graph"] not in graph_names():
        bad.append(f"graph must be one of {', '.join(graph_names())}, not “{values['graph']}”")
    if bad:
        problems.append(f"Filters not applied: {'; '.join(bad)}. Showing the whole queue.")
        return QueueFilters(order=order), problems
    return QueueFilters(order=order, **values), problems


@dataclass(frozen=True)
class QueueCursor:
    """Where a page starts: after (``forward``) or before a row's sort key."""

    order: str
    forward: bool
    key: tuple[Any, int]


_CURSOR_SALT = "moderation.queue.cursor"


def _cursor_make(*, order: str, forward: bool, item: QueueItem) -> str:
    first = QUEUE_ORDERS[order][0].lstrip("-")
    value = getattr(item, first)
    key = [value.isoformat() if isinstance(value, datetime) else value, item.id]
    return cursor_make(key={"o": order, "f": forward, "k": key}, salt=_CURSOR_SALT)


def queue_cursor_read(*, token: str | None, order: str) -> QueueCursor | None:
    """The cursor a page link carries; None for the first page.

    Signed, so a page can only start at a key this server handed out; a cursor that
    fails the signature or was made for another order raises ``CursorInvalid``.
    """
    if not token:
        return None
    try:
        data = cursor_read(token=token, salt=_CURSOR_SALT)
        first, item_id = data["k"]
        if data["o"] != order or not isinstance(data["f"], bool) or type(item_id) is not int:
            raise ValueError
        if order == "priority":
            if type(first) is not int:
                raise ValueError
            key: tuple[Any, int] = (first, item_id)
        else:
            when = datetime.fromisoformat(first)
            if when.tzinfo is None:
                raise ValueError
            key = (when, item_id)
    except (KeyError, TypeError, ValueError):  # CursorInvalid is a ValueError
        raise CursorInvalid("That page link is out of date or damaged: showing the first page.") from None
    return QueueCursor(order=order, forward=data["f"], key=key)


@dataclass(frozen=True)
class QueuePage:
    """One page of the queue, with cursors to its neighbours (None where there is none)."""

    object_list: list[QueueItem]
    next_cursor: str | None
    previous_cursor: str | None


def _has_flag(items: QuerySet[QueueItem], flag: str) -> QuerySet[QueueItem]:
    if connection.vendor == "postgresql":
        return items.filter(flags__contains=[flag])
    # SQLite has no JSON containment lookup: look for the flag among the list's elements.
    table = QueueItem._meta.db_table
    in_list = RawSQL(
        f'EXISTS (SELECT 1 FROM json_each("{table}"."flags") WHERE json_each.value = %s)', [flag], output_field=BooleanField()
    )
    return items.filter(in_list)


def _matching(items: QuerySet[QueueItem], q: str) -> QuerySet[QueueItem]:
    if connection.vendor == "postgresql":
        from django.contrib.postgres.search import SearchQuery, SearchVector

        return items.alias(document=SearchVector("title", "body", config=SEARCH_CONFIG)).filter(
            document=SearchQuery(q, config=SEARCH_CONFIG, search_type="websearch")
        )
    return items.filter(Q(title__icontains=q) | Q(body__icontains=q))


def _queue_filtered(filters: QueueFilters, *, viewer: AbstractBaseUser | None = None) -> QuerySet[QueueItem]:
    items = _queue_items().filter(items_visible_q(viewer=viewer), status=ItemStatus.PENDING)
    if filters.source:
        items = items.filter(source=filters.source)
    if filters.flag:
        items = _has_flag(items, filters.flag)
    if filters.risk:
        low, high = RISK_BANDS[filters.risk]
        items = items.filter(
            **({"risk__gte": low} if low is not None else {}), **({"risk__lt": high} if high is not None else {})
        )
    if filters.graph:
        items = items.filter(graph=filters.graph)
    if filters.q:
        items = _matching(items, filters.q)
    return items


def _key(order: str, item: QueueItem) -> tuple[Any, int]:
    return getattr(item, QUEUE_ORDERS[order][0].lstrip("-")), item.id


def _beyond(order: str, key: tuple[Any, int], *, forward: bool, inclusive: bool = False) -> Q:
    """Rows after ``key`` in ``order`` (before it when not ``forward``; the key's own row too when ``inclusive``).

    Spelled as ``first >= k AND (first > k OR id > i)`` rather than only the OR, so the
    index range starts at the key on both backends.
    """
    first = QUEUE_ORDERS[order][0]
    ascending = not first.startswith("-") if forward else first.startswith("-")
    column, value, item_id = first.lstrip("-"), key[0], key[1]
    later, at_least = ("gt", "gte") if ascending else ("lt", "lte")
    return Q(**{f"{column}__{at_least}": value}) & (
        Q(**{f"{column}__{later}": value}) | Q(**{f"id__{at_least if inclusive else later}": item_id})
    )


def _reversed(fields: tuple[str, str]) -> list[str]:
    return [name[1:] if name.startswith("-") else f"-{name}" for name in fields]


_QUEUE_PAGE_UNREAD = ("review_request", "graph_input", "metadata", "applied_result")
QUEUE_EXCERPT_CHARS = 120


def queue_pending(
    *,
    filters: QueueFilters,
    cursor: QueueCursor | None,
    per_page: int,
    viewer: AbstractBaseUser | None = None,
) -> QueuePage:
    """A page of pending items in ``filters.order`` starting at ``cursor`` (None: the first page), of those ``viewer`` may see.

    Keyset, not OFFSET: a page reads its own rows from the order's index, whatever its
    depth, in at most three queries (the page, whether there is one beyond it, its open
    asks) and without counting anything. Items decided or added between page loads
    shift no page boundary, so paging on never repeats or skips a row still pending.
    """
    order = filters.order
    # A row shows the body's first 120 characters and none of these JSON columns (the asks it
    # names come with their own rows): a body may be 200,000 characters, and reading and
    # decoding the JSON was a fifth of each row's cost (0.68 -> 0.54 ms on SQLite).
    items = (
        _queue_filtered(filters, viewer=viewer)
        .defer("body", *_QUEUE_PAGE_UNREAD)
        .annotate(excerpt=Substr("body", 1, QUEUE_EXCERPT_CHARS + 1))
    )
    ahead = items.order_by(*QUEUE_ORDERS[order])
    behind = items.order_by(*_reversed(QUEUE_ORDERS[order]))
    if cursor is None:
        rows = list(ahead[: per_page + 1])
        has_before, has_after = False, len(rows) > per_page
    elif cursor.forward:
        rows = list(ahead.filter(_beyond(order, cursor.key, forward=True))[: per_page + 1])
        if rows:
            has_after = len(rows) > per_page
            has_before = items.filter(_beyond(order, _key(order, rows[0]), forward=False)).exists()
        else:
            # Everything after the cursor was decided meanwhile: the page that ends where the last one did.
            back = list(behind.filter(_beyond(order, cursor.key, forward=False, inclusive=True))[: per_page + 1])
            has_before, has_after = len(back) > per_page, False
            rows = back[:per_page][::-1]
    else:
        back = list(behind.filter(_beyond(order, cursor.key, forward=False))[: per_page + 1])
        if len(back) > per_page:
            rows = back[:per_page][::-1]
            has_before = True
            has_after = items.filter(_beyond(order, _key(order, rows[-1]), forward=True)).exists()
        else:
            # Back at the start: the first page, full, rather than only what was left before the cursor.
            rows = list(ahead[: per_page + 1])
            has_before, has_after = False, len(rows) > per_page
    rows = rows[:per_page]
    for row in rows:
        row.excerpt = text_excerpt(text=row.excerpt, length=QUEUE_EXCERPT_CHARS)
    # The open asks ride along: the queue names the actions each item asks about.
    prefetch_related_objects(
        rows, Prefetch("asks", queryset=ReviewAsk.objects.filter(status=AskStatus.PENDING), to_attr="open_asks")
    )
    return QueuePage(
        object_list=rows,
        next_cursor=_cursor_make(order=order, forward=True, item=rows[-1]) if rows and has_after else None,
        previous_cursor=_cursor_make(order=order, forward=False, item=rows[0]) if rows and has_before else None,
    )


def queue_counts(*, now: datetime | None = None) -> QueueCounts:
    """Read from the counter rows moderation.records.counts keeps: no item is counted, whatever the queue's size."""
    read = counts_read(day=counted_day(now or timezone.now()))
    return QueueCounts(
        pending=read.status_total(ItemStatus.PENDING),
        decided_today=sum(read.decided_on_day.values()),
        pending_by_graph={graph: n for (graph, status), n in read.by_status.items() if status == ItemStatus.PENDING and n},
    )


def item_get(*, public_id: UUID | str, viewer: AbstractBaseUser | None = None) -> QueueItem | None:
    """The item, or None if there is none or ``viewer`` may not see it (another team's: as if it did not exist)."""
    try:
        return (
            QueueItem.objects.select_related("decided_by", "team", "requested_by")
            .filter(items_visible_q(viewer=viewer))
            .get(public_id=UUID(str(public_id)))
        )
    except (QueueItem.DoesNotExist, ValueError):
        return None


def item_asks_open(*, item: QueueItem) -> list[ReviewAsk]:
    """The asks of ``item`` still waiting for a decision, in the order its graph raised them."""
    return list(item.asks.filter(status=AskStatus.PENDING).order_by("round", "position", "id"))


def item_ask_get(*, item: QueueItem, interrupt_id: str) -> ReviewAsk | None:
    """The ask, or None; as for a malformed item id, also for an id no ask can have (the guard names the field)."""
    try:
        text_check(text=interrupt_id, field="ask")
    except TextInvalid:
        return None
    return item.asks.filter(interrupt_id=interrupt_id).first()


@dataclass(frozen=True)
class SettledAsk:
    """One decided (or withdrawn) ask, in words, for the item page."""

    by: str
    what: str
    at: datetime
    applied: bool
    edits: list[ActionEdit] = field(default_factory=list)  # what its edits changed in the proposed arguments


def item_asks_settled(*, item: QueueItem, messages: bool) -> list[SettledAsk]:
    """Every settled ask of ``item``, oldest first: who decided what, and whether its graph has taken it.

    ``messages``: include what reviewers wrote (moderators see notes, view-only users do not).
    """
    asks = item.asks.exclude(status=AskStatus.PENDING).select_related("decided_by").order_by("decided_at", "id")
    return [
        SettledAsk(
            by=ask.decided_by.get_username(),
            what="withdrew the item"
            if ask.status == AskStatus.WITHDRAWN
            else decisions_describe(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions, messages=messages),
            at=ask.decided_at,
            applied=ask.applied_at is not None,
            edits=ask_edits_diff(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions)
            if ask.status != AskStatus.WITHDRAWN and ask.decisions
            else [],
        )
        for ask in asks
    ]


@dataclass(frozen=True)
class VotePanel:
    """Who decides an item and how, for its page: the policy, the tally, who may still vote, the deadline."""

    policy: str  # "2 approvals, one rejection vetoes"
    quorum: bool
    team: str  # the team's name, "" for none
    requested_by: str  # who may never decide it, "" for nobody
    tally: str  # "2 of 3 approvals: alice, bob · carol rejected — vetoed"
    may_still_vote: list[str]  # usernames; empty when the ask is resolved
    your_vote: str  # approve / reject / "": the viewer's vote on the open ask, or counted in the resolved one
    you_requested: bool
    deadline_at: datetime | None
    then: str  # what the deadline does: "rejected by deadline", "escalated to Leads", ""
    escalated_at: datetime | None
    open: bool  # the ask is still being voted on
    voted_late: bool = False  # the viewer's vote came after the resolution (not counted)
    outcome: str = ""  # the resolved tally's outcome: approved / rejected

    @property
    def deadline_seconds_left(self) -> int:
        """For the countdown (live.js counts from this, not from the reader's clock)."""
        return max(0, int((self.deadline_at - timezone.now()).total_seconds())) if self.deadline_at else 0


_DEADLINE_THEN = {OnDeadline.APPROVE: "approved by deadline", OnDeadline.REJECT: "rejected by deadline"}


def item_vote_panel(*, item: QueueItem, viewer: AbstractBaseUser) -> VotePanel | None:
    """The panel of an item with a team, a requester, a quorum or a deadline (None for a plain item).

    Read from the ask still open (its ``Vote`` rows: the tally as it stands) or else the
    last resolved one (its ``tally``, frozen at resolution by the guard).
    """
    policy = policy_parse(item.policy or None)
    ask = item.asks.filter(status=AskStatus.PENDING).order_by("round", "position", "id").first()
    settled = ask is None
    if settled:
        ask = item.asks.exclude(tally={}).order_by("-decided_at", "-id").first()
    if not (item.team_id or item.requested_by_id or policy.is_quorum or (ask is not None and ask.deadline_at)):
        return None
    tally, may_vote, yours, late = "", [], "", False
    if ask is not None and settled:
        tally = ask.tally.get("summary", "")
        yours = next((v["vote"] for v in ask.tally.get("votes", []) if v["voter"] == viewer.get_username()), "")
        late = not yours and ask.attempts.filter(reviewer_id=viewer.pk, outcome=AttemptOutcome.LOST).exists()
    elif ask is not None and policy.is_quorum:
        votes = [(v.voter.get_username(), v.vote, v.voter_id) for v in ask.votes.select_related("voter")]
        voters = list(eligible_voters(team_id=item.team_id, requester_id=item.requested_by_id))
        tally = tally_describe(policy=policy, votes=[(n, k) for n, k, _ in votes], eligible=len(voters), resolution=None)
        voted = {pk for _, _, pk in votes}
        may_vote = sorted(u.get_username() for u in voters if u.pk not in voted)
        yours = next((k for _, k, pk in votes if pk == viewer.pk), "")
    on_deadline = policy.on_deadline
    then = _DEADLINE_THEN.get(on_deadline, "")
    if on_deadline == OnDeadline.ESCALATE and item.team is not None and item.team.escalate_to is not None:
        then = f"escalated to {item.team.escalate_to.name}"
    return VotePanel(
        policy=policy.describe(),
        quorum=policy.is_quorum,
        team=item.team.name if item.team else "",
        requested_by=item.requested_by.get_username() if item.requested_by else "",
        tally=tally,
        may_still_vote=may_vote,
        your_vote=yours,
        you_requested=item.requested_by_id == viewer.pk,
        deadline_at=ask.deadline_at if ask is not None and not settled else None,
        then=then,
        escalated_at=item.escalated_at,
        open=not settled,
        voted_late=late,
        # From the tally itself, not the item row read before it: the page never pairs a
        # resolved tally with a status from the instant before.
        outcome=PAST.get((ask.tally.get("resolution") or "") if settled and ask is not None else "", ""),
    )


def queue_tallies(*, items: list[QueueItem]) -> dict[int, str]:
    """The tally line of each quorum item on a queue page (item pk -> "1 of 2 approvals: alice"), from its open ask's votes."""
    quorum = {item.pk: (item, policy) for item in items if (policy := policy_parse(item.policy or None)).is_quorum}
    if not quorum:
        return {}
    votes: dict[int, list[tuple[str, str]]] = {pk: [] for pk in quorum}
    rows = Vote.objects.filter(ask__item_id__in=list(quorum), ask__status=AskStatus.PENDING).select_related("voter", "ask")
    for vote in rows.order_by("cast_at", "id"):
        votes[vote.ask.item_id].append((vote.voter.get_username(), vote.vote))
    eligible: dict[tuple[int | None, int | None], int] = {}
    lines = {}
    for pk, (item, policy) in quorum.items():
        key = (item.team_id, item.requested_by_id)
        if key not in eligible:
            eligible[key] = eligible_voters(team_id=key[0], requester_id=key[1]).count()
        lines[pk] = tally_describe(policy=policy, votes=votes[pk], eligible=eligible[key], resolution=None)
    return lines


def items_recently_decided(*, limit: int = 10, viewer: AbstractBaseUser | None = None) -> QuerySet[QueueItem]:
    return (
        _queue_items()
        .filter(items_visible_q(viewer=viewer))
        # Implied by the statuses (item_decided_iff_winner), and it keeps the pending rows'
        # NULLs out of the decided_at index walk: without it, a queue with a million pending
        # and few decided items read them all on every page.
        .filter(status__in=[s for s in DECIDED_STATUSES if s != ItemStatus.WITHDRAWN], decided_at__isnull=False)
        .select_related("decided_by")
        .order_by("-decided_at")[:limit]
    )


def items_needing_attention(*, limit: int = 50, viewer: AbstractBaseUser | None = None) -> QuerySet[QueueItem]:
    return (
        _queue_items()
        .filter(items_visible_q(viewer=viewer), status=ItemStatus.NEEDS_ATTENTION)
        .order_by("created_at", "id")[:limit]
    )


# --- Service clients (/api/v1) -------------------------------------------------------


def item_outcome_report_get(*, item: QueueItem) -> OutcomeReport | None:
    """What the item's remote agent reported it did with the decision, if it has."""
    return OutcomeReport.objects.filter(item=item).select_related("reported_by").first()


def client_items_prefetch(*, items: list[QueueItem]) -> None:
    """What the API's item answer reads, for items already in hand (a batch's): a few queries for all."""
    prefetch_related_objects(items, *_API_ITEM_RELATED, _ASKS)


def client_item_get(*, client_id: int, public_id: UUID | str) -> QueueItem | None:
    """One of the client's own items; a client never sees another's (or a moderator-made) item."""
    try:
        return (
            QueueItem.objects.select_related(*_API_ITEM_RELATED)
            .prefetch_related(_ASKS)
            .get(public_id=UUID(str(public_id)), submitted_by_id=client_id)
        )
    except (QueueItem.DoesNotExist, ValueError):
        return None


def client_items_page(
    *,
    client_id: int,
    after_id: int,
    limit: int,
    status: str | None = None,
    source: str | None = None,
    external_id: str | None = None,
    decided_after: datetime | None = None,
    graph: str | None = None,
) -> tuple[list[QueueItem], int | None]:
    """A page of the client's items in id order after ``after_id``, and the id to continue after.

    Keyset, not OFFSET: items inserted while a client pages get higher ids, so they
    never shift the items already paged (no duplicates, no skips).
    """
    items = QueueItem.objects.filter(submitted_by_id=client_id, id__gt=after_id)
    if status:
        items = items.filter(status=status)
    if source:
        items = items.filter(source=source)
    if external_id:
        items = items.filter(external_id=external_id)
    if decided_after:
        items = items.filter(decided_at__gt=decided_after)
    if graph:
        items = items.filter(graph=graph)
    page = list(items.select_related(*_API_ITEM_RELATED).prefetch_related(_ASKS).order_by("id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return page, (page[-1].id if more else None)
