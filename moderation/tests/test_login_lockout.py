"""Password guessing is bounded: django-axes locks an address and an account after
LOGIN_FAILURE_LIMIT failures, counted in the database every server shares."""

import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from e2e.browser import PASSWORD
from e2e.server import LiveServer

RIGHT = "pw-for-tests-1"  # conftest's password for every test user


@pytest.fixture(autouse=True)
def failure_limit(settings):
    settings.AXES_FAILURE_LIMIT = 5


def _login(username, password, *, address="10.0.0.1", **headers):
    client = Client(REMOTE_ADDR=address)
    response = client.post(reverse("login"), {"username": username, "password": password}, **headers)
    return client, response


def _logged_in(client) -> bool:
    return client.get(reverse("moderation:queue")).status_code == 200


def _guess(username, times, *, address="10.0.0.1", **headers):
    return [_login(username, f"wrong-{n}", address=address, **headers)[1].status_code for n in range(times)]


@pytest.mark.django_db
def test_wrong_passwords_lock_the_account_and_then_the_right_one_is_refused(alice):
    assert _guess("alice", 5) == [200, 200, 200, 200, 429]
    client, response = _login("alice", RIGHT)
    assert response.status_code == 429
    assert b'id="locked-out"' in response.content and b"after 5 failed attempts" in response.content
    assert not _logged_in(client)


@pytest.mark.django_db
def test_the_account_stays_locked_from_another_address(alice):
    _guess("alice", 5, address="10.0.0.1")
    client, response = _login("alice", RIGHT, address="10.0.0.2")
    assert response.status_code == 429 and not _logged_in(client)


@pytest.mark.django_db
def test_an_address_guessing_many_accounts_is_locked_for_all_of_them(alice, bob):
    for name in ("x1", "x2", "x3", "x4", "bob"):
        _guess(name, 1, address="10.0.0.3")
    assert _login("alice", RIGHT, address="10.0.0.3")[1].status_code == 429
    # Neither alice nor bob was guessed five times: from elsewhere they log in.
    for name in ("alice", "bob"):
        client, response = _login(name, RIGHT, address="10.0.0.4")
        assert response.status_code == 302 and _logged_in(client)


@pytest.mark.django_db
def test_x_forwarded_for_cannot_choose_the_locked_address(alice, bob):
    # Every guess claims another address; all of them count against the real one...
    for n, name in enumerate(("x1", "x2", "x3", "x4", "x5")):
        _guess(name, 1, address="10.0.0.5", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert _login("alice", RIGHT, address="10.0.0.5", HTTP_X_FORWARDED_FOR="192.0.2.99")[1].status_code == 429
    # ...and none against the addresses named, so no one can lock out someone else's.
    client, response = _login("bob", RIGHT, address="192.0.2.1")
    assert response.status_code == 302 and _logged_in(client)


@pytest.mark.django_db
def test_the_lock_is_kept_in_the_database_not_in_a_process(alice):
    _guess("alice", 5)
    cache.clear()  # nothing of it lives in this process's cache
    assert AccessAttempt.objects.get(username="alice", ip_address="10.0.0.1").failures_since_start == 5
    assert _login("alice", RIGHT, address="10.0.0.9")[1].status_code == 429


@pytest.mark.django_db
def test_staff_can_unlock_an_account(alice):
    _guess("alice", 5)
    call_command("axes_reset_username", "alice", verbosity=0)
    client, response = _login("alice", RIGHT, address="10.0.0.9")
    assert response.status_code == 302 and _logged_in(client)


@pytest.mark.django_db
def test_the_lock_ends_after_the_cool_off(settings, alice):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    _guess("alice", 5)
    assert _login("alice", RIGHT)[1].status_code == 429
    time.sleep(1.2)
    client, response = _login("alice", RIGHT)
    assert response.status_code == 302 and _logged_in(client)


@pytest.mark.django_db
def test_a_success_forgets_earlier_failures(alice):
    _guess("alice", 4)
    assert _login("alice", RIGHT)[1].status_code == 302
    assert _guess("alice", 4) == [200, 200, 200, 200]


def _form_login(host: str, username: str, password: str) -> int:
    """One login through the real form of a real server; the HTTP status of the answer."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    url = f"http://{host}/accounts/login/"
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', opener.open(url, timeout=30).read().decode())[1]
    fields = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token})
    try:
        with opener.open(url, fields.encode(), timeout=30) as answer:
            return answer.status if urllib.parse.urlsplit(answer.url).path == "/accounts/login/" else 302
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.django_db(False)
def test_a_lock_out_on_one_server_holds_on_another(tmp_path):
    """Two real daphne processes sharing only their database: guessed on one, locked on both."""
    first = LiveServer(tmp_path / "first", settings="e2e.settings")
    first.prepare()
    second = LiveServer(tmp_path / "second", settings="e2e.settings", database_url=first.database_url)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(LiveServer.start, (first, second)))
        hosts = (first.netloc, second.netloc)
        assert [_form_login(hosts[0], "alice", f"wrong-{n}") for n in range(5)] == [200, 200, 200, 200, 429]
        assert _form_login(hosts[1], "alice", PASSWORD) == 429
        second.manage("axes_reset_username", "alice", timeout=60)
        assert _form_login(hosts[1], "alice", PASSWORD) == 302
    finally:
        first.close()
        second.close()
