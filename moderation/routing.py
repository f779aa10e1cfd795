from django.urls import path

from moderation import consumers

websocket_urlpatterns = [
    path("ws/queue/", consumers.LiveConsumer.as_asgi()),
    path("ws/items/<uuid:public_id>/", consumers.LiveConsumer.as_asgi()),
]
