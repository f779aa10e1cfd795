"""The product's URLs plus ``/bench/ping``: the framework floor (no DB, no session, no template)."""

from django.http import HttpResponse
from django.urls import include, path


def ping(request):
    return HttpResponse(b"pong", content_type="text/plain")


urlpatterns = [
    path("bench/ping", ping),
    path("", include("reviewqueue.urls")),
]
