"""What every page that extends ``base.html`` needs, from one function, so no view can forget it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from moderation.core.permissions import user_can_decide


def base_context(request: HttpRequest) -> dict[str, Any]:
    """A context processor (TEMPLATES in settings): ``can_decide`` labels the viewer "view only" or not,
    and tells live.js what the page was rendered for (a mismatch reads as "your rights changed")."""
    return {"can_decide": user_can_decide(user=request.user)}
