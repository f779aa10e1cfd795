"""ASGI entry point: HTTP through Django, websockets through Channels."""

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
# Django must be set up before anything imports models (consumers, routing).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from moderation.core.bulkhead import BulkheadMiddleware, ServedRoutesMiddleware  # noqa: E402
from moderation.graphs.registry import graphs_check  # noqa: E402
from moderation.live.routing import websocket_urlpatterns  # noqa: E402
from moderation.records import events  # noqa: E402
from moderation.web.origins import SameOriginValidator  # noqa: E402
from reviewqueue.bodylimit import BodyLimitMiddleware, daphne_body_limit_install  # noqa: E402
from reviewqueue.heap import heap_freeze  # noqa: E402
from reviewqueue.serverlog import daphne_access_log_install  # noqa: E402

# daphne runs no system checks: a graph that cannot be imported stops the server here, by name.
graphs_check()
daphne_body_limit_install(max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
daphne_access_log_install()
# Outermost: a request this process does not serve (SERVE_ROUTES) is refused first, then one past its class's
# share, each before it costs a thread.
_router = ServedRoutesMiddleware(
    ProtocolTypeRouter(
        {
            "http": BulkheadMiddleware(BodyLimitMiddleware(django_asgi_app, max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)),
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)

# The URLconf (views, the API's schemas) is imported now rather than by the first request,
# so that it is part of the startup heap frozen here (the p99 of live notices: see heap).
get_resolver().url_patterns  # noqa: B018 - the property imports them
heap_freeze()


async def application(scope, receive, send):
    # Live pushes made in request threads are handed to this loop instead of being waited for.
    events.server_loop_register(asyncio.get_running_loop())
    await _router(scope, receive, send)
