"""Response headers that depend on who is asking."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control


class PrivateCacheMiddleware:
    """Per-user pages and every API answer are never stored by a browser or a proxy.

    Answers that set their own Cache-Control (the login page's never_cache) keep it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        per_user = request.user.is_authenticated or request.path.startswith("/api/")
        if per_user and not response.has_header("Cache-Control"):
            patch_cache_control(response, private=True, no_store=True)
        return response
