"""Refuse to start a server on a port that something else already holds.

daphne only logs "Listen failure" when its port is taken and keeps running, so
`make run` would seem to work while serving nothing. `make run` and run_cluster.sh
call this first:

    python scripts/port_check.py HOST PORT [PORT ...]

Exit 0 when every port can be bound on HOST; otherwise exit 1 naming the first taken one.
"""

from __future__ import annotations

import socket
import sys


def port_taken(*, host: str, port: int) -> str | None:
    """Why ``port`` on ``host`` cannot be listened on, or None when it can."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        # As daphne binds: a port left in TIME_WAIT by a server that just stopped is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    host, ports = argv[0], argv[1:]
    for port in ports:
        problem = port_taken(host=host, port=int(port))
        if problem is not None:
            print(
                f"cannot serve on {host}:{port}: {problem}. Another server (an earlier `make run`?) "
                f"holds it: stop it, or choose another port (make run PORT=..., run_cluster.sh PORT1=... PORT2=...).",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
