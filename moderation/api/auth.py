"""Bearer tokens of service clients, one auth object per scope an operation needs."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from moderation.api.clients import token_authenticate
from moderation.delivery.models import ApiClient, ApiScope


class ScopeMissing(Exception):
    def __init__(self, scope: str) -> None:
        super().__init__(f"this token's client lacks the {scope} scope")
        self.scope = scope


class ClientToken(HttpBearer):
    """``Authorization: Bearer <token>``. No session cookie is read, so no CSRF is needed."""

    def __init__(self, scope: ApiScope) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> ApiClient | None:
        # Not HttpBearer's: under DEBUG it logs a header of another scheme whole ("Basic
        # rq_..." or a bare token), and a token must never reach a log line.
        scheme, _, token = request.headers.get(self.header, "").partition(" ")
        if scheme.lower() != self.openapi_scheme:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> ApiClient | None:
        client = token_authenticate(token=token) if token else None
        if client is not None and not client.has_scope(self.scope):
            raise ScopeMissing(self.scope)
        return client


read_auth = ClientToken(ApiScope.ITEMS_READ)
write_auth = ClientToken(ApiScope.ITEMS_WRITE)
