"""Demo moderators and items for `make run` (development only)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from moderation.items import item_create
from moderation.models import QueueItem
from moderation.permissions import MODERATORS_GROUP

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
    ("Crypto winner announcement", "Congratulations winner! Claim your crypto at www.example.test/claim, contact prize@example.test"),
    ("Bug report: export button", "The CSV export button does nothing on Firefox 140. Console shows a CSP error."),
    ("Book recommendation thread", "Just finished The Dispossessed. Looking for more utopian sci-fi with real trade-offs."),
    ("Selling my old bike", "Steel frame, 56cm, new chain. Pickup only. Message me here, not by email."),
    ("Review of the new cafe on Main St", "Coffee was excellent, pastries stale. Service friendly but slow at lunch."),
    ("PLEASE READ THIS IMPORTANT", "THE SERVERS WILL BE DOWN TONIGHT AND NOBODY TOLD US ANYTHING ABOUT IT AT ALL"),
    ("Tips for learning Rust", "Start with the book, then rustlings, then write a small CLI that you actually use."),
    ("Guaranteed followers", "Get 10k followers guaranteed, click here: https://example.test/f https://example.test/g https://example.test/h"),
    ("Local election debate notes", "Summary of both candidates' positions on transit and housing, with links to sources."),
    ("Lost cat near the park", "Grey tabby, answers to Miso, last seen Tuesday evening near the north gate."),
    ("Gardening: tomato blight", "Lower leaves are yellowing with brown spots. Is it too late to save the plants?"),
    ("Invitation: open source sprint", "Join us Saturday for a docs sprint. Beginners welcome, we pair everyone up."),
    ("Complaint about delivery", "Third late delivery this month. Support keeps closing my ticket without a reply."),
    ("Poem: November", "Grey light on wet slate, / the kettle's small weather, / a letter unanswered."),
]


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
    existing = set(QueueItem.objects.filter(source=DEMO_SOURCE).values_list("title", flat=True))
    missing = [(title, body) for title, body in DEMO_ITEMS if title not in existing]
    for done, (title, body) in enumerate(missing, start=1):
        item_create(title=title, body=body, source=DEMO_SOURCE)
        if progress is not None:
            progress(done, len(missing))
    return users_created, len(missing)
