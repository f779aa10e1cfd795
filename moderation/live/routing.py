from django.urls import path, re_path

from moderation.live import consumers


async def websocket_unrouted(scope, receive, send) -> None:
    """Any other websocket path: refused before the handshake, like an unknown item.

    Without it Channels' router raises, which daphne answers with a 500 and an ERROR
    traceback, and anyone could fill the log with them.
    """
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 4404})


websocket_urlpatterns = [
    path("ws/queue/", consumers.LiveConsumer.as_asgi()),
    path("ws/items/<uuid:public_id>/", consumers.LiveConsumer.as_asgi()),
    re_path(r"", websocket_unrouted),
]
