"""Which browser pages may open the dashboard's websockets.

A socket is accepted only from this site's own origin (scheme, host and port of the
socket request itself, as Django's CSRF check computes it for a form) or from an origin
listed in CSRF_TRUSTED_ORIGINS. Channels' AllowedHostsOriginValidator compares the host
only, so a page on the same host under another port or scheme could open a socket.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def _secure(scope: dict) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, expected = proxy_header
        header = name.removeprefix("HTTP_").lower().replace("_", "-").encode()
        value = _header(scope, header)
        return value is not None and value.split(",", 1)[0].strip() == expected
    return False


def websocket_origin_allowed(*, scope: dict) -> bool:
    """True if the socket's Origin is the site's own origin or a trusted one."""
    origin = _header(scope, b"origin")
    host = _header(scope, b"host")
    if not origin or not host:
        return False
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    own = f"{'https' if _secure(scope) else 'http'}://{host}"
    if origin == own:
        return True
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in trusted:
        return True
    parsed = urlsplit(origin)
    # CSRF_TRUSTED_ORIGINS entries like https://*.example.com, as Django's CSRF check reads them.
    return any(
        parsed.scheme == urlsplit(entry).scheme and is_same_domain(parsed.netloc, urlsplit(entry).netloc[1:])
        for entry in trusted
        if "://*." in entry
    )


class SameOriginValidator:
    """ASGI wrapper: refuses the handshake of a socket whose Origin is not allowed."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if websocket_origin_allowed(scope=scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
