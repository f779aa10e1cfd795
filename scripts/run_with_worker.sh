#!/usr/bin/env bash
# One daphne server and one task worker (`manage.py db_worker`) on the same database;
# Ctrl-C, or either process exiting, stops both. Used by `make run`.
#
# Environment: PY (.venv/bin/python), HOST (127.0.0.1), PORT (8000), WORKER_INTERVAL
# (0.1: seconds an idle worker waits before looking for tasks again), and everything
# reviewqueue/settings.py reads. DEBUG is off unless set (then SECRET_KEY and AUDIT_KEY must
# be): `make run` sets DEBUG=true.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
WORKER_INTERVAL=${WORKER_INTERVAL:-0.1}

source scripts/processes.sh

# Plain lines are marked as the worker's; JSON lines stay JSON (each carries its process id).
prefix="[worker] "
[ "${LOG_FORMAT:-plain}" = json ] && prefix=""
"$PY" manage.py db_worker --no-reload --interval "$WORKER_INTERVAL" > >(sed -u "s/^/$prefix/") 2>&1 &
pids+=("$!")
"$PY" -m daphne -b "$HOST" -p "$PORT" reviewqueue.asgi:application &
pids+=("$!")

set +e
wait -n "${pids[@]}"
status=$?
echo "run_with_worker: a process exited ($status); stopping the other" >&2
exit "$status"
