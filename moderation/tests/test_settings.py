"""Production mode: `check --deploy` is clean and the development keys are refused."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

from e2e.children import children_adopt
from e2e.forked import forked_run

BASE_DIR = Path(__file__).resolve().parents[2]


def _manage(*args, **env):
    """``manage.py`` under ``env``, forked from the fork server (``e2e.forked``): the settings are read
    after the fork, from the environment given, as in a fresh interpreter."""
    full_env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "AUDIT_KEY", "DEBUG", "ALLOWED_HOSTS"}}
    full_env.update(env)
    return forked_run(["manage.py", *args], env=full_env, cwd=BASE_DIR, timeout=120)


def test_check_deploy_reports_nothing_in_production_mode():
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(64),
        AUDIT_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="reviews.example.org",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_debug_is_off_unless_asked_for_so_forgetting_both_variables_does_not_start():
    """DEBUG and SECRET_KEY both unset: no debug pages with the public development key, but a clear refusal."""
    result = _manage("check")
    assert result.returncode != 0
    assert "SECRET_KEY must be set in the environment when DEBUG is off (and DEBUG is off unless set to true)" in result.stderr
    assert "or DEBUG=true for development" in result.stderr, result.stderr
    # Keys of its own and DEBUG still unset: production mode.
    result = _manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings; print(settings.DEBUG)",
        SECRET_KEY=secrets.token_urlsafe(64),
        AUDIT_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="reviews.example.org",
    )
    assert result.returncode == 0 and result.stdout.split() == ["False"], result.stdout + result.stderr


def test_production_refuses_the_development_key_and_a_missing_key():
    for key in ("dev-only-insecure-key-do-not-deploy", None):
        env = {"DEBUG": "false", "ALLOWED_HOSTS": "reviews.example.org", "AUDIT_KEY": secrets.token_urlsafe(64)}
        if key:
            env["SECRET_KEY"] = key
        result = _manage("check", **env)
        assert result.returncode != 0
        assert "SECRET_KEY must be set in the environment when DEBUG is off" in result.stderr


def test_production_refuses_the_development_audit_key_a_missing_one_and_the_secret_key():
    secret = secrets.token_urlsafe(64)
    for key, error in (
        ("dev-only-insecure-audit-key-do-not-deploy", "AUDIT_KEY must be set in the environment when DEBUG is off"),
        (None, "AUDIT_KEY must be set in the environment when DEBUG is off"),
        (secret, "AUDIT_KEY must differ from SECRET_KEY"),
    ):
        env = {"DEBUG": "false", "ALLOWED_HOSTS": "reviews.example.org", "SECRET_KEY": secret}
        if key:
            env["AUDIT_KEY"] = key
        result = _manage("check", **env)
        assert result.returncode != 0
        assert error in result.stderr


def test_bad_boolean_is_a_clear_error():
    result = _manage("check", DEBUG="maybe")
    assert result.returncode != 0 and "DEBUG must be true or false, not 'maybe'" in result.stderr


def test_a_silence_no_longer_than_a_heartbeat_is_a_clear_error():
    result = _manage("check", DEBUG="true", LIVE_HEARTBEAT_SECONDS="15", LIVE_SILENT_SECONDS="15")
    assert result.returncode != 0
    assert "LIVE_SILENT_SECONDS must be longer than LIVE_HEARTBEAT_SECONDS" in result.stderr, result.stderr


def test_seed_demo_refuses_to_run_in_production():
    result = _manage(
        "seed_demo",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(64),
        AUDIT_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="reviews.example.org",
        DATABASE_URL="sqlite:////tmp/reviewqueue-never-created.sqlite3",
    )
    assert result.returncode != 0 and "only runs with DEBUG on" in result.stderr


def test_production_settings_serve_plain_http_locally_when_told(tmp_path):
    """DEBUG=false with SECURE_SSL_REDIRECT=false and SECURE_COOKIES=false: a real server answers over http."""
    import urllib.request

    from e2e.server import LiveServer

    server = LiveServer(
        tmp_path,
        extra_env={
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(64),
            "AUDIT_KEY": secrets.token_urlsafe(64),
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_COOKIES": "false",
        },
    )
    server.start()  # waits for the login page to answer 200 over http, not a redirect to https
    try:
        with urllib.request.urlopen(f"{server.url}/accounts/login/", timeout=10) as response:
            cookie = response.headers["Set-Cookie"]
        assert "csrftoken=" in cookie and "secure" not in cookie.lower(), cookie
    finally:
        server.close()


def test_the_docs_production_recipe_run_as_written_serves_and_applies_a_decision(tmp_path):
    """docs/operators/configuration.md "Production settings on plain HTTP, locally", its commands
    as written (the superuser made without prompts, on a free port): it migrates, and a decision is applied."""
    import http.cookiejar
    import json
    import re
    import time
    import urllib.parse
    import urllib.request

    from e2e.server import _group_stop, free_port
    from moderation.tests.docs_examples import block_find

    recipe = block_find("operators/configuration.md", "export DEBUG=false").code
    recipe = recipe.replace("createsuperuser", "createsuperuser --no-input").replace("<that user>", "ann")
    port, password = free_port(), secrets.token_urlsafe(16)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "SECRET_KEY",
            "AUDIT_KEY",
            "DEBUG",
            "ALLOWED_HOSTS",
            "DATABASE_URL",
            "REDIS_URL",
            "REVIEWQUEUE_APPLY_INLINE",
            "CHANNEL_LAYER_PREFIX",
        }
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
        REVIEWQUEUE_VAR_DIR=str(tmp_path),
        PORT=str(port),
        DJANGO_SUPERUSER_USERNAME="ann",
        DJANGO_SUPERUSER_PASSWORD=password,
        DJANGO_SUPERUSER_EMAIL="ann@example.org",
    )
    item = ".venv/bin/python manage.py item_add --title 'Recipe item' --body 'Some harmless text.'"
    # The item is added after the set-up and before the last line, which serves until stopped.
    *setup, serve = recipe.strip().splitlines()
    script = "\n".join([*setup, item, serve])
    log = open(tmp_path / "recipe.log", "w")  # noqa: SIM115 - the child's
    proc = subprocess.Popen(
        ["bash", "-euc", script], cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    children_adopt(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        deadline = time.monotonic() + 600  # migrations and two start-ups on a busy machine: a hang guard only
        while True:
            assert proc.poll() is None, (tmp_path / "recipe.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "recipe.log").read_text()
            try:
                page = opener.open(f"{base}/accounts/login/", timeout=10).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        opener.open(
            urllib.request.Request(
                f"{base}/accounts/login/",
                headers={"Referer": f"{base}/accounts/login/"},
                data=urllib.parse.urlencode({"csrfmiddlewaretoken": token, "username": "ann", "password": password}).encode(),
            ),
            timeout=30,
        )
        item_id = re.search(r"Added ([0-9a-f-]{36})", (tmp_path / "recipe.log").read_text()).group(1)
        csrf = next(c.value for c in jar if c.name == "csrftoken")
        decided = json.loads(
            opener.open(
                urllib.request.Request(
                    f"{base}/api/items/{item_id}/decision",
                    data=json.dumps({"decision": "approve"}).encode(),
                    headers={"Content-Type": "application/json", "X-CSRFToken": csrf, "Referer": f"{base}/"},
                ),
                timeout=30,
            ).read()
        )
        assert decided["outcome"] == "won", decided
        # The task worker the recipe starts applies it: the item page says Done.
        while 'data-state="finished"' not in opener.open(f"{base}/items/{item_id}/", timeout=30).read().decode():
            assert time.monotonic() < deadline, (tmp_path / "recipe.log").read_text()
            time.sleep(0.5)
    finally:
        _group_stop(proc, 15)
        log.close()


def _shown(**env) -> list[str]:
    """AXES_FAILURE_LIMIT, the cool-off in seconds and the cache key prefix under ``env``."""
    show = (
        "from django.conf import settings as s; "
        "print(s.AXES_FAILURE_LIMIT, int(s.AXES_COOLOFF_TIME.total_seconds()), s.CACHES['default']['KEY_PREFIX'])"
    )
    full_env = {k: v for k, v in os.environ.items() if k not in {"CHANNEL_LAYER_PREFIX", "CACHE_KEY_PREFIX"}}
    result = forked_run(["manage.py", "shell", "-v", "0", "-c", show], env={**full_env, **env}, cwd=BASE_DIR, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_login_lock_out_and_cache_prefix_come_from_the_environment():
    assert _shown() == ["5", "900", "reviewqueue"]
    # The cache prefix follows the channel-layer prefix unless it is set on its own.
    assert _shown(LOGIN_FAILURE_LIMIT="20", LOGIN_COOLOFF="60", CHANNEL_LAYER_PREFIX="siteb") == ["20", "60", "siteb"]
    assert _shown(CHANNEL_LAYER_PREFIX="siteb", CACHE_KEY_PREFIX="sitec")[2] == "sitec"


def test_a_moderation_log_line_is_written_once_under_daphne(tmp_path):
    """daphne gives the root logger a handler of its own; ``moderation`` has ours and must not
    also hand its lines on to daphne's, which wrote each of them twice."""
    import urllib.error
    import urllib.request

    from e2e.server import LiveServer

    # A zero bound fails every check of /healthz at once, and each failure logs one warning.
    server = LiveServer(tmp_path, extra_env={"HEALTH_CHECK_TIMEOUT": "0"})
    server.start()
    try:
        try:
            urllib.request.urlopen(f"{server.url}/healthz", timeout=10)
        except urllib.error.HTTPError as error:
            assert error.code == 503
    finally:
        server.close()
    log = server.log_path.read_text()
    assert log.count("health check database failed") == 1, log
    assert "WARNING moderation.web.health: health check database failed" in log, log


def _settings_shown(names: list[str], **env) -> list[str]:
    show = f"from django.conf import settings as s; print(*(getattr(s, n) for n in {names!r}))"
    result = _manage("shell", "-v", "0", "-c", show, DEBUG="true", **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_every_boolean_is_read_one_way():
    """CLAIMS_ENABLED=off left claims on: four booleans were parsed by hand, each its own way."""
    names = ["CLAIMS_ENABLED", "CLAIMS_REQUIRED", "NEXT_ITEM_AFTER_DECISION", "REVIEWQUEUE_APPLY_INLINE"]
    assert _settings_shown(names, **dict.fromkeys(names, "off")) == ["False"] * 4
    assert _settings_shown(names, **dict.fromkeys(names, "on")) == ["True"] * 4
    assert _settings_shown(names, **dict.fromkeys(names, "Yes")) == ["True"] * 4
    assert _settings_shown(names, **dict.fromkeys(names, "0")) == ["False"] * 4


def test_a_spelling_the_settings_do_not_know_is_refused_naming_the_variable_and_the_value():
    # django-environ alone reads an unknown boolean as false and "5s" as 5.0.
    for name, value, error in (
        ("CLAIMS_ENABLED", "of", "CLAIMS_ENABLED must be true or false, not 'of'"),
        ("NEXT_ITEM_AFTER_DECISION", "2", "NEXT_ITEM_AFTER_DECISION must be true or false, not '2'"),
        ("SQLITE_BUSY_TIMEOUT", "5s", "SQLITE_BUSY_TIMEOUT must be a number, not '5s'"),
        ("CLAIM_SECONDS", "5m", "CLAIM_SECONDS must be a whole number, not '5m'"),
        ("LOG_FORMAT", "JSON", "LOG_FORMAT must be one of plain, json, not 'JSON'"),
        # Read by hand where the checkpointer's pool was made: a ValueError at the first graph run.
        ("CHECKPOINT_POOL_SIZE", "ten", "CHECKPOINT_POOL_SIZE must be a whole number, not 'ten'"),
    ):
        result = _manage("check", DEBUG="true", **{name: value})
        assert result.returncode != 0 and error in result.stderr, result.stderr


def test_a_value_is_what_it_says_and_an_empty_number_is_its_default():
    # A generated key may start with "$", which django-environ would read as another variable's name.
    assert _settings_shown(
        ["SECRET_KEY", "METRICS_WORKER_PORT", "CLAIM_SECONDS"],
        SECRET_KEY="$HOME-not-a-reference",
        METRICS_WORKER_PORT="",
        CLAIM_SECONDS="",
    ) == ["$HOME-not-a-reference", "0", "300"]


def _variables_read(path: Path) -> set[str]:
    """The names passed to ``env.<type>(...)`` in a settings module."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
        ):
            names.add(node.args[0].value)
    return names


def test_every_variable_the_settings_read_is_read_through_env_and_documented():
    settings_path = BASE_DIR / "reviewqueue" / "settings.py"
    source = settings_path.read_text()
    assert "os.environ" not in source and "getenv" not in source, "read the environment through env only"
    read = _variables_read(settings_path) | _variables_read(BASE_DIR / "e2e" / "settings.py")
    assert {"CLAIMS_ENABLED", "LANGGRAPH_SWEEP_INTERVAL", "REMOTE_RETRY_BASE", "LOG_FORMAT"} <= read
    documented = (BASE_DIR / "docs" / "operators" / "configuration.md").read_text()
    missing = sorted(name for name in read if f"`{name}`" not in documented)
    assert not missing, f"not in docs/operators/configuration.md: {missing}"


def _environment_reads(path: Path) -> set[str]:
    """The names a module reads straight from the environment: ``os.environ[...]``, ``os.environ.get(...)``, ``os.getenv(...)``."""
    import ast

    def os_attr(node: ast.expr, *names: str) -> bool:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return isinstance(node, ast.Name) and node.id == "os" and tuple(reversed(parts)) in names

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and os_attr(node.func, ("environ", "get"), ("getenv",)) and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and os_attr(node.value, ("environ",)):
            key = node.slice
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.add(key.value)
    return found


def test_no_module_reads_a_documented_variable_past_the_settings(tmp_path):
    """CHECKPOINT_POOL_SIZE was read with int(os.environ.get(...)) in moderation.core.checkpointer: no
    strict reading, no error at start-up. Every documented variable is read once, in the settings."""
    documented = (BASE_DIR / "docs" / "operators" / "configuration.md").read_text()
    product = [p for root in ("moderation", "reviewqueue") for p in (BASE_DIR / root).rglob("*.py") if "tests" not in p.parts]
    past = sorted(
        f"{path.relative_to(BASE_DIR)}: {name}"
        for path in product
        if path.name != "settings.py"
        for name in _environment_reads(path)
        if f"`{name}`" in documented
    )
    assert not past, f"read through reviewqueue.settings instead: {past}"
    control = tmp_path / "control.py"  # the check sees each way of reading
    control.write_text('import os\nos.environ.get("A")\nos.environ["B"]\nos.getenv("C")\nos.environ.setdefault("D")\n')
    assert _environment_reads(control) == {"A", "B", "C"}


def test_a_session_database_url_takes_the_session_bound_connections_and_turns_server_side_cursors_off():
    show = (
        "from django.db import connection; from moderation.core.checkpointer import checkpointer_target; "
        "print(checkpointer_target().replace(' ', ','), connection.settings_dict['DISABLE_SERVER_SIDE_CURSORS'])"
    )
    direct = "postgres://rq@db.internal:5432/reviewqueue"
    by_default = _manage("shell", "-v", "0", "-c", show, DEBUG="true", DATABASE_URL=direct)
    assert by_default.returncode == 0, by_default.stderr
    assert by_default.stdout.split() == ["host=db.internal,port=5432,dbname=reviewqueue,user=rq,password=''", "False"]
    split = _manage(
        "shell",
        "-v",
        "0",
        "-c",
        show,
        DEBUG="true",
        DATABASE_URL="postgres://rq@pooler:6432/reviewqueue_tx",
        SESSION_DATABASE_URL=direct,
    )
    assert split.returncode == 0, split.stderr
    assert split.stdout.split() == ["host=db.internal,port=5432,dbname=reviewqueue,user=rq,password=''", "True"]


def test_a_session_database_url_beside_sqlite_is_a_clear_error():
    result = _manage(
        "check",
        DEBUG="true",
        DATABASE_URL="sqlite:///tmp/x.sqlite3",
        SESSION_DATABASE_URL="postgres://rq@db.internal/reviewqueue",
    )
    assert result.returncode != 0
    assert "SESSION_DATABASE_URL is for PostgreSQL" in result.stderr, result.stderr


def test_bulkheads_that_would_leave_moderators_no_connection_are_a_clear_error():
    pool = {"DATABASE_URL": "postgres://rq@db.internal/reviewqueue", "DB_POOL_SIZE": "10"}
    assert _settings_shown(["BULKHEAD_API", "BULKHEAD_WEBHOOKS"], **pool) == ["2", "1"]
    result = _manage("check", DEBUG="true", **pool, BULKHEAD_API="6", BULKHEAD_WEBHOOKS="4")
    assert result.returncode != 0
    assert "BULKHEAD_API + BULKHEAD_WEBHOOKS (6 + 4) must leave some of DB_POOL_SIZE (10)" in result.stderr, result.stderr


def test_serve_routes_names_a_class_of_routes_or_is_a_clear_error():
    assert _settings_shown(["SERVE_ROUTES"]) == ["all"]
    assert _settings_shown(["SERVE_ROUTES"], SERVE_ROUTES="outside") == ["outside"]
    result = _manage("check", DEBUG="true", SERVE_ROUTES="api")
    assert result.returncode != 0
    assert "SERVE_ROUTES must be one of all, outside, moderators, not 'api'" in result.stderr, result.stderr
