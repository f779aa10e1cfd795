"""Where a webhook may go: public addresses, and the networks the operator allows.

Whoever configures an endpoint picks its URL, and the worker POSTs to it from inside the
deployment. Left open, an endpoint could reach the database, the cache, a cloud's metadata
service or anything else only the worker can reach, and the admin would show back the start
of its answer. So an address is refused unless it is public or lies in
``WEBHOOK_ALLOWED_NETWORKS`` (the rule: ``moderation.core.addresses``, which LangGraph
deployments follow too, with their own allowance).

Checked twice: when an endpoint is saved (``webhook_url_validate``, a validator of the model's
field, so the admin and every ``full_clean`` run it), and on the addresses the worker connects
to (``moderation.delivery.posting``), because a name's DNS answer can change after it was saved.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from moderation.core.addresses import IPAddress, host_addresses
from moderation.core.addresses import address_refusal as _refusal
from moderation.core.dbpool import connection_release


def address_refusal(address: IPAddress) -> str | None:
    """Why a webhook may not go to ``address``, or None when it may."""
    refusal = _refusal(address=address, allowed=settings.WEBHOOK_ALLOWED_NETWORKS)
    return refusal and f"{refusal}; webhooks go to public addresses only, unless WEBHOOK_ALLOWED_NETWORKS allows it"


def webhook_url_validate(value: str) -> None:
    """Refuse a URL whose host is, or resolves to, an address webhooks may not go to.

    A name that does not resolve from here is accepted: the worker checks every address it
    connects to anyway, and the admin may not see the worker's DNS. DNS may take up to
    ``WEBHOOK_TIMEOUT``: this thread's pooled connection is given back first, so a caller must
    not be inside a transaction (the admin's endpoint views are not).
    """
    host = urlsplit(value).hostname
    if not host:
        return  # not a URL: the URL validator says so
    connection_release()
    try:
        found = host_addresses(host=host, timeout=settings.WEBHOOK_TIMEOUT)
    except (OSError, TimeoutError):
        return
    for address in found:
        if refusal := address_refusal(address):
            raise ValidationError(f"the URL's host {host} is refused: {refusal}", code="webhook_target")


def webhook_url_check(value: str) -> None:
    """Everything a webhook URL must be, for every way an endpoint is made (admin, API, command):
    a well-formed http(s) URL (``ValidationError`` code ``url_invalid``) whose host is allowed
    (``webhook_url_validate``, code ``webhook_target``)."""
    if not isinstance(value, str) or not value.lower().startswith(("http://", "https://")):
        raise ValidationError("the URL must start with http:// or https://", code="url_invalid")
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError:
        raise ValidationError("not a valid URL", code="url_invalid") from None
    webhook_url_validate(value)
