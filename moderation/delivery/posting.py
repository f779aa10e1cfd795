"""One webhook POST: bounded as a whole, sent only where ``targets`` allows, its answer hardly read.

One deadline, ``WEBHOOK_TIMEOUT`` after the attempt began, bounds resolving, connecting, TLS,
sending and every read (``_DeadlineStream``): httpx's own timeout is per operation, so a
receiver answering a byte at a time could hold an attempt forever.

``_GuardedBackend`` resolves the name once, checks every address
(``moderation.delivery.targets``) and connects to a checked one, so DNS rebinding cannot slip
through; environment proxies are not used; TLS verifies the URL's name. Of a 2xx answer only
the status and headers are read; of any other at most ``BODY_READ_MAX`` bytes.
"""

from __future__ import annotations

import functools
import re
import ssl
import time

import httpcore
import httpx

from moderation.core.addresses import AddressRefused, GuardedBackend
from moderation.core.text import text_excerpt
from moderation.delivery.targets import address_refusal

BODY_READ_MAX = 1024
EXCERPT_CHARS = 100
# A name and its separator in name=value, name: value and "name": "value" (names bounded, so
# matching stays linear); the value after it is redacted when the name says secret. Only the
# name and separator are consumed: a pair inside another's value ("ERROR: secret=...") is
# found too. Also redacted: long opaque tokens.
_NAME = re.compile(r"(?P<name>[\w.-]{1,64})[\"']?\s*[:=]\s*(?P<quote>[\"']?)")
_VALUE = {
    "": re.compile(r"(?:bearer\s+|basic\s+)?[^\s\"'&,;]+", re.IGNORECASE),
    '"': re.compile(r'(?:\\.|[^"\\])+'),  # a quoted value ends at its closing quote, spaces and all
    "'": re.compile(r"(?:\\.|[^'\\])+"),
}
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|session|cookie|credential|signature", re.IGNORECASE)
_OPAQUE = re.compile(r"[A-Za-z0-9+/_=-]{24,}")
_SPACES = re.compile(r"\s{2,}")
REDACTED = "[redacted]"


def webhook_post(*, url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """POST ``body`` to ``url`` within ``timeout`` seconds in all; (status or None, error or "")."""
    deadline = time.monotonic() + timeout
    per_operation = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    try:
        with (
            httpcore.ConnectionPool(ssl_context=_ssl_context(), network_backend=_GuardedBackend(deadline)) as pool,
            pool.stream(
                "POST", url, headers=list(headers.items()), content=body, extensions={"timeout": per_operation}
            ) as response,
        ):
            if 200 <= response.status < 300:
                return response.status, ""
            return response.status, error_excerpt(status=response.status, head=_head_read(response))
    except AddressRefused as exc:
        return None, f"refused: {exc}"
    except httpcore.TimeoutException as exc:
        # Each operation may take only what is left, so any timeout is the whole attempt's.
        return None, f"{type(exc).__name__}: the attempt took its whole WEBHOOK_TIMEOUT ({timeout:g} s)"
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        # A protocol error quotes what the receiver sent (an "illegal status line"): scrubbed like a body.
        return None, f"{type(exc).__name__}: {_scrubbed(str(exc) or 'no detail', length=2 * EXCERPT_CHARS)}"


def error_excerpt(*, status: int, head: bytes) -> str:
    """What is kept of a non-2xx answer: its status and at most EXCERPT_CHARS printable characters
    of its body, secrets redacted (``_scrubbed``)."""
    text = _scrubbed(head.decode("utf-8", errors="replace"), length=EXCERPT_CHARS)
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _scrubbed(text: str, *, length: int) -> str:
    """One line of printable text, secrets redacted, cut to ``length`` characters.

    Redacted before the cut, so that a secret cut in half is not half shown.
    """
    text = _SPACES.sub(" ", "".join(c if c.isprintable() else " " for c in text)).strip()
    text = _secret_values_redacted(text)
    text = _OPAQUE.sub(lambda m: REDACTED if _looks_opaque(m[0]) else m[0], text)
    return text_excerpt(text=text, length=length)


def _secret_values_redacted(text: str) -> str:
    kept, done = [], 0
    for name in _NAME.finditer(text):
        if name.start() < done or not _SECRET_NAME.search(name["name"]):
            continue
        value = _VALUE[name["quote"]].match(text, name.end())
        if value is not None:
            kept += [text[done : name.end()], REDACTED]
            done = value.end()
    return "".join(kept) + text[done:]


def _looks_opaque(word: str) -> bool:
    return any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


def _head_read(response: httpcore.Response) -> bytes:
    head = b""
    for chunk in response.iter_stream():
        head += chunk
        if len(head) >= BODY_READ_MAX:
            break
    return head[:BODY_READ_MAX]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # httpx's: certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR when set (a private CA).
    return httpx.create_ssl_context()


def _left(deadline: float, expired: type[Exception]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("out of time")
    return left


class _GuardedBackend(GuardedBackend):
    """The address check's backend, every operation bounded by the attempt's deadline."""

    def __init__(self, deadline: float) -> None:
        super().__init__(refusal=address_refusal)
        self._deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = super().connect_tcp(
            host,
            port,
            timeout=_left(self._deadline, httpcore.ConnectTimeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self._deadline)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the attempt's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes, timeout=None):
        return self._stream.read(max_bytes, self._bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer, timeout=None):
        self._stream.write(buffer, self._bounded(timeout, httpcore.WriteTimeout))

    def close(self):
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        stream = self._stream.start_tls(ssl_context, server_hostname, self._bounded(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream, self._deadline)

    def get_extra_info(self, info):
        return self._stream.get_extra_info(info)

    def _bounded(self, timeout: float | None, expired: type[Exception]) -> float:
        left = _left(self._deadline, expired)
        return left if timeout is None else min(timeout, left)
