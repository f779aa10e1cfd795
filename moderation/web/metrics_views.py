"""/metrics for Prometheus: who may read it and what it says are moderation.records.metrics'."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from moderation.records.metrics import metrics_access, metrics_exposition

_FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")
_REFUSALS = {401: "send Authorization: Bearer <METRICS_TOKEN>\n", 403: "this token may not read /metrics\n"}


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    status = metrics_access(
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        forwarded=any(name in request.headers for name in _FORWARDING_HEADERS),
        authorization=request.headers.get("Authorization", ""),
    )
    if status != 200:
        response = HttpResponse(_REFUSALS[status], status=status, content_type="text/plain; charset=utf-8")
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type = metrics_exposition()
    return HttpResponse(body, content_type=content_type)
