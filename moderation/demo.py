"""Demo moderators and items for `make run` (development only)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from moderation.core.permissions import MODERATORS_GROUP
from moderation.graphs.passthrough import NAME as PASSTHROUGH
from moderation.items.models import QueueItem
from moderation.policies.teams import TeamSpec, team_save
from moderation.records.models import ReasonOffer
from moderation.records.reasons import reason_codes_fitting, reason_rule_save
from moderation.review.items import item_create

DEMO_SOURCE = "demo"
DEMO_MODERATORS = ("alice", "bob", "carol")
DEMO_VIEWER = "dave"

DEMO_ITEMS = [
    ("Weekend hiking photos", "Sharing some photos from the ridge trail. The view at sunrise was worth the 4am start."),
    ("BUY NOW LIMITED OFFER!!!", "CLICK HERE FOR FREE MONEY http://example.test/win http://example.test/now GUARANTEED!!!"),
    ("Question about the API rate limits", "Does anyone know if the limit is per key or per account? The docs are unclear."),
    ("Recipe: lentil soup", "Onion, carrot, celery, red lentils, cumin. Simmer 25 minutes. Lemon at the end."),
    ("You are all idiots", "I hate this forum and everyone on it. Total scam, the mods are useless."),
    ("Meetup in Lisbon next month", "We are planning a small meetup near Cais do Sodré. Reply if you want to join."),
    (
        "Crypto winner announcement",
        "Congratulations winner! Claim your crypto at www.example.test/claim, contact prize@example.test",
    ),
    ("Bug report: export button", "The CSV export button does nothing on Firefox 140. Console shows a CSP error."),
    ("Book recommendation thread", "Just finished The Dispossessed. Looking for more utopian sci-fi with real trade-offs."),
    ("Selling my old bike", "Steel frame, 56cm, new chain. Pickup only. Message me here, not by email."),
    ("Review of the new cafe on Main St", "Coffee was excellent, pastries stale. Service friendly but slow at lunch."),
    ("PLEASE READ THIS IMPORTANT", "THE SERVERS WILL BE DOWN TONIGHT AND NOBODY TOLD US ANYTHING ABOUT IT AT ALL"),
    ("Tips for learning Rust", "Start with the book, then rustlings, then write a small CLI that you actually use."),
    (
        "Guaranteed followers",
        "Get 10k followers guaranteed, click here: https://example.test/f https://example.test/g https://example.test/h",
    ),
    ("Local election debate notes", "Summary of both candidates' positions on transit and housing, with links to sources."),
    ("Lost cat near the park", "Grey tabby, answers to Miso, last seen Tuesday evening near the north gate."),
    ("Gardening: tomato blight", "Lower leaves are yellowing with brown spots. Is it too late to save the plants?"),
    ("Invitation: open source sprint", "Join us Saturday for a docs sprint. Beginners welcome, we pair everyone up."),
    ("Complaint about delivery", "Third late delivery this month. Support keeps closing my ticket without a reply."),
    ("Poem: November", "Grey light on wet slate, / the kettle's small weather, / a letter unanswered."),
]

REFUND_AGENT = "refund_agent"
# The refund agent's items belong to payments: two of its three moderators must approve,
# one rejection vetoes, and an item nobody settles within the hour goes to the leads.
DEMO_TEAMS = [
    ("leads", TeamSpec(name="Leads", add=("alice",))),
    (
        "payments",
        TeamSpec(
            name="Payments",
            approvals=2,
            veto=True,
            deadline_seconds=3600,
            on_deadline="escalate",
            escalate_to="leads",
            graphs=[REFUND_AGENT],
            add=DEMO_MODERATORS,
        ),
    ),
]
# Customer messages for the example agent (examples/refund_agent), with how many rounds
# of asks each makes: one refund to decide; a refund and an email in one ask; a refund,
# then (a second round) the email saying what was actually refunded.
DEMO_AGENT_ITEMS = [
    ("Refund: broken mug (A-17)", "Hi, order A-17 arrived broken. Please refund 120 EUR.", 1),
    (
        "Refund: parcel never came (B-9)",
        "Order B-9 never arrived. Refund the full amount and email me a confirmation at ben@home.example.",
        1,
    ),
    ("Refund: lost in transit (C-3)", "Order C-3 was lost. Please refund $250, then email me once it's done.", 2),
]


def demo_agent_input(*, message: str) -> dict:
    """The refund agent's start state: the customer's message as the conversation."""
    return {"messages": [{"role": "user", "content": message}]}


def demo_seed(*, progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
    """Create demo users and items if missing; return (users created, items created)."""
    if not settings.DEBUG:
        raise RuntimeError("demo data is only created with DEBUG on")
    User = get_user_model()
    group = Group.objects.get(name=MODERATORS_GROUP)
    users_created = 0
    for username in (*DEMO_MODERATORS, DEMO_VIEWER):
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(settings.DEMO_PASSWORD)
            user.save()
            users_created += 1
        if username in DEMO_MODERATORS:
            user.groups.add(group)
    for slug, spec in DEMO_TEAMS:  # before the items: the agent's items join payments as they are created
        team, _ = team_save(slug=slug, spec=spec)
        # A rejected refund says why in the words of tool calls (wrong amount, not permitted), not Spam or Abusive;
        # with every such code retired the team falls back to the settings' rule.
        codes = [code.code for code in reason_codes_fitting(graph=PASSTHROUGH)]
        if REFUND_AGENT in (spec.graphs or ()) and codes:
            reason_rule_save(team=team, graph=REFUND_AGENT, offer=ReasonOffer.LISTED, codes=codes, required=False)
    existing = set(QueueItem.objects.filter(source=DEMO_SOURCE).values_list("title", flat=True))
    items = [(title, body, None) for title, body in DEMO_ITEMS]
    items += [(title, body, REFUND_AGENT) for title, body, _ in DEMO_AGENT_ITEMS]
    missing = [item for item in items if item[0] not in existing]
    for done, (title, body, graph) in enumerate(missing, start=1):
        graph_input = demo_agent_input(message=body) if graph else None
        item_create(title=title, body=body, source=DEMO_SOURCE, graph=graph, graph_input=graph_input)
        if progress is not None:
            progress(done, len(missing))
    return users_created, len(missing)
