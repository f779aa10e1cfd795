"""Every line a process logs goes through one handler, and no logged URL keeps a secret.

Left alone, a server's stderr mixes four writers: our handler, the root handler daphne's
command line installs (daphne's, Twisted's and asyncio's lines, and Django's), Django's own
console handler in development, and daphne's access log, which prints each request line
(query string included, so a deployment webhook's ``?token=``) to stdout. With
``LOG_FORMAT=json`` most lines were plain text, a traceback over many lines. So:

- ``logging_configure`` (``LOGGING_CONFIG``) gives the root logger our handler in place of
  daphne's, and Django's loggers none of their own (theirs reach the root's), and logs
  warnings and an uncaught exception, of the main thread or another, as one record each;
- ``daphne_access_log_install`` (called by ``reviewqueue.asgi``) sends daphne's access lines
  to the ``reviewqueue.access`` logger instead of stdout, their secrets scrubbed.
"""

from __future__ import annotations

import logging
import logging.config
import re
import sys
import threading
from urllib.parse import parse_qsl, urlencode

access_logger = logging.getLogger("reviewqueue.access")
_uncaught = logging.getLogger("reviewqueue.uncaught")

# A query parameter whose name says it carries a credential (token, api_key, X-Amz-Signature,
# password, client_secret, auth, code, sig, session...) keeps its name; its value is replaced.
_SECRET_NAME = re.compile(r"token|secret|key|sig|pass|auth|credential|session|code", re.IGNORECASE)
SCRUBBED = "[scrubbed]"


def url_scrubbed(path: str) -> str:
    """``path`` with the values of its secret-looking query parameters replaced."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    scrubbed = [(name, SCRUBBED if _SECRET_NAME.search(name) else value) for name, value in pairs]
    return f"{base}?{urlencode(scrubbed, safe='[]/:')}"


def _access_line(self, protocol: str, action: str, details: dict) -> None:
    """daphne's ``AccessLogGenerator.__call__``: the same entries, logged, the path scrubbed."""
    verb = {
        ("http", "complete"): details.get("method"),
        ("websocket", "connecting"): "WSCONNECTING",
        ("websocket", "rejected"): "WSREJECT",
        ("websocket", "connected"): "WSCONNECT",
        ("websocket", "disconnected"): "WSDISCONNECT",
    }.get((protocol, action))
    if verb is None:
        return
    access_logger.info(
        '%s "%s %s" %s %s',
        details.get("client") or "-",
        verb,
        url_scrubbed(details.get("path", "")),
        details.get("status") or "-",
        details.get("size") or "-",
    )


def daphne_access_log_install() -> None:
    """Route daphne's access log (on unless ``-v 0``) through logging; the server builds it after loading us."""
    from daphne.access import AccessLogGenerator

    AccessLogGenerator.__call__ = _access_line


def _excepthook(exc_type, exc, tb) -> None:
    _uncaught.critical("uncaught exception", exc_info=(exc_type, exc, tb))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    _uncaught.error(
        "uncaught exception in thread %s",
        getattr(args.thread, "name", "?"),
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def logging_configure(config: dict) -> None:
    """Django's ``LOGGING_CONFIG``: ``dictConfig`` (whose root entry replaces daphne's handler), and the hooks."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
