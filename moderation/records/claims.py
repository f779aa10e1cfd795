"""Claims that expire: who is reading an item, so the others read something else.

Opening an item claims it for ``CLAIM_SECONDS``; activity renews the claim; deciding,
leaving or waiting ends it. An expired claim is ignored wherever claims are read, so nothing
sweeps them. Claims are advisory ("next item" skips claimed items) except with
``CLAIMS_REQUIRED``, where the guard refuses a decision or vote on an item someone else holds
(``moderation.review.decisions``). Only someone who may decide the item, and has not voted on
its open ask, claims it; a claim whose holder lost the right binds nobody.

One ``ItemClaim`` row per item (the item is its primary key, so two simultaneous claims
cannot both insert); taking an expired or one's own claim is one conditional UPDATE.
``CLAIMS_ENABLED = False`` turns claims off. Moderators' view: moderators/claims.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from moderation.items.models import AskStatus, ItemStatus, QueueItem
from moderation.policies.models import Vote
from moderation.policies.teams import decide_right_read
from moderation.records import events
from moderation.records.models import ItemClaim


@dataclass(frozen=True)
class Claim:
    """A live claim, in the words the pages use."""

    item_public_id: str
    holder: str
    holder_id: int
    expires_at: datetime

    def seconds_left(self, now: datetime | None = None) -> int:
        return max(0, math.ceil((self.expires_at - (now or timezone.now())).total_seconds()))

    def left_text(self, now: datetime | None = None) -> str:
        """``3 min left``: whole minutes, rounded up, so a live claim never reads "0 min"."""
        return f"{max(1, math.ceil(self.seconds_left(now) / 60))} min left"

    def describe(self, now: datetime | None = None) -> str:
        return f"claimed by {self.holder} · {self.left_text(now)}"


def _claim_of(row: ItemClaim, item_public_id: str) -> Claim:
    return Claim(item_public_id=item_public_id, holder=row.user.get_username(), holder_id=row.user_id, expires_at=row.expires_at)


def claim_live(*, item, now: datetime | None = None) -> Claim | None:
    """The item's live claim, whoever holds it (None: unclaimed, expired, or claims are off)."""
    row = _live_row(item=item, now=now)
    return _claim_of(row, str(item.public_id)) if row else None


def _live_row(*, item, now: datetime | None) -> ItemClaim | None:
    if not settings.CLAIMS_ENABLED:
        return None
    return ItemClaim.objects.select_related("user").filter(item_id=item.pk, expires_at__gt=now or timezone.now()).first()


def claims_live(*, items: Iterable, now: datetime | None = None) -> dict[int, Claim]:
    """The live claims of several items (one query), by item pk: for the queue's rows."""
    if not settings.CLAIMS_ENABLED:
        return {}
    by_pk = {item.pk: str(item.public_id) for item in items}
    rows = ItemClaim.objects.select_related("user").filter(item_id__in=by_pk, expires_at__gt=now or timezone.now())
    return {row.item_id: _claim_of(row, by_pk[row.item_id]) for row in rows}


def claim_take(*, item, user: AbstractBaseUser, now: datetime | None = None) -> Claim | None:
    """Claim the item for ``user`` unless someone else holds a live claim on it, or ``user`` may not claim it
    (the module docstring: may not decide it, or has voted on it).

    Returns the item's live claim afterwards: ``user``'s own (taken or renewed) or the
    other holder's, which is left as it is (advisory: reading is never refused). None
    when claims are off.
    """
    if not settings.CLAIMS_ENABLED:
        return None
    now = now or timezone.now()
    if not claim_allowed(item=item, user=user):
        return claim_live(item=item, now=now)
    expires_at = now + timedelta(seconds=settings.CLAIM_SECONDS)
    if ItemClaim.objects.filter(item_id=item.pk, user_id=user.pk, expires_at__gt=now).update(taken_at=now, expires_at=expires_at):
        return claim_live(item=item, now=now)  # renewed: nobody else's view of it changed
    # Free or expired: one conditional statement, so of two takers only one matches the row.
    taken = (
        ItemClaim.objects.filter(item_id=item.pk)
        .filter(Q(user_id=user.pk) | Q(expires_at__lte=now))
        .update(user_id=user.pk, taken_at=now, expires_at=expires_at)
    )
    if not taken:
        try:
            with transaction.atomic():
                ItemClaim.objects.create(item_id=item.pk, user_id=user.pk, taken_at=now, expires_at=expires_at)
            taken = 1
        except IntegrityError:
            pass  # someone else claimed it first (or holds it live)
    claim = claim_live(item=item, now=now)
    if taken and claim is not None:
        events.after_commit(
            lambda: events.claim_broadcast(
                item_public_id=claim.item_public_id, holder=claim.holder, seconds_left=claim.seconds_left()
            )
        )
    return claim


def claim_release(*, item_public_id: str, user_id: int, taken_before: datetime | None = None) -> bool:
    """End ``user_id``'s claim on the item, if they hold one; tell the others.

    ``taken_before``: a page that closes releases only a claim taken before it opened,
    never the one its own reload (or the next page on the same item) has just taken.
    """
    rows = ItemClaim.objects.filter(item__public_id=item_public_id, user_id=user_id)
    if taken_before is not None:
        rows = rows.filter(taken_at__lte=taken_before)
    if not rows.delete()[0]:
        return False
    events.after_commit(lambda: events.claim_released_broadcast(item_public_id=str(item_public_id)))
    return True


def claim_allowed(*, item, user: AbstractBaseUser) -> bool:
    """May ``user`` claim the item: may they decide it, and have they not voted on its open ask yet?"""
    if not decide_right_read(team_id=item.team_id, requester_id=item.requested_by_id, user=user):
        return False
    return not Vote.objects.filter(ask__item_id=item.pk, ask__status=AskStatus.PENDING, voter_id=user.pk).exists()


def claim_held_by_other(*, item, user: AbstractBaseUser, now: datetime | None = None) -> Claim | None:
    """Someone else's live claim on the item (what ``CLAIMS_REQUIRED`` refuses a decision or a vote over),
    if its holder may still decide the item (one removed from its team since binds nobody)."""
    row = _live_row(item=item, now=now)
    if row is None or row.user_id == user.pk:
        return None
    if not decide_right_read(team_id=item.team_id, requester_id=item.requested_by_id, user=row.user):
        return None
    return _claim_of(row, str(item.public_id))


def next_item_pick(*, candidates: Iterable, user: AbstractBaseUser, skip_public_id: str | None = None):
    """The first of ``candidates`` (pending items in the moderator's order) that ``user`` can claim, claimed.

    Skips the item just decided and, with claims on, every item someone else holds; an
    item claimed by someone else between the read and the take is skipped too, and so is
    one decided meanwhile (its decider's claim ends with the decision, so the take finds
    it free). None when nothing is left. With claims off, simply the first candidate.
    """
    for item in candidates:
        if str(item.public_id) == skip_public_id:
            continue
        if not settings.CLAIMS_ENABLED:
            return item
        claim = claim_take(item=item, user=user)
        if claim is None or claim.holder_id != user.pk:
            continue
        if QueueItem.objects.filter(pk=item.pk, status=ItemStatus.PENDING).exists():
            return item
        claim_release(item_public_id=str(item.public_id), user_id=user.pk)
    return None
