"""Where a webhook may go: public addresses, and the networks the operator allows.

Whoever configures an endpoint picks its URL, and the worker POSTs to it from inside the
deployment. Left open, an endpoint could reach the database, the cache, a cloud's metadata
service or anything else only the worker can reach, and the admin would show back the start
of its answer. So an address is refused unless it is global unicast (``ipaddress``'s
``is_global``, neither multicast nor reserved) or lies in ``WEBHOOK_ALLOWED_NETWORKS``. An
IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``) is judged by the IPv4 address it carries.

Checked twice: when an endpoint is saved (``webhook_url_validate``, a validator of the model's
field, so the admin and every ``full_clean`` run it), and on the addresses the worker connects
to (``moderation.delivery.posting``), because a name's DNS answer can change after it was saved.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

IPAddress = IPv4Address | IPv6Address

# Names that mean this machine or a cloud's metadata service whatever DNS says, so they are
# refused even where DNS does not know them (the admin's host is not the worker's).
_LOOPBACK = [ip_address("127.0.0.1"), ip_address("::1")]
_KNOWN_NAMES = {
    "localhost": _LOOPBACK,
    "metadata.google.internal": [ip_address("169.254.169.254")],
    "metadata.goog": [ip_address("169.254.169.254")],
}
_NAT64 = ip_network("64:ff9b::/96")
_SHARED = ip_network("100.64.0.0/10")  # carrier-grade NAT; not "private" to ipaddress
# Private in the everyday sense; ipaddress's is_private also holds documentation and other special ranges.
_PRIVATE = [ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fec0::/10")]
# getaddrinfo has no timeout of its own; a lookup runs here so that the caller can stop waiting.
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


def host_addresses(*, host: str, timeout: float) -> list[IPAddress]:
    """The addresses ``host`` stands for: a literal address itself, a known local name its
    fixed addresses, any other name what DNS answers (in its order, without repeats).

    Raises ``OSError`` (``socket.gaierror``) when the name does not resolve and
    ``TimeoutError`` when DNS takes longer than ``timeout`` seconds.
    """
    host = host.strip("[]").rstrip(".").lower()
    try:
        return [ip_address(host)]
    except ValueError:
        pass
    if host in _KNOWN_NAMES:
        return _KNOWN_NAMES[host]
    if host.endswith(".localhost"):  # RFC 6761: always loopback
        return _LOOPBACK
    # Also turns the other spellings of an IPv4 address ("2130706433", "0x7f.1") into one.
    answers = _resolver.submit(socket.getaddrinfo, host, None, type=socket.SOCK_STREAM).result(timeout=timeout)
    return list(dict.fromkeys(ip_address(sockaddr[0].partition("%")[0]) for *_, sockaddr in answers))


def address_refusal(address: IPAddress) -> str | None:
    """Why a webhook may not go to ``address``, or None when it may."""
    carried = _ipv4_carried(address)
    if _allowed(address) or (carried is not None and _allowed(carried)):
        return None
    judged = carried or address
    kind = _kind(judged)
    if kind is None:
        return None
    shown = f"{address} (that is {judged})" if carried else str(address)
    return f"{shown} is {kind}; webhooks go to public addresses only, unless WEBHOOK_ALLOWED_NETWORKS allows it"


def webhook_url_validate(value: str) -> None:
    """Refuse a URL whose host is, or resolves to, an address webhooks may not go to.

    A name that does not resolve from here is accepted: the worker checks every address it
    connects to anyway, and the admin may not see the worker's DNS.
    """
    host = urlsplit(value).hostname
    if not host:
        return  # not a URL: the URL validator says so
    try:
        addresses = host_addresses(host=host, timeout=settings.WEBHOOK_TIMEOUT)
    except (OSError, TimeoutError):
        return
    for address in addresses:
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


def _allowed(address: IPAddress) -> bool:
    return any(address in network for network in settings.WEBHOOK_ALLOWED_NETWORKS if network.version == address.version)


def _ipv4_carried(address: IPAddress) -> IPv4Address | None:
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _kind(address: IPAddress) -> str | None:
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if address.is_multicast:
        return "a multicast address"
    if address.version == 4 and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if any(address in network for network in _PRIVATE if network.version == address.version):
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "not a public address (a reserved or special-purpose range)"
    return None

