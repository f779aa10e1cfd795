"""The product's URLs plus two floors: ``/bench/ping`` (the framework alone, asked with no cookie: no DB, no session, no
template) and ``/bench/whoami`` (the trivial authenticated endpoint: the session and user reads
every logged-in request pays, and no more)."""

from django.http import HttpResponse
from django.urls import include, path


def ping(request):
    return HttpResponse(b"pong", content_type="text/plain")


def whoami(request):
    if not request.user.is_authenticated:
        return HttpResponse(status=401)
    return HttpResponse(request.user.get_username().encode(), content_type="text/plain")


urlpatterns = [
    path("bench/ping", ping),
    path("bench/whoami", whoami),
    path("", include("reviewqueue.urls")),
]
