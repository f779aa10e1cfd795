"""Service clients of /api/v1: accounts, bearer tokens, scopes.

A token is 32 random bytes (``secrets.token_urlsafe``) shown once; only its SHA-256 is
stored. A slow hash buys nothing against a 256-bit secret and would cost every request.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from moderation.delivery.models import ApiClient, ApiScope, ApiToken

# last_used_at is written at most this often per token: a write per request would
# take SQLite's write lock on every read.
LAST_USED_RESOLUTION = timedelta(seconds=60)
TOKEN_PREFIX = "rq_"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def apiclient_create(*, name: str, scopes: list[str]) -> tuple[ApiClient, str]:
    """A client with its service account and a first token; returns (client, token)."""
    unknown = sorted(set(scopes) - set(ApiScope.values))
    if unknown:
        raise ValidationError({"scopes": f"unknown scope {', '.join(unknown)}; known: {', '.join(ApiScope.values)}"})
    client = ApiClient(name=name, scopes=sorted(set(scopes)))
    client.full_clean(exclude=["user"])
    with transaction.atomic():
        client.user = service_user_create(name=name)
        client.save()
        token = token_issue(client=client)
    return client, token


def service_user_create(*, name: str):
    """The client's own user: no password that could log in, no groups, not staff."""
    user = get_user_model()(username=f"api.{name}")
    user.set_unusable_password()
    user.full_clean(exclude=["password"])
    user.save()
    return user


def token_issue(*, client: ApiClient) -> str:
    """A new token for the client; the only time it is ever seen."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(client=client, digest=token_digest(token), prefix=token[:10])
    return token


def token_authenticate(*, token: str) -> ApiClient | None:
    """The active client a live (unrevoked) token belongs to, or None."""
    row = (
        ApiToken.objects.select_related("client__user")
        .filter(digest=token_digest(token), revoked_at__isnull=True, client__is_active=True)
        .first()
    )
    if row is None:
        return None
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.client
