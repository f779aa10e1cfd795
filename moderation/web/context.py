"""What every page that extends ``base.html`` needs (``TEMPLATES`` context processors), from one
place, so no view can forget it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.http import HttpRequest

from moderation.core.permissions import user_can_decide
from moderation.records.workers import WorkWait, work_state, work_wait


def base_context(request: HttpRequest) -> dict[str, Any]:
    """``can_decide`` labels the viewer "view only" or not, and tells live.js what the page was
    rendered for (a mismatch reads as "your rights changed"); ``lab_installed`` shows staff the race
    lab's link where its app is installed (reviewqueue.settings, REVIEWQUEUE_LAB)."""
    return {"can_decide": user_can_decide(user=request.user), "lab_installed": apps.is_installed("moderation.lab")}


def worker_banner(request: HttpRequest) -> dict[str, Callable[[], WorkWait | None]]:
    """``work_wait`` for staff: whether decisions wait for a task worker (base.html's banner).

    A callable, so the two queries run only when a staff page's template asks (never for others).
    """
    user = getattr(request, "user", None)
    staff = bool(user is not None and user.is_active and user.is_staff)
    return {"work_wait": (lambda: work_wait(state=work_state())) if staff else (lambda: None)}
