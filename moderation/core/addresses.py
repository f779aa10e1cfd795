"""Which addresses an outbound request may reach: public ones, and the networks an operator allows.

Whoever configures a URL the server calls (a webhook endpoint, a LangGraph deployment) picks
where requests go from inside the installation. Left open, such a URL could reach the
database, the cache, a cloud's metadata service or anything else only the server can reach.
So an address is refused unless it is global unicast (``ipaddress``'s ``is_global``, neither
multicast nor reserved) or lies in a network the caller allows (``WEBHOOK_ALLOWED_NETWORKS``,
``DEPLOYMENT_ALLOWED_NETWORKS``). An IPv6 address that carries an IPv4 one (IPv4-mapped
``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged by the IPv4
address it carries.

``GuardedBackend`` is httpcore's network backend that resolves a name once, checks every
address and connects to a checked one, so a DNS answer that changes between the check and the
connect (rebinding) cannot slip through.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import httpcore

IPAddress = IPv4Address | IPv6Address
# httpcore's socket option: (level, option, value), the value an int, bytes, or (None, length).
SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
IPNetwork = IPv4Network | IPv6Network

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
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="address-dns")


class AddressRefused(Exception):
    """A host is, or resolves to, an address the request may not go to."""


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
    return list(dict.fromkeys(ip_address(str(sockaddr[0]).partition("%")[0]) for *_, sockaddr in answers))


def address_refusal(*, address: IPAddress, allowed: Iterable[IPNetwork]) -> str | None:
    """Why a request may not go to ``address`` ("10.0.0.5 is a private address"), or None when it may."""
    allowed = list(allowed)
    carried = _ipv4_carried(address)
    if _in(address, allowed) or (carried is not None and _in(carried, allowed)):
        return None
    judged = carried or address
    kind = _kind(judged)
    if kind is None:
        return None
    shown = f"{address} (that is {judged})" if carried else str(address)
    return f"{shown} is {kind}"


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, connecting only to addresses ``refusal`` has nothing against.

    ``AddressRefused`` (naming the host and why) if any address the host stands for is refused.
    """

    def __init__(self, *, refusal: Callable[[IPAddress], str | None]) -> None:
        self._refusal = refusal
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        started = time.monotonic()
        try:
            addresses = host_addresses(host=host, timeout=timeout or 30.0)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"{host} did not resolve in time") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from None
        for address in addresses:
            if refusal := self._refusal(address):
                raise AddressRefused(f"{host}: {refusal}" if str(address) != host.strip("[]") else refusal)
        error: Exception | None = None
        for address in addresses:  # in DNS's order, as a plain connect would try them
            left = None if timeout is None else timeout - (time.monotonic() - started)
            if left is not None and left <= 0:
                raise httpcore.ConnectTimeout(f"{host}: out of time")
            try:
                return self._tcp.connect_tcp(
                    str(address), port, timeout=left, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        raise AddressRefused("a unix socket is not an address a request may go to")

    def sleep(self, seconds: float) -> None:
        self._tcp.sleep(seconds)


def _in(address: IPAddress, networks: list[IPNetwork]) -> bool:
    return any(address in network for network in networks if network.version == address.version)


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
