"""Client-owned webhook endpoints: each client's receiver gets its own items' events only, the
operators' every item's; made in the admin and with ``manage.py apiclient_webhook``.

Receivers are real HTTP servers verifying each endpoint's own secret
(moderation/tests/webhook_receiver.py); deliveries go through the real sender, called as a
worker would.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import suppress
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from moderation.api.clients import apiclient_create
from moderation.delivery.endpoints import CLIENT_ENDPOINTS_MAX, client_endpoint_create
from moderation.delivery.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from moderation.delivery.sending import delivery_attempt
from moderation.review.decisions import item_decide
from moderation.tests.api.test_api_items import ITEM, Api
from moderation.tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def receivers():
    started = {name: Receiver().start() for name in ("a", "b", "ops")}
    yield started
    for receiver in started.values():
        receiver.stop()


def _send_all() -> None:
    """Every pending delivery, in order, through the real sender."""
    for delivery in WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).order_by("item_public_id", "sequence"):
        assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED


def _seen(receiver: Receiver) -> list[tuple[str, str]]:
    assert receiver.bad_signatures == 0
    return sorted((got.data["id"], got.type) for got in receiver.received)


def test_each_client_receives_only_its_own_items_events_and_the_operators_endpoint_all(receivers, alice, make_item):
    apis = {}
    for name in ("a", "b"):
        apis[name] = Api(apiclient_create(name=f"client-{name}", scopes=["items:write", "items:read"])[1])
        created = apis[name].post("/webhooks", {"name": "hook", "url": receivers[name].url}).json()
        receivers[name].secret = created["secret"]
    ops = WebhookEndpoint.objects.create(name="ops", url=receivers["ops"].url, events=["item.created", "item.decided"])
    receivers["ops"].secret = ops.secret

    items = {name: apis[name].post("/items", {**ITEM, "title": f"from {name}"}).json()["id"] for name in ("a", "b")}
    in_house = str(make_item(title="made in-process").public_id)  # no submitting client
    for public_id in (*items.values(), in_house):
        item_decide(item_public_id=public_id, reviewer=alice, decision="approve")
    _send_all()

    for name in ("a", "b"):
        assert _seen(receivers[name]) == sorted([(items[name], "item.created"), (items[name], "item.decided")])
    assert _seen(receivers["ops"]) == sorted(
        (public_id, event) for public_id in (*items.values(), in_house) for event in ("item.created", "item.decided")
    )
    # Negative control: the filter is what keeps B's events from A. An endpoint of A's made
    # an operator's (owner cleared) receives B's next item like any operator's.
    WebhookEndpoint.objects.filter(owner__name="client-a").update(owner=None)
    later = apis["b"].post("/items", {**ITEM, "title": "later from b"}).json()["id"]
    _send_all()
    assert (later, "item.created") in _seen(receivers["a"])


def test_an_inactive_client_endpoint_receives_nothing(receivers):
    client, token = apiclient_create(name="client-a", scopes=["items:write"])
    endpoint = client_endpoint_create(client=client, name="hook", url=receivers["a"].url)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(active=False)
    Api(token).post("/items", ITEM)
    assert not WebhookDelivery.objects.exists()


# --- The admin ---------------------------------------------------------------------------


def test_admin_creates_a_client_endpoint_showing_once_the_secret_that_signs_its_deliveries(admin_client, receivers):
    client, token = apiclient_create(name="client-a", scopes=["items:write"])
    response = admin_client.post(
        "/admin/moderation/webhookendpoint/add/",
        {
            "name": "hook",
            "owner": client.pk,
            "url": receivers["a"].url,
            "events": ["item.created"],
            "active": "on",
        },
        follow=True,
    )
    page = response.content.decode()
    [shown] = re.findall(r"whsec_[A-Za-z0-9+/=]+", page)
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.owner == client and shown == endpoint.secret
    change_page = admin_client.get(f"/admin/moderation/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert "whsec_" not in change_page  # the client's: shown at its creation only

    receivers["a"].secret = shown
    item_id = Api(token).post("/items", ITEM).json()["id"]
    _send_all()
    assert _seen(receivers["a"]) == [(item_id, "item.created")]


def test_admin_refuses_a_client_endpoint_past_the_bound_or_on_a_private_address(admin_client):
    client, _ = apiclient_create(name="client-a", scopes=["items:write"])
    for n in range(CLIENT_ENDPOINTS_MAX):
        client_endpoint_create(client=client, name=f"hook-{n}", url="https://hooks.example.com/")
    form = {"name": "one-more", "owner": client.pk, "url": "https://hooks.example.com/", "events": ["item.created"]}
    page = admin_client.post("/admin/moderation/webhookendpoint/add/", form).content.decode()
    assert f"already has {CLIENT_ENDPOINTS_MAX} webhook endpoints" in page
    page = admin_client.post("/admin/moderation/webhookendpoint/add/", {**form, "owner": "", "url": "http://10.1.2.3/"})
    assert "is a private address" in page.content.decode()
    assert WebhookEndpoint.objects.count() == CLIENT_ENDPOINTS_MAX


# --- manage.py apiclient_webhook ---------------------------------------------------------


def _command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("apiclient_webhook", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_command_adds_lists_and_removes_a_clients_endpoint(receivers):
    client, token = apiclient_create(name="client-a", scopes=["items:write"])
    secret, said = _command("add", "client-a", "hook", receivers["a"].url, "--event", "item.created")
    endpoint = WebhookEndpoint.objects.get()
    assert secret.strip() == endpoint.secret and "shown only now" in said and endpoint.owner == client
    receivers["a"].secret = secret.strip()
    item_id = Api(token).post("/items", ITEM).json()["id"]
    _send_all()
    assert _seen(receivers["a"]) == [(item_id, "item.created")]

    listed, _ = _command("list", "client-a")
    assert listed == f"{endpoint.pk}\thook\t{receivers['a'].url}\titem.created\tactive\n"
    assert endpoint.secret not in listed
    apiclient_create(name="client-b", scopes=["items:write"])
    with pytest.raises(CommandError, match=f"client-b has no webhook endpoint {endpoint.pk}"):
        _command("remove", "client-b", str(endpoint.pk))
    removed, _ = _command("remove", "client-a", str(endpoint.pk))
    assert "Removed endpoint" in removed and not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "nobody", "hook", "https://hooks.example.com/"], "no API client named 'nobody'"),
        (["add", "client-a", "hook", "http://192.168.0.9/"], "url_refused: url: the URL's host 192.168.0.9 is refused"),
        (["add", "client-a", "hook", "gopher://x/"], "url_invalid"),
        (["add", "client-a", "hook", "https://hooks.example.com/", "--event", "item.nope"], "events_invalid"),
    ],
)
def test_command_refuses_bad_input_and_changes_nothing(args, message):
    apiclient_create(name="client-a", scopes=["items:write"])
    with pytest.raises(CommandError, match=re.escape(message)):
        _command(*args)
    assert not WebhookEndpoint.objects.exists()


# --- the bound under concurrent creates -------------------------------------------------------

RACE_ROUNDS = 5
RACERS = 3
NAIVE_DELAY = 0.05  # the window between counting and inserting that real latency opens


def _bound_race(monkeypatch, *, guarded: bool) -> list[tuple[int, int]]:
    """Per round, (endpoints after it, creates that succeeded): RACERS creates at once for a client
    one short of its bound. Unguarded: without the client's row lock (the textbook count-then-insert)."""
    from moderation.delivery import endpoints
    from moderation.delivery.endpoints import EndpointRefused
    from moderation.tests.races import race_rounds

    counted = endpoints.client_endpoints_full
    all_counted = threading.Barrier(RACERS, timeout=120)  # a round's racers, each counting once

    def slow_count(*, client):
        full = counted(client=client)
        if guarded:
            time.sleep(NAIVE_DELAY)  # under the lock the others wait: meeting here would only time out
        else:
            with suppress(threading.BrokenBarrierError):
                all_counted.wait()  # every racer counts before any inserts: the race, however scheduled
        return full

    monkeypatch.setattr(endpoints, "client_endpoints_full", slow_count)
    if not guarded:
        monkeypatch.setattr(endpoints, "_client_lock", lambda *, client: None)
    client, _ = apiclient_create(name="racer", scopes=["items:write"])
    made: list[list[str]] = [[] for _ in range(RACE_ROUNDS)]

    def before(n: int) -> None:
        WebhookEndpoint.objects.filter(owner=client).delete()
        for k in range(CLIENT_ENDPOINTS_MAX - 1):
            WebhookEndpoint.objects.create(
                owner=client, name=f"base-{k}", url="https://hooks.example.com/", events=["item.created"]
            )

    def racer(index: int):
        def create(n: int) -> None:
            try:
                client_endpoint_create(client=client, name=f"r{n}-{index}", url="https://hooks.example.com/")
            except EndpointRefused as exc:
                assert exc.code == "endpoint_limit", exc
                return
            made[n].append(f"r{n}-{index}")

        return create

    results = []

    def settle(n: int) -> None:
        if n:
            results.append((WebhookEndpoint.objects.filter(owner=client).count(), len(made[n - 1])))
        before(n)

    race_rounds(RACE_ROUNDS, *(racer(i) for i in range(RACERS)), before=settle)
    results.append((WebhookEndpoint.objects.filter(owner=client).count(), len(made[-1])))
    return results


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_never_pass_the_bound(monkeypatch):
    assert _bound_race(monkeypatch, guarded=True) == [(CLIENT_ENDPOINTS_MAX, 1)] * RACE_ROUNDS


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_negative_control_count_then_insert_without_the_lock_passes_the_bound(monkeypatch):
    from django.db import connection

    if connection.vendor == "sqlite":
        pytest.skip("SQLite's IMMEDIATE transactions serialize every writer: the naive path cannot race there")
    rounds = _bound_race(monkeypatch, guarded=False)
    assert all(count > CLIENT_ENDPOINTS_MAX for count, _ in rounds), rounds
