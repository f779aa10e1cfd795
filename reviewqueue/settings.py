"""Settings for reviewqueue.

Everything an operator changes comes from the environment; the defaults are a safe
single-machine development set-up (SQLite under var/, in-memory channel layer).
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

# Every variable is read through env, one way (reviewqueue.environment); each is listed in
# docs/operators/configuration.md (moderation/tests/test_settings.py checks both).
from reviewqueue.environment import env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env.str("REVIEWQUEUE_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-do-not-deploy"
# Off unless asked for (`make run` and the test suite ask): a deployment that forgets a
# variable gets no debug pages, and refuses to start without keys of its own.
DEBUG = env.bool("DEBUG", False)
SECRET_KEY = env.str("SECRET_KEY", DEVELOPMENT_SECRET_KEY if DEBUG else "")
if not DEBUG and SECRET_KEY in {"", DEVELOPMENT_SECRET_KEY}:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set in the environment when DEBUG is off (and DEBUG is off unless set to true): "
        "set SECRET_KEY (and AUDIT_KEY) to long random values, or DEBUG=true for development, as `make run` does"
    )

# The audit log's HMAC key (moderation.records.audit). It must not live in the database the log
# is in: whoever holds both can rewrite history. Retired keys stay in AUDIT_KEYS
# (comma-separated) so entries signed with them still verify after a rotation.
DEVELOPMENT_AUDIT_KEY = "dev-only-insecure-audit-key-do-not-deploy"
AUDIT_KEY = env.str("AUDIT_KEY", DEVELOPMENT_AUDIT_KEY if DEBUG else "")
if not DEBUG and AUDIT_KEY in {"", DEVELOPMENT_AUDIT_KEY}:
    raise ImproperlyConfigured("AUDIT_KEY must be set in the environment when DEBUG is off")
if AUDIT_KEY == SECRET_KEY and not DEBUG:
    raise ImproperlyConfigured("AUDIT_KEY must differ from SECRET_KEY")
AUDIT_KEYS = [k.strip() for k in env.str("AUDIT_KEYS", "").split(",") if k.strip()]

ALLOWED_HOSTS = [h.strip() for h in env.str("ALLOWED_HOSTS", "127.0.0.1,localhost" if DEBUG else "").split(",") if h.strip()]
if not DEBUG:
    # Production: HTTPS only, behind a proxy that sets X-Forwarded-Proto (see README).
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", True)
    # Load balancers (/healthz) and monitors (/readyz) probe each process directly, over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # Off only to try production settings on plain HTTP locally (README): a browser does
    # not send a Secure cookie over http, so neither logging in nor CSRF would work.
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
X_FRAME_OPTIONS = "DENY"

CSRF_TRUSTED_ORIGINS = [o.strip() for o in env.str("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# The API answers JSON even when the CSRF check refuses a request.
CSRF_FAILURE_VIEW = "moderation.web.views.csrf_failure"

# --- Browser policy -------------------------------------------------------------
# Pages load only our own scripts, styles and images: no inline script or style, no
# eval, no framing. 'self' in connect-src covers the same-origin ws:// and wss:// sockets.
from csp.constants import NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [NONE],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "connect-src": [SELF],
        "font-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [NONE],
    }
}
# Nothing here uses a camera, microphone, location, payment or similar browser feature.
PERMISSIONS_POLICY = {
    feature: []
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "encrypted-media",
        "fullscreen",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "xr-spatial-tracking",
    )
}

INSTALLED_APPS = [
    "daphne",
    # Without autodiscovery: reviewqueue.urls loads the admin modules, so a process that serves no
    # pages (moderator_add, team, ...) does not import them, nor LangGraph through them.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    # Only for its bundled Swagger UI files: with it installed, /api/v1/docs serves them
    # from our static files instead of a CDN the CSP (and an offline machine) refuses.
    "ninja",
    # Before django_tasks_db: moderation's db_worker (the package's, plus the delivery sweep) wins.
    "moderation",
    "django_tasks",
    "django_tasks_db",
]

MIDDLEWARE = [
    # First: every line logged while serving a request carries its id (moderation.core.requestid).
    "moderation.core.requestid.RequestIdMiddleware",
    # Outside the others: a request that found no free database connection answers 503 with
    # Retry-After, wherever it met the pool's timeout (moderation.core.overload).
    "moderation.core.overload.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "moderation.web.middleware.PrivateCacheMiddleware",
    # Last, as axes asks: it turns a locked-out login into the lock-out page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "reviewqueue.urls"
ASGI_APPLICATION = "reviewqueue.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "moderation.web.context.worker_banner",
                "moderation.web.context.base_context",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
# SQLite: IMMEDIATE transactions take the write lock at BEGIN, so two processes
# deciding the same item queue up cleanly instead of one failing with "database is
# locked" on its first write (Django ignores select_for_update on SQLite). WAL lets
# readers (the queue page) proceed while a decision is being written.
_SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": env.float("SQLITE_BUSY_TIMEOUT", 5.0),
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
DATABASE_URL = env.str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'reviewqueue.sqlite3'}")
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["OPTIONS"] = {**_SQLITE_OPTIONS, **_db.get("OPTIONS", {})}
    # Concurrency tests need a real file shared by threads and processes; one per test
    # run (pid), so two runs on one machine never share or delete each other's files.
    _db["TEST"] = {"NAME": str(VAR_DIR / "test" / f"db-{os.getpid()}.sqlite3")}
    (VAR_DIR / "test").mkdir(exist_ok=True)
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Under ASGI every request runs in a thread of its own, so persistent connections
    # (CONN_MAX_AGE) are never reused; a pool is what saves a connection per request.
    _db.setdefault("OPTIONS", {})
    if env.bool("DB_POOL", True):
        _db["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env.int("DB_POOL_SIZE", 20),
            "timeout": env.float("DB_POOL_TIMEOUT", 10.0),
        }
        # The pool checks a connection as it hands it out (an empty query): one the database ended while
        # idle (a terminated backend, a failover) is replaced, not handed to a request that would fail on it;
        # then the pool's other idle ones at once (moderation.core.dbpool, installed by moderation.apps).
        _db["CONN_HEALTH_CHECKS"] = True
    _db["TEST"] = {"NAME": f"test_reviewqueue_{os.getpid()}"}
else:
    raise ImproperlyConfigured(f"DATABASE_URL must be sqlite:// or postgres://, not {DATABASE_URL!r}")
# The connections that keep state in their session (the checkpointer's pool, whose resume locks are
# session-level advisory locks; a worker's LISTEN) use SESSION_DATABASE_URL: PostgreSQL itself or a
# session-mode PgBouncer pool, while DATABASE_URL may then name a transaction-mode one (Django's
# connections keep nothing past a transaction; its server-side cursors would, so they are off).
SESSION_DATABASE_URL = env.str("SESSION_DATABASE_URL", "")
if SESSION_DATABASE_URL:
    if _db["ENGINE"] != "django.db.backends.postgresql" or not SESSION_DATABASE_URL.startswith(("postgres://", "postgresql://")):
        raise ImproperlyConfigured("SESSION_DATABASE_URL is for PostgreSQL: a postgres:// URL beside a postgres:// DATABASE_URL")
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
DATABASES = {"default": _db}
# The PostgresSaver's connection pool per process (moderation.core.checkpointer); unused on SQLite.
CHECKPOINT_POOL_SIZE = env.int("CHECKPOINT_POOL_SIZE", 10)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels -----------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Redis pub/sub ignores the database number: sites (or test runs) sharing one
            # Redis must each have their own prefix or they hear each other's events.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 60}],
                "prefix": env.str("CHANNEL_LAYER_PREFIX", "reviewqueue"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}
# With the in-memory layer, the events of other processes (the task worker, manage.py
# commands) reach the server's sockets through the database (moderation.records.relay).
# The in-process test suite, where one process plays every part, turns it off.
LIVE_RELAY = not REDIS_URL

# Shared by every server process when Redis is configured (rate limits).
CACHES = {
    "default": {
        **(
            {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": REDIS_URL,
                # A Redis that stops answering must not hang decisions on the rate-limit check
                # (a healthy one answers in about a millisecond).
                "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
            }
            if REDIS_URL
            else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
        ),
        # Sites sharing one Redis must not count into each other's rate-limit windows.
        "KEY_PREFIX": env.str("CACHE_KEY_PREFIX", env.str("CHANNEL_LAYER_PREFIX", "reviewqueue")),
    }
}

# --- Auth ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # Checks the lock-out before the password, so a locked-out guess is never even tried.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed logins are counted in the database, which every server shares. A client address
# (see README: the proxy overwrites X-Forwarded-For, daphne --proxy-headers reads it) is
# locked after LOGIN_FAILURE_LIMIT failures on any accounts, and an account after that
# many failures from any addresses, for LOGIN_COOLOFF seconds; staff unlock in the admin
# (Access attempts) or with `manage.py axes_reset_username` / `axes_reset_ip`.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("LOGIN_COOLOFF", 900))
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# REMOTE_ADDR only, even should django-ipware get installed: a header the client can
# write must never pick the address that is locked.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "moderation:queue"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Under var/ so a fresh checkout has it before `collectstatic` (WhiteNoise warns otherwise).
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)

# --- reviewqueue ----------------------------------------------------------------
# How long a reviewer may wait for another reviewer's decision on the same item
# before being told "busy, try again" (seconds).
DECISION_LOCK_TIMEOUT = env.float("DECISION_LOCK_TIMEOUT", 5.0)
DECISION_NOTE_MAX_LENGTH = 2000
# A reject must name one of the admin's reason codes (moderation.records.reasons).
REJECT_REASON_REQUIRED = env.bool("REJECT_REASON_REQUIRED", True)
# Per graph, over REJECT_REASON_REQUIRED: an agent's asks (the "ask" graph) are not content,
# so the content-moderation codes are optional there and a reject's note reaches it as written.
REJECT_REASON_REQUIRED_BY_GRAPH = {"ask": False}
# Rows per page of the Decided page (moderation.records.timeline).
DECIDED_PAGE_SIZE = 50
# Longest item body accepted (characters); longer ones are refused before any processing.
ITEM_BODY_MAX_LENGTH = env.int("ITEM_BODY_MAX_LENGTH", 200000)
# Decision requests per reviewer per window (0 turns the limit off, e.g. for benchmarks).
DECISION_RATE_LIMIT = env.int("DECISION_RATE_LIMIT", 30)
DECISION_RATE_WINDOW = env.int("DECISION_RATE_WINDOW", 10)
QUEUE_PAGE_SIZE = 25
# Most items one bulk decision may name (moderation.review.bulk); a larger selection decides nothing.
BULK_MAX_ITEMS = env.int("BULK_MAX_ITEMS", 100)
# --- Claims (moderation.records.claims) -------------------------------------------------
# Opening an item claims it for this long (seconds); activity on its page renews it.
CLAIM_SECONDS = env.int("CLAIM_SECONDS", 300)
# Off: nobody claims anything and "next item" takes the first pending item (for comparison).
CLAIMS_ENABLED = env.bool("CLAIMS_ENABLED", True)
# On: deciding an item someone else holds a live claim on is refused (409 "claimed").
CLAIMS_REQUIRED = env.bool("CLAIMS_REQUIRED", False)
# After a decision the moderator lands on the next unclaimed pending item.
NEXT_ITEM_AFTER_DECISION = env.bool("NEXT_ITEM_AFTER_DECISION", True)
# The largest request body accepted (bytes). reviewqueue.bodylimit refuses a larger one
# with 413 before Django reads it; Django's own check says the same for the parsed body.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("REQUEST_BODY_MAX_BYTES", 1024 * 1024)
# /healthz runs its checks at once and waits at most this long for all of them (seconds).
HEALTH_CHECK_TIMEOUT = env.float("HEALTH_CHECK_TIMEOUT", 2.0)
# Inbound frames per live socket: a token bucket refilled at LIVE_FRAME_RATE per second up to
# LIVE_FRAME_BURST (a page sends one heartbeat per 15 s); 0 turns the limit off.
LIVE_FRAME_RATE = env.float("LIVE_FRAME_RATE", 1.0)
LIVE_FRAME_BURST = env.int("LIVE_FRAME_BURST", 10)
# Open live sockets per login session, counted in the cache (shared through Redis); 0 = no cap.
LIVE_SOCKETS_PER_SESSION = env.int("LIVE_SOCKETS_PER_SESSION", 20)
# A page heartbeats at least every LIVE_HEARTBEAT_SECONDS (its state frames tell it so). A socket
# that sends no heartbeat for LIVE_SILENT_SECONDS is closed by the server (4408), and its place
# under LIVE_SOCKETS_PER_SESSION and its presence go with it: the cap counts live sockets.
LIVE_HEARTBEAT_SECONDS = env.float("LIVE_HEARTBEAT_SECONDS", 15.0)
LIVE_SILENT_SECONDS = env.float("LIVE_SILENT_SECONDS", 40.0)
if LIVE_SILENT_SECONDS <= LIVE_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("LIVE_SILENT_SECONDS must be longer than LIVE_HEARTBEAT_SECONDS")
# A live socket re-reads its user's rights at least this often (seconds), even if its page
# sends nothing; changes made through the ORM reach it at once (moderation.live.rights).
LIVE_RIGHTS_RECHECK_SECONDS = env.float("LIVE_RIGHTS_RECHECK_SECONDS", 10.0)
# A queue page heartbeats this often (seconds) and refreshes when the counts its state
# frame carries differ from the page's: a catch-up for events lost on the way (layers
# deliver at most once). Counts are O(1) counter rows, so each resync costs a few small queries.
LIVE_QUEUE_RESYNC_SECONDS = env.float("LIVE_QUEUE_RESYNC_SECONDS", 15.0)
# Long-poll waits (GET /api/v1/items/<id>/decision?wait=) open at once in one server process,
# per API client and in all (moderation.live.waits); past either a wait is refused at once,
# 429 or 503 with Retry-After. A sleeping wait holds no database connection. 0 = no cap.
LONGPOLL_WAITS_PER_CLIENT = env.int("LONGPOLL_WAITS_PER_CLIENT", 20)
LONGPOLL_WAITS_PER_PROCESS = env.int("LONGPOLL_WAITS_PER_PROCESS", 200)
# Bulkheads (moderation.core.bulkhead): outside requests (the service API, deployment webhooks) running at
# once in one server process, per class; past a cap a request waits up to BULKHEAD_WAIT seconds holding no
# thread or connection, then answers 503 busy. Each holds at most one pooled connection, so moderators keep
# DB_POOL_SIZE minus both caps. An outside request starts (and a batch takes its next item) once no
# moderator's request runs in the process, waiting at most BULKHEAD_YIELD seconds. 0 = no cap / no yield
# (a pool under 5 connections, a test's, has no cap by default).
_pool = _db.get("OPTIONS", {}).get("pool")
_pool_size = _pool["max_size"] if isinstance(_pool, dict) else 0
BULKHEAD_API = env.int("BULKHEAD_API", _pool_size // 5 if _pool_size else 4)
# A webhook is a few queries: one at a time per process answers a fleet's 30+/s (bench 26), and four at
# once slowed the moderators' pages more (1.7-2x at p99 against 1.1-1.7x).
BULKHEAD_WEBHOOKS = env.int("BULKHEAD_WEBHOOKS", 1 if _pool_size >= 5 or not _pool_size else 0)
if _pool_size and BULKHEAD_API and BULKHEAD_WEBHOOKS and _pool_size <= BULKHEAD_API + BULKHEAD_WEBHOOKS:
    raise ImproperlyConfigured(
        f"BULKHEAD_API + BULKHEAD_WEBHOOKS ({BULKHEAD_API} + {BULKHEAD_WEBHOOKS}) must leave some of "
        f"DB_POOL_SIZE ({_pool_size}) to moderators' pages and decisions"
    )
BULKHEAD_WAIT = env.float("BULKHEAD_WAIT", 10.0)
BULKHEAD_YIELD = env.float("BULKHEAD_YIELD", 0.1)
# Which routes this server process serves (moderation.core.bulkhead): all of them, only the outside's (the service
# API, long-polls and deployment webhooks: /api/v1/), or only the moderators' (pages, decisions, websockets). A process
# asked for the other class answers 421 misdirected, so a proxy routing by path wrongly shows at once; health, readiness
# and metrics are served by every process.
SERVE_ROUTES = env.choice("SERVE_ROUTES", "all", ("all", "outside", "moderators"))
# --- Webhooks (moderation.delivery) ---------------------------------------------
# Deliveries are tasks in the database (django-tasks-db), run by `manage.py db_worker`.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default", "apply", "start", "deployments"]}}

# --- Graphs ---------------------------------------------------------------------
# The graphs an item may run: name -> "module:callable(checkpointer) -> compiled graph".
# Each is imported at start-up; REVIEWQUEUE_EXTRA_GRAPHS ("name=module:callable,...")
# adds more without editing this file.
REVIEWQUEUE_GRAPHS = {
    "moderation": "moderation.graphs.builtin:build",
    # Asks submitted over /api/v1 by agents running elsewhere (POST /api/v1/items with "ask").
    "ask": "moderation.graphs.passthrough:build",
    # The example LangChain agent (examples/refund_agent): runs with no API key.
    "refund_agent": "examples.refund_agent.agent:build",
}
for _entry in filter(None, env.str("REVIEWQUEUE_EXTRA_GRAPHS", "").split(",")):
    _name, _, _path = _entry.partition("=")
    REVIEWQUEUE_GRAPHS[_name.strip()] = _path.strip()
# A decision is applied (its graph resumed) by the task worker, never in the request, and
# so are the starts of queued submissions (moderation.review.starts).
# REVIEWQUEUE_APPLY_INLINE=1 does both in the deciding (or accepting) process right after
# the commit instead: for the in-process test suite and single-process tools that run no worker.
REVIEWQUEUE_APPLY_INLINE = env.bool("REVIEWQUEUE_APPLY_INLINE", False)
# How long a worker waits for another to finish resuming the same thread.
APPLY_LOCK_TIMEOUT = env.float("APPLY_LOCK_TIMEOUT", 300.0)
# Each worker runs this many apply lanes (threads that take graph resumes after decisions only):
# a resume mostly waits on the database, so lanes overlap those waits; the resume lock keeps
# each thread's resumes one at a time (moderation.review.apply). By default 4 on PostgreSQL
# (woken by NOTIFY: docs/contributors/worker-throughput.md) and 0 on SQLite, which writes one
# transaction at a time and has no notifications: lanes there would only poll and queue on its lock.
APPLY_LANES = env.int("APPLY_LANES", 4 if _db["ENGINE"] == "django.db.backends.postgresql" else 0)
# A decision still unapplied (or a queued item still not started) this long after it was
# made is queued again by the sweep.
APPLY_SWEEP_GRACE = env.float("APPLY_SWEEP_GRACE", 30.0)
# LangGraph deployments (moderation.review.deployments): a resume their server could not take is
# tried again after REMOTE_RETRY_BASE seconds, doubling up to REMOTE_RETRY_MAX (with jitter); every
# worker sweeps their interrupted threads every LANGGRAPH_SWEEP_INTERVAL seconds, for what no webhook told.
REMOTE_RETRY_BASE = env.float("REMOTE_RETRY_BASE", 2.0)
REMOTE_RETRY_MAX = env.float("REMOTE_RETRY_MAX", 300.0)
LANGGRAPH_SWEEP_INTERVAL = env.float("LANGGRAPH_SWEEP_INTERVAL", 30.0)
# An edit's arguments, as JSON.
DECISION_ARGS_MAX_LENGTH = env.int("DECISION_ARGS_MAX_LENGTH", 16000)
# One webhook attempt's whole time (seconds): resolving, connecting, sending and reading
# the answer together; a slow receiver holds a worker's lane at most this long.
WEBHOOK_TIMEOUT = env.float("WEBHOOK_TIMEOUT", 10.0)
# Webhooks go to public (global unicast) addresses only; these comma-separated addresses or
# CIDR networks may be reached too, for internal receivers (moderation.delivery.targets).
from ipaddress import ip_network  # noqa: E402

try:
    WEBHOOK_ALLOWED_NETWORKS = [
        ip_network(entry.strip(), strict=False) for entry in env.str("WEBHOOK_ALLOWED_NETWORKS", "").split(",") if entry.strip()
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"WEBHOOK_ALLOWED_NETWORKS: {exc}") from None
# LangGraph deployments are reached at public addresses only too; these networks may be reached
# as well, for a deployment inside the installation's network (moderation.graphs.remote).
try:
    DEPLOYMENT_ALLOWED_NETWORKS = [
        ip_network(entry.strip(), strict=False)
        for entry in env.str("DEPLOYMENT_ALLOWED_NETWORKS", "").split(",")
        if entry.strip()
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"DEPLOYMENT_ALLOWED_NETWORKS: {exc}") from None
# Each worker runs this many delivery lanes (threads that take webhook deliveries only); one
# endpoint has at most half of them (at least one) in flight, so a hung receiver leaves the
# other half to everyone else (moderation.delivery.sending).
WEBHOOK_LANES = env.int("WEBHOOK_LANES", 4)
# Retries: exponential backoff from WEBHOOK_RETRY_BASE seconds, capped at WEBHOOK_RETRY_MAX,
# with jitter; after WEBHOOK_RETRY_FOR seconds without a 2xx the delivery is marked failed.
WEBHOOK_RETRY_BASE = env.float("WEBHOOK_RETRY_BASE", 5.0)
WEBHOOK_RETRY_MAX = env.float("WEBHOOK_RETRY_MAX", 3600.0)
WEBHOOK_RETRY_FOR = env.float("WEBHOOK_RETRY_FOR", 24 * 3600.0)
# Each worker re-queues deliveries whose attempt was lost (a worker killed mid-delivery)
# every WEBHOOK_SWEEP_INTERVAL seconds, once their lease is WEBHOOK_LEASE_GRACE seconds overdue.
WEBHOOK_SWEEP_INTERVAL = env.float("WEBHOOK_SWEEP_INTERVAL", 5.0)
# How often every worker looks for asks past their deadline (moderation.review.deadlines): a
# deadline fires at most this late. One indexed query on (status, deadline_at).
DEADLINE_SWEEP_INTERVAL = env.float("DEADLINE_SWEEP_INTERVAL", 1.0)
WEBHOOK_LEASE_GRACE = env.float("WEBHOOK_LEASE_GRACE", 30.0)
# Is anything applying the decisions (moderation.records.workers)? Every worker writes a heartbeat every
# WORKER_HEARTBEAT_INTERVAL seconds; one not heard from in WORKER_HEARTBEAT_GRACE seconds is presumed
# gone. /readyz answers 503 with no worker alive, or with a decision unapplied for longer than
# READY_UNAPPLIED_MAX seconds; an item page whose decision waited APPLY_WAIT_NOTICE seconds says so,
# and staff see a banner.
WORKER_HEARTBEAT_INTERVAL = env.float("WORKER_HEARTBEAT_INTERVAL", 5.0)
WORKER_HEARTBEAT_GRACE = env.float("WORKER_HEARTBEAT_GRACE", 30.0)
READY_UNAPPLIED_MAX = env.float("READY_UNAPPLIED_MAX", 120.0)
APPLY_WAIT_NOTICE = env.float("APPLY_WAIT_NOTICE", 60.0)
# On PostgreSQL an idle worker's loops sleep until a task is queued (NOTIFY), or until the next
# delayed task (a retry's run_after) is due, and poll only every WORKER_IDLE_POLL seconds in case a
# notification was lost. On SQLite (no notifications) they poll every db_worker --interval.
WORKER_IDLE_POLL = env.float("WORKER_IDLE_POLL", 10.0)
# The race lab, the fault injection and the soak's judge (moderation.lab): an app for development,
# the tests and the demo, installed with DEBUG on; with DEBUG off only when an operator asks for it.
REVIEWQUEUE_LAB = env.bool("REVIEWQUEUE_LAB", DEBUG)
if REVIEWQUEUE_LAB:
    INSTALLED_APPS.append("moderation.lab")
# Fault injection for crash tests of a real process (moderation.lab.faults): it can SIGKILL the process.
REVIEWQUEUE_FAULTS = env.str("REVIEWQUEUE_FAULTS", "")
if REVIEWQUEUE_FAULTS and not REVIEWQUEUE_LAB:
    raise ImproperlyConfigured(
        "REVIEWQUEUE_FAULTS is set but the lab is off (it is off when DEBUG is off): unset REVIEWQUEUE_FAULTS, "
        "or set REVIEWQUEUE_LAB=true to ask for the lab and its fault injection in this process"
    )
# Demo moderators exist only in development; the password is printed by `make run`.
DEMO_PASSWORD = "review-demo-2026"

# /metrics (moderation.records.metrics): open to loopback callers; anyone else sends
# "Authorization: Bearer $METRICS_TOKEN" (unset: loopback only). A task worker serves its own
# series on METRICS_WORKER_ADDR at the first free port of METRICS_WORKER_PORT ..
# METRICS_WORKER_PORT + METRICS_WORKER_PORTS - 1 (unset: not served), so several workers of one
# host share one environment file.
METRICS_TOKEN = env.str("METRICS_TOKEN", "")
METRICS_WORKER_ADDR = env.str("METRICS_WORKER_ADDR", "127.0.0.1")
METRICS_WORKER_PORT = env.int("METRICS_WORKER_PORT", 0)
METRICS_WORKER_PORTS = env.int("METRICS_WORKER_PORTS", 8)

# Also replaces daphne's root handler, so every line a process logs is written by ours, and logs
# uncaught exceptions as one record each (reviewqueue.serverlog).
LOGGING_CONFIG = "reviewqueue.serverlog.logging_configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # LOG_FORMAT=json: one JSON object per line, fields in moderation.core.requestid and the README.
        "json": {"()": "moderation.core.requestid.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": env.choice("LOG_FORMAT", "plain", ("plain", "json")),
        }
    },
    "filters": {
        "no_conflicts": {"()": "moderation.web.requestlog.ConflictFilter"},
        "request_id": {"()": "moderation.core.requestid.RequestIdFilter"},
    },
    # The root's level is left as it is: INFO under daphne (its command line sets it), WARNING elsewhere.
    "root": {"handlers": ["console"]},
    "loggers": {
        "moderation": {"handlers": ["console"], "level": env.str("LOG_LEVEL", "INFO"), "propagate": False},
        # Django's own console handler (development only) would write their lines a second time, as plain text.
        "django": {"handlers": [], "level": "INFO"},
        "py.warnings": {"handlers": []},  # captured by reviewqueue.serverlog
        "django.request": {"filters": ["no_conflicts"]},
    },
}
