"""What /api/v1 accepts and answers: pydantic models, also the source of the OpenAPI schema."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, WithJsonSchema, field_validator

from moderation.core.text import TextInvalid, text_check
from moderation.delivery.outbox import outcome_payload
from moderation.graphs.asks import ArgChangeKind, AskSpec, ask_resume_langchain
from moderation.graphs.outcome import ERRORS_MAX, SUMMARY_MAX_CHARS, AppliedState
from moderation.graphs.passthrough import ask_external
from moderation.items.models import PRIORITY_MAX, PRIORITY_MIN, AskStatus, QueueItem, ReviewAsk
from moderation.policies.models import APPROVALS_MAX, TallyWhy, VoteKind
from moderation.policies.rules import DEADLINE_MAX_SECONDS, DEADLINE_USERNAME, PolicyInvalid, policy_field_check
from moderation.policies.teams import ask_tally_read
from moderation.records.models import OUTCOME_MESSAGE_MAX_LENGTH, OutcomeStatus
from moderation.records.outcomes import ask_edits, ask_what
from moderation.review.submissions import (
    CONTEXT_MESSAGE_MAX_LENGTH,
    CONTEXT_MESSAGES_MAX,
    CONTEXT_SUMMARY_MAX_LENGTH,
    EXTERNAL_MAX_LENGTHS,
    KEY_MAX_LENGTH,
)

BATCH_MAX_ITEMS = 500


def _storable(text: str) -> str:
    try:
        return text_check(text=text, field="")
    except TextInvalid as exc:
        raise ValueError(str(exc)) from None


# A text that goes straight into a query (a list filter): a NUL is a 422 naming it, not PostgreSQL's 500.
# What is submitted is checked by the services (moderation.review.items.item_texts_check).
QueryText = Annotated[str, AfterValidator(_storable)]


class Strict(Schema):
    # An unknown field is a client's bug (a typo drops data silently otherwise): refused.
    model_config = ConfigDict(extra="forbid")


class PolicyIn(Strict):
    """An item's approval policy; each field left out is the team's (or the default: one decision settles it).

    Each field is checked by the service's own rule (``moderation.policies.rules.policy_field_check``);
    the service (``policy_parse``) then checks the whole, with the team: more approvals than the team's
    moderators, its requester excluded, is a 422 naming ``policy.approvals``; so is a policy weaker than
    the team's, naming the first weakened field (``policy_weakenings``), unless the team allows weaker policies.
    """

    approvals: StrictInt | None = Field(
        default=None,
        description="distinct moderators who must approve",
        json_schema_extra={"minimum": 1, "maximum": APPROVALS_MAX},
    )
    majority: StrictBool | None = Field(default=None, description="approve with more than half of the moderators who may vote")
    veto: StrictBool | None = Field(default=None, description="one rejection ends the vote as rejected")
    deadline_seconds: StrictInt | None = Field(
        default=None,
        description="how long each ask may wait for its decision",
        json_schema_extra={"minimum": 1, "maximum": DEADLINE_MAX_SECONDS},
    )
    on_deadline: Literal["", "approve", "reject", "escalate"] | None = Field(
        default=None,
        description='at the deadline: resolved as "deadline", or escalated to the team\'s supervisor team; "" waits',
    )

    @field_validator("*", mode="before")
    @classmethod
    def _field_check(cls, value: Any, info: ValidationInfo) -> Any:
        # The service's rule for each field (policy_parse's), so a bad field is refused where it is, by the same words.
        if value is not None:
            try:
                policy_field_check(name=str(info.field_name), value=value)
            except PolicyInvalid as exc:
                raise ValueError(str(exc)) from None
        return value


class ExternalIn(Strict):
    """The asking agent's own ids, echoed on reads and webhooks; thread and interrupt id make the natural key."""

    thread_id: str | None = Field(default=None, min_length=1, max_length=EXTERNAL_MAX_LENGTHS["thread_id"])
    interrupt_id: str | None = Field(default=None, min_length=1, max_length=EXTERNAL_MAX_LENGTHS["interrupt_id"])
    run_id: str | None = Field(default=None, min_length=1, max_length=EXTERNAL_MAX_LENGTHS["run_id"])


class ContextMessageIn(Strict):
    """One message of the agent's conversation, shown as plain text (line breaks kept, nothing interpreted)."""

    role: str = Field(min_length=1, max_length=32, description='who wrote it: "human", "ai", "tool", "system"...')
    content: str = Field(max_length=CONTEXT_MESSAGE_MAX_LENGTH)
    name: str | None = Field(default=None, min_length=1, max_length=100, description="a tool message's tool")


class ContextIn(Strict):
    """Why the agent asks (with an ``ask`` only): its last messages and/or a summary in Markdown.

    Shown above the ask on the item's page; the Markdown is rendered without raw HTML or images,
    the messages as plain text. Control characters other than tab and line breaks are refused.
    """

    summary: str = Field(default="", max_length=CONTEXT_SUMMARY_MAX_LENGTH, description="Markdown (raw HTML is shown as text)")
    messages: list[ContextMessageIn] = Field(default_factory=list, max_length=CONTEXT_MESSAGES_MAX, description="oldest first")


class ItemIn(Strict):
    title: str = Field(min_length=1, max_length=200)
    # Its length limit is ITEM_BODY_MAX_LENGTH, checked by the service with the limit named.
    body: str = Field(min_length=1)
    source: str = Field(min_length=1, max_length=100)
    external_id: str | None = Field(default=None, min_length=1, max_length=KEY_MAX_LENGTH)
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    # A REVIEWQUEUE_GRAPHS name (the moderation graph by default), checked by the service,
    # which lists the registered ones when it is unknown.
    graph: str | None = Field(default=None, min_length=1, max_length=64)
    # Merged into the graph's start state; its limits are metadata's, checked by the service.
    input: dict[str, Any] = Field(default_factory=dict)
    # Approval policies (README "Approval policies"): the team (a slug; else the team that
    # owns the source or graph), the policy over the team's, and the user on whose behalf
    # the client submits, who may never decide the item (four eyes).
    team: str | None = Field(default=None, min_length=1, max_length=50)
    policy: PolicyIn | None = None
    requested_by: str | None = Field(default=None, min_length=1, max_length=150)
    # An agent's interrupt value (README "Approvals for an agent in your own service"): the item
    # runs the pass-through "ask" graph; its limits (ASK_MAX_BYTES, ASK_MAX_DEPTH) are checked by the service.
    ask: Any = None
    external: ExternalIn | None = None
    context: ContextIn | None = None


class ItemSubmitIn(ItemIn):
    # As a batch's (BatchIn): "queued" answers 202 with the item "starting" at once.
    start: Literal["now", "queued"] = "now"


class BatchItemIn(ItemIn):
    # Per item, since a batch has no one header for all.
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=KEY_MAX_LENGTH)


class DecisionOut(Schema):
    status: str
    by: str
    at: datetime
    note: str


class VoteOut(Schema):
    voter: str
    vote: VoteKind
    at: datetime


class TallyOut(Schema):
    """The votes on a quorum ask: counted so far while it is open, as they stood when it resolved after."""

    needed: int  # approvals that approve it
    eligible: int  # moderators who may vote (its requester excluded)
    veto: bool
    votes: list[VoteOut]  # one per moderator, oldest first (a changed vote dates from its change)
    resolution: VoteKind | None
    why: TallyWhy | None  # the enum the guard writes it from
    summary: str  # "2 of 3 approvals: alice, bob · carol rejected — vetoed"


# How an ask was resolved: its tally's why (the guard's TallyWhy, every one of them), one
# moderator's decision, or its submitter's withdrawal.
AskResolution = StrEnum(
    "AskResolution", {**{why.name: why.value for why in TallyWhy}, "DECISION": "decision", "WITHDRAWN": "withdrawn"}
)


class ArgChangeOut(Schema):
    arg: str
    change: ArgChangeKind
    before: Any = None  # null for an added argument
    after: Any = None  # null for a removed one


class ActionEditOut(Schema):
    """What an edit changed in the arguments the agent proposed for one action."""

    index: int  # the action's place in the ask
    action: str
    changes: list[ArgChangeOut]


class AskOut(Schema):
    """One interrupt of the item's graph, in LangChain's HITL request format, and its decision."""

    id: str  # LangGraph's Interrupt.id
    round: int
    status: str
    action_requests: list[dict[str, Any]]
    review_configs: list[dict[str, Any]]
    decided_by: str | None
    decided_at: datetime | None
    # LangChain decisions, one per action: {"type": "approve" | "edit" | "reject" | "respond", ...}
    decisions: list[dict[str, Any]]
    what: str  # the decisions in words: "edited refund (amount 120 → 80)"
    edits: list[ActionEditOut]  # per edit decision, each argument changed, added or removed ([] for none)
    reason: str  # the reason code of a reject ("" for none): one of the admin's ReasonCode codes
    applied: bool  # the worker has resumed the graph with the decision
    # When the worker's deadline sweep settles or escalates it (null: it waits).
    deadline_at: datetime | None
    tally: TallyOut | None  # quorum asks only
    # How it was resolved: "quorum" / "veto" / "impossible" (votes), "deadline", "decision"
    # (one moderator's, no quorum), "withdrawn"; null while open.
    resolution: AskResolution | None
    # The decisions as the asking graph resumes with them (``Command(resume=...)``); null while open.
    resume: Any = None

    @classmethod
    def of(cls, ask: ReviewAsk, *, item: QueueItem) -> AskOut:
        decided = ask.status != AskStatus.PENDING
        tally = ask_tally_read(item=item, ask=ask)
        return cls(
            id=ask.interrupt_id,
            round=ask.round,
            status=ask.status,
            action_requests=ask.payload["action_requests"],
            review_configs=ask.payload["review_configs"],
            decided_by=ask.decided_by.get_username() if decided else None,
            decided_at=ask.decided_at,
            decisions=ask.decisions,
            what=ask_what(ask) if decided else "",
            edits=ask_edits(ask) if decided else [],
            reason=ask.reason,
            applied=ask.applied_at is not None,
            deadline_at=ask.deadline_at,
            tally=tally,
            resolution=_resolution(ask, tally=tally) if decided else None,
            resume=_resume(ask) if decided else None,
        )


def _resume(ask: ReviewAsk) -> Any:
    return ask_resume_langchain(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions) if ask.decisions else None


def _resolution(ask: ReviewAsk, *, tally: dict[str, Any] | None) -> AskResolution:
    if ask.status == AskStatus.WITHDRAWN:
        return AskResolution.WITHDRAWN
    if tally and tally.get("why"):
        return AskResolution(tally["why"])
    return AskResolution.DEADLINE if ask.decided_by.get_username() == DEADLINE_USERNAME else AskResolution.DECISION


# ``applied_result`` stays the dict the worker wrote (``moderation.graphs.outcome.applied_result_build``);
# this documents its shape in the OpenAPI schema.
APPLIED_RESULT_SCHEMA = {
    "type": "object",
    "title": "AppliedResult",
    "description": "What the item's graph did after its latest decision ({} before any). docs/integrators/outcomes.md",
    "properties": {
        "state": {
            "type": "string",
            "enum": [s.value for s in AppliedState],
            "description": '"finished with errors": it ran to its end but a tool or the graph reported errors',
        },
        "summary": {
            "type": "string",
            "maxLength": SUMMARY_MAX_CHARS,
            "description": "the graph's own words: an agent's last answer, or its result's status",
        },
        "errors": {
            "type": "array",
            "maxItems": ERRORS_MAX,
            "items": {
                "type": "object",
                "required": ["where", "message"],
                "properties": {
                    "where": {"type": "string", "description": '"tool <name>", "graph", or the graph\'s own'},
                    "message": {"type": "string"},
                },
            },
        },
        "decisions": {"description": "pass-through (ask) items: the decisions as the agent's Command(resume=...) takes them"},
        "result": {"type": "object", "description": "the graph's own result key, as it left it"},
        "error": {"type": "string", "description": "failed or refused: the exception"},
        "asks": {"type": "integer", "description": "asked again: how many asks are open now"},
    },
}


class OutcomeIn(Strict):
    """What the agent did with the decision: ``done`` or ``failed``, and a short message (no control characters)."""

    status: Literal["done", "failed"]
    message: str = Field(default="", max_length=OUTCOME_MESSAGE_MAX_LENGTH)


class OutcomeOut(Schema):
    """The agent's report (``POST /items/{id}/outcome``); the first one stands."""

    status: OutcomeStatus
    message: str
    reported_at: datetime


class ItemOut(Schema):
    id: UUID
    title: str
    source: str
    status: str
    external_id: str | None
    metadata: dict[str, Any]
    priority: int
    created_at: datetime
    decided_at: datetime | None
    decision: DecisionOut | None
    graph: str
    asks: list[AskOut]
    # "" idle, "applying" (a decision waits for the worker), "failed" (needs manage.py recover)
    apply_state: str
    applied_result: Annotated[dict[str, Any], WithJsonSchema(APPLIED_RESULT_SCHEMA)]
    team: str | None  # the team's slug; only its moderators (and supervisors) may decide
    policy: dict[str, Any]  # the policy copied onto the item at submit: approvals, majority, veto, deadline_seconds, on_deadline
    requested_by: str | None  # who may never decide it (four eyes)
    deadline_at: datetime | None  # the first open ask's deadline
    escalated_at: datetime | None  # when a deadline handed it to the supervisor team
    external: dict[str, str] | None = None  # an ask's agent ids: {thread_id, interrupt_id, run_id}
    # Once no ask is open: the latest decision, ready for the agent's Command(resume=...).
    resume: Any = None
    outcome: OutcomeOut | None = None  # what the agent reported it did with the decision (null: no report yet)

    @classmethod
    def of(cls, item: QueueItem) -> ItemOut:
        decision = None
        if item.decided_by_id is not None:
            decision = DecisionOut(status=item.status, by=item.decided_by.username, at=item.decided_at, note=item.decision_note)
        asks = list(item.asks.all())
        first_open = next((a for a in asks if a.status == AskStatus.PENDING), None)
        outs = [AskOut.of(a, item=item) for a in asks]
        return cls(
            id=item.public_id,
            title=item.title,
            source=item.source,
            status=item.status,
            external_id=item.external_id,
            metadata=item.metadata,
            priority=item.priority,
            created_at=item.created_at,
            decided_at=item.decided_at,
            decision=decision,
            graph=item.graph,
            asks=outs,
            apply_state=item.apply_state,
            applied_result=item.applied_result,
            team=item.team.slug if item.team_id else None,
            policy=item.policy,
            requested_by=item.requested_by.get_username() if item.requested_by_id else None,
            deadline_at=first_open.deadline_at if first_open else None,
            escalated_at=item.escalated_at,
            external=ask_external(graph=item.graph, graph_input=item.graph_input),
            resume=outs[-1].resume if outs and first_open is None else None,
            outcome=_outcome(item),
        )


def _outcome(item: QueueItem) -> OutcomeOut | None:
    report = getattr(item, "outcome_report", None)
    return OutcomeOut(**outcome_payload(report=report)) if report else None


class ErrorOut(Schema):
    error: str
    message: str


class CancelIn(Strict):
    # A decision's note and a withdrawal's reason share the guard's limit (DECISION_NOTE_MAX_LENGTH).
    reason: str = ""


class CancelLost(ErrorOut):
    winner: str
    status: str
    decided_at: datetime


class ItemPage(Schema):
    items: list[ItemOut]
    next_cursor: str | None


class BatchIn(Strict):
    items: list[dict[str, Any]] = Field(min_length=1, max_length=BATCH_MAX_ITEMS)
    # "now": each graph runs in the request, and an item is answered pending with its asks.
    # "queued": items are answered "starting"; the task worker starts their graphs and each
    # enters the queue (webhook item.created) when its graph asks (moderation.review.starts).
    start: Literal["now", "queued"] = "now"


class BatchOutcome(Schema):
    index: int
    # "accepted": created, starting (start "queued"); "created": created, pending (start "now").
    outcome: Literal["created", "accepted", "existing", "invalid"]
    item: ItemOut | None = None
    error: str | None = None
    message: str | None = None


class BatchOut(Schema):
    results: list[BatchOutcome]
