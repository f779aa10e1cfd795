"""The /lab page (staff only): the latest run's report and chart, and a button for a small run."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from moderation.lab.store import PAGE_RUN_ARGS, LabBusy, lab_latest, lab_latest_chart, lab_start_background, lab_status


def _staff_only(*, api: bool) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Anonymous users are sent to log in (401 for the API); logged-in non-staff get 403."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                if api:
                    return JsonResponse({"error": "unauthenticated", "message": "log in first"}, status=401)
                return redirect_to_login(request.get_full_path())
            if not (request.user.is_active and request.user.is_staff):
                if api:
                    return JsonResponse({"error": "forbidden", "message": "the race lab is for staff"}, status=403)
                return HttpResponse("The race lab is for staff.", status=403, content_type="text/plain")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


@require_GET
@_staff_only(api=False)
def lab(request: HttpRequest) -> HttpResponse:
    report = lab_latest()
    return render(
        request,
        "lab/lab.html",
        {
            "report": report,
            "has_chart": lab_latest_chart() is not None,
            "status": lab_status(),
            "page_run": " ".join(PAGE_RUN_ARGS),
        },
    )


@require_GET
@_staff_only(api=True)
def lab_status_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(lab_status())


@require_POST
@_staff_only(api=False)
def lab_run_start(request: HttpRequest) -> HttpResponse:
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        lab_start_background(requested_by=request.user.get_username())
    except LabBusy as exc:
        if wants_json:
            return JsonResponse({"error": "busy", "message": f"{exc}; wait for it to finish"}, status=409)
        return redirect("lab:page")
    if wants_json:
        return JsonResponse(lab_status(), status=202)
    return redirect("lab:page")


@require_GET
@_staff_only(api=False)
def lab_chart(request: HttpRequest) -> FileResponse:
    path = lab_latest_chart()
    if path is None:
        raise Http404("no lab run has finished yet")
    return FileResponse(path.open("rb"), content_type="image/svg+xml")
