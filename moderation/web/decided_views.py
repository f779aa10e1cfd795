"""The Decided page, an item's history, and the staff's CSV export (``moderation.records.timeline``)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from moderation.core.csvsafe import CsvSafeWriter
from moderation.core.cursors import CursorInvalid
from moderation.items.models import DECIDED_STATUSES, ItemStatus
from moderation.records.reasons import reason_labels
from moderation.records.selectors import item_get
from moderation.records.timeline import (
    decided_csv_rows,
    decided_filters_read,
    decided_page,
    item_timeline,
)
from moderation.web.display import edits_display


def _user_is_staff(user) -> bool:
    return user.is_active and user.is_staff


@login_required
@require_GET
def decided(request: HttpRequest) -> HttpResponse:
    filters, errors = decided_filters_read(data=request.GET)
    query = filters.as_query()
    try:
        page = decided_page(
            filters=filters,
            per_page=settings.DECIDED_PAGE_SIZE,
            viewer=request.user,
            after=request.GET.get("after") or None,
            before=request.GET.get("before") or None,
        )
    except CursorInvalid as exc:
        errors["page"] = str(exc)
        page = decided_page(filters=filters, per_page=settings.DECIDED_PAGE_SIZE, viewer=request.user)
    labels = reason_labels()
    for item in page.items:
        item.reason_words = [(ask.reason, labels.get(ask.reason, ask.reason)) for ask in item.reasoned_asks]
    return render(
        request,
        "moderation/decided.html",
        {
            "page": page,
            "filters": filters,
            "errors": errors,
            "statuses": [(s.value, s.label) for s in ItemStatus if s in DECIDED_STATUSES],
            "graphs": sorted(settings.REVIEWQUEUE_GRAPHS),
            "reasons": labels,
            "older_url": "?" + urlencode({**query, "after": page.older}) if page.older else "",
            "newer_url": "?" + urlencode({**query, "before": page.newer}) if page.newer else "",
            "export_url": "export.csv?" + urlencode(query),
            "can_export": _user_is_staff(request.user),
        },
    )


@login_required
@require_GET
def item_history(request: HttpRequest, public_id: str) -> HttpResponse:
    item = item_get(public_id=public_id, viewer=request.user)
    if item is None:
        raise Http404("No such item")
    labels = reason_labels()
    return render(
        request,
        "moderation/item_history.html",
        {
            "item": item,
            # Notes are the moderators' own words: a view-only account (can_decide, moderation.web.context)
            # sees who did what, not what they wrote.
            "entries": [
                (entry, labels.get(entry.reason, entry.reason), edits_display(edits=entry.edits))
                for entry in item_timeline(item=item)
            ],
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


_CSV = CsvSafeWriter(_Echo())
_CHUNK_LINES = 500


async def _chunks_async(lines: Iterator[str]) -> AsyncIterator[str]:
    # thread_sensitive: every chunk is read in the one thread that holds the query's cursor.
    take = sync_to_async(lambda: "".join(itertools.islice(lines, _CHUNK_LINES)), thread_sensitive=True)
    while chunk := await take():
        yield chunk


@login_required
@require_GET
def decided_export(request: HttpRequest) -> HttpResponse:
    if not _user_is_staff(request.user):
        return HttpResponse("Only staff can export the history.", status=403, content_type="text/plain")
    filters, _ = decided_filters_read(data=request.GET)
    lines = (_CSV.writerow(row) for row in decided_csv_rows(filters=filters, viewer=request.user))
    # Under ASGI a plain iterator would be read whole into memory before the first byte goes out.
    content = _chunks_async(lines) if isinstance(request, ASGIRequest) else lines
    response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
    stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="decided-{stamp}.csv"'
    return response
