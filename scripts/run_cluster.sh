#!/usr/bin/env bash
# Two reviewqueue servers (daphne processes) on two ports and two task workers
# (`manage.py db_worker`), sharing one PostgreSQL database and one Redis: the smallest
# "several servers" deployment, to try it out.
#
#   DEBUG=true DATABASE_URL=postgres://postgres@127.0.0.1:5432/reviewqueue \
#   REDIS_URL=redis://127.0.0.1:6379/0 \
#   scripts/run_cluster.sh            # or: make run-cluster (which sets DEBUG=true)
#
# Then open http://127.0.0.1:8001/ as alice and http://127.0.0.1:8002/ as bob and
# decide the same item. Ctrl-C stops the servers and the workers.
#
# Environment: DATABASE_URL and REDIS_URL (required), HOST (127.0.0.1), PORT1 (8001),
# PORT2 (8002), PY (.venv/bin/python), WORKER_INTERVAL (0.1 s, an idle worker's polling
# interval), DEBUG (off unless set; true: development mode, demo users and items are added),
# METRICS_WORKER_PORT (unset: off; N: worker n serves its Prometheus series on N+n-1, README "Metrics"),
# and everything reviewqueue/settings.py reads (SECRET_KEY, ALLOWED_HOSTS, ...).
# The database is created if it does not exist yet and the server may create it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
HOST=${HOST:-127.0.0.1}
PORT1=${PORT1:-8001}
PORT2=${PORT2:-8002}
WORKER_INTERVAL=${WORKER_INTERVAL:-0.1}
export DEBUG=${DEBUG:-false}

die() { echo "run_cluster: $*" >&2; exit 2; }

[ -x "$PY" ] || die "no Python at $PY (run 'make install' first, or set PY)"
case "${DATABASE_URL:-}" in
  postgres://*|postgresql://*) ;;
  *) die "set DATABASE_URL=postgres://user:password@host:5432/dbname (several servers need one shared PostgreSQL)" ;;
esac
case "${REDIS_URL:-}" in
  redis://*|rediss://*) ;;
  *) die "set REDIS_URL=redis://host:6379/0 (the channel layer every server shares)" ;;
esac
[ "$PORT1" != "$PORT2" ] || die "PORT1 and PORT2 must differ"
# daphne only logs "Listen failure" on a taken port and keeps running: refuse up front.
"$PY" scripts/port_check.py "$HOST" "$PORT1" "$PORT2" || exit 2
export DATABASE_URL REDIS_URL

# Create the database when it is missing (connects to the server's "postgres" database to do it).
"$PY" - <<'EOF'
import os, sys, urllib.parse
import psycopg
from psycopg import sql

url = os.environ["DATABASE_URL"]
try:
    psycopg.connect(url, connect_timeout=5).close()
except psycopg.OperationalError as exc:
    if "does not exist" not in str(exc):
        sys.exit(f"run_cluster: cannot reach PostgreSQL: {str(exc).strip()}")
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    admin = urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    print(f"run_cluster: created database {name}")
EOF
"$PY" -c "
import os, socket, sys, urllib.parse
u = urllib.parse.urlsplit(os.environ['REDIS_URL'])
try:
    socket.create_connection((u.hostname or '127.0.0.1', u.port or 6379), timeout=5).close()
except OSError as exc:
    sys.exit(f'run_cluster: cannot reach Redis at {u.hostname}:{u.port or 6379}: {exc}')
"

# Once, before any server starts: schema + checkpointer tables (PostgresSaver.setup() runs
# in a migration), demo data in development, reconcile anything a crash left behind.
"$PY" manage.py migrate --no-input
if [ "$DEBUG" = "true" ]; then "$PY" manage.py seed_demo; fi
# Exit status 2: some items could not be repaired; they are marked needs attention and
# the servers start anyway (nothing one item contains may keep the site down).
"$PY" manage.py recover || [ $? -eq 2 ]
"$PY" manage.py collectstatic --no-input --verbosity 0

source scripts/processes.sh

for port in "$PORT1" "$PORT2"; do
  "$PY" -m daphne --proxy-headers -b "$HOST" -p "$port" reviewqueue.asgi:application > >(sed -u "s/^/[:$port] /") 2>&1 &
  pids+=("$!")
done
# Two workers share the database's task queue (each task is claimed by one of them).
for n in 1 2; do
  "$PY" manage.py db_worker --no-reload --interval "$WORKER_INTERVAL" --worker-id "$(hostname)-$n-$$" \
    --metrics-port "$(( ${METRICS_WORKER_PORT:-0} ? ${METRICS_WORKER_PORT:-0} + n - 1 : 0 ))" \
    > >(sed -u "s/^/[worker$n] /") 2>&1 &
  pids+=("$!")
done

# Ready when both answer /healthz with 200 (database, checkpointer and channel layer all ok).
"$PY" - "$HOST" "$PORT1" "$PORT2" <<'EOF'
import json, sys, time, urllib.error, urllib.request

host, ports = sys.argv[1], sys.argv[2:]
deadline = time.monotonic() + 60
for port in ports:
    url = f"http://{host}:{port}/healthz"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                checks = json.load(response)["checks"]
                break
        except urllib.error.HTTPError as error:
            problem = f"{error.code} {error.read()[:300]!r}"
        except OSError as error:
            problem = str(error)
        if time.monotonic() > deadline:
            sys.exit(f"run_cluster: {url} not healthy within 60 s: {problem}")
        time.sleep(0.3)
    summary = ", ".join(f"{name} ok" for name in checks)
    print(f"run_cluster: http://{host}:{port}/ healthy ({summary})")
EOF

echo ""
echo "  two reviewqueue servers share one database and one channel layer:"
echo "    http://$HOST:$PORT1/   http://$HOST:$PORT2/"
if [ "$DEBUG" = "true" ]; then
  echo "  log in as alice, bob or carol (moderators) or dave (view only); password: $("$PY" -c 'import os; os.environ.setdefault("DJANGO_SETTINGS_MODULE","reviewqueue.settings"); import django; django.setup(); from django.conf import settings; print(settings.DEMO_PASSWORD)')"
fi
echo "  two task workers deliver events; Ctrl-C stops everything."
echo ""

# When any server or worker exits, stop the others too.
set +e
wait -n "${pids[@]}"
status=$?
echo "run_cluster: a server or worker exited ($status); stopping the others" >&2
exit "$status"
