"""Template context for every page (``TEMPLATES`` context processors)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest

from moderation.records.workers import WorkWait, work_state, work_wait


def worker_banner(request: HttpRequest) -> dict[str, Callable[[], WorkWait | None]]:
    """``work_wait`` for staff: whether decisions wait for a task worker (base.html's banner).

    A callable, so the two queries run only when a staff page's template asks (never for others).
    """
    user = getattr(request, "user", None)
    staff = bool(user is not None and user.is_active and user.is_staff)
    return {"work_wait": (lambda: work_wait(state=work_state())) if staff else (lambda: None)}
