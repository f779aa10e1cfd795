"""Where webhooks may go: internal addresses are refused when an endpoint is saved, unless allowed.

A name is looked up in DNS with no transaction open and no pooled connection held
(``moderation.core.ioguard``): the admin's add and change pages, and a thread of a server
holding a PostgreSQL pool's connection; the negative control is the admin's own transaction
around the same page, which the guard reports.
"""

import socket
import threading
from ipaddress import ip_address, ip_network

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from moderation.admin import WebhookEndpointForm
from moderation.core import ioguard
from moderation.delivery.models import WebhookEndpoint
from moderation.delivery.targets import address_refusal, host_addresses, webhook_url_validate

INTERNAL_URLS = [
    ("http://127.0.0.1:8000/hook", "loopback"),
    ("http://localhost/", "loopback"),
    ("http://app.localhost/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://169.254.169.254/latest/meta-data/iam", "link-local"),
    ("http://metadata.google.internal/computeMetadata/v1/", "link-local"),
    ("http://10.1.2.3/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://172.31.255.254/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://100.100.100.200/", "carrier-grade NAT"),  # Alibaba Cloud's metadata service
    ("http://[fd00::1]/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[::ffff:10.0.0.1]/", "private"),
    ("http://[::ffff:169.254.169.254]/", "link-local"),
    ("http://[64:ff9b::a9fe:a9fe]/", "link-local"),  # NAT64 of 169.254.169.254
    ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 of 127.0.0.1
    ("http://224.0.0.1/", "multicast"),
    ("http://192.0.2.10/", "not a public address"),  # documentation range
    ("http://240.0.0.1/", "not a public address"),
]


@pytest.fixture
def nothing_allowed(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = []


@pytest.mark.parametrize("url, kind", INTERNAL_URLS)
def test_an_internal_target_is_refused_by_the_admin_form_and_saves_nothing(db, nothing_allowed, url, kind):
    form = WebhookEndpointForm(data={"name": "hooks", "url": url, "events": ["item.decided"], "active": "on"})
    assert not form.is_valid()
    [error] = form.errors["url"]
    assert "is refused" in error and kind in error and "WEBHOOK_ALLOWED_NETWORKS" in error, error
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.parametrize("url", ["https://93.184.215.14/hook", "http://[2606:4700:4700::1111]/", "http://8.8.8.8:8080/x"])
def test_a_public_address_is_accepted(db, nothing_allowed, url):
    webhook_url_validate(url)
    form = WebhookEndpointForm(data={"name": "hooks", "url": url, "events": ["item.decided"], "active": "on"})
    assert form.is_valid(), form.errors


def test_model_validation_refuses_it_too(db, nothing_allowed):
    endpoint = WebhookEndpoint(name="hooks", url="http://192.168.0.10/hook", events=["item.decided"])
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    assert "a private address" in " ".join(refused.value.message_dict["url"])


def test_a_name_is_judged_by_what_it_resolves_to(db, nothing_allowed, monkeypatch):
    real = socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        if host != "hooks.corp.example":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in ("93.184.215.14", "10.20.30.40")]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(ValidationError, match=r"hooks.corp.example is refused: 10.20.30.40 is a private address"):
        webhook_url_validate("https://hooks.corp.example/hook")


def test_a_name_that_does_not_resolve_here_is_accepted_and_left_to_the_worker(db, nothing_allowed):
    webhook_url_validate("https://hooks.invalid/hook")


def test_the_other_spellings_of_loopback_resolve_to_it(nothing_allowed):
    assert host_addresses(host="2130706433", timeout=5) == [ip_address("127.0.0.1")]
    assert host_addresses(host="0x7f.1", timeout=5) == [ip_address("127.0.0.1")]
    assert host_addresses(host="[::ffff:7f00:1]", timeout=5) == [ip_address("::ffff:127.0.0.1")]


def test_the_allow_list_lets_internal_receivers_through(db, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = [ip_network("10.0.0.0/8"), ip_network("fd00::/8")]
    assert address_refusal(ip_address("10.9.8.7")) is None
    assert address_refusal(ip_address("::ffff:10.9.8.7")) is None  # the same host, IPv4-mapped
    assert address_refusal(ip_address("fd00::5")) is None
    assert "loopback" in address_refusal(ip_address("127.0.0.1"))  # only what is listed
    form = WebhookEndpointForm(
        data={"name": "hooks", "url": "http://10.1.2.3:8080/hook", "events": ["item.decided"], "active": "on"}
    )
    assert form.is_valid(), form.errors


def test_the_admin_add_page_refuses_it_with_the_field_named(admin_client, nothing_allowed):
    response = admin_client.post(
        "/admin/moderation/webhookendpoint/add/",
        {
            "name": "hooks",
            "url": "http://169.254.169.254/latest/meta-data/",
            "events": ["item.decided"],
            "active": "on",
        },
    )
    assert response.status_code == 200  # the form again, with its error
    assert "169.254.169.254 is a link-local address" in response.content.decode()
    assert WebhookEndpoint.objects.count() == 0


@pytest.fixture
def public_name(monkeypatch):
    """hooks.corp.example resolves to a public address (without asking DNS)."""
    real = socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        if host != "hooks.corp.example":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


@pytest.fixture
def report(tmp_path, monkeypatch):
    """The guard's report in a file of this test's own, with the pool checked as in a server."""
    path = tmp_path / "ioguard.log"
    path.write_text("")
    monkeypatch.setitem(ioguard._state, "report", str(path))
    monkeypatch.setitem(ioguard._state, "pool_check", True)
    return path


def _admin_saves(admin_client, name: str) -> None:
    form = {"name": name, "url": "https://hooks.corp.example/hook", "events": ["item.decided"], "active": "on"}
    assert admin_client.post("/admin/moderation/webhookendpoint/add/", form).status_code == 302
    endpoint = WebhookEndpoint.objects.get(name=name)
    form["url"] = "https://hooks.corp.example/other"
    assert admin_client.post(f"/admin/moderation/webhookendpoint/{endpoint.pk}/change/", form).status_code == 302


def test_the_admin_looks_a_name_up_outside_any_transaction(admin_client, public_name, report):
    _admin_saves(admin_client, "hooks")
    assert WebhookEndpoint.objects.get().url == "https://hooks.corp.example/other"
    assert report.read_text() == ""


def test_negative_control_the_same_pages_inside_a_transaction_are_reported(admin_client, public_name, report):
    with transaction.atomic():  # as Django's admin wraps a POST
        _admin_saves(admin_client, "hooks")
    found = report.read_text()
    assert "DNS 'hooks.corp.example' inside atomic" in found, found


@pytest.mark.postgres_variant
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connection pool")
@pytest.mark.django_db(transaction=True)
def test_a_thread_holding_a_pooled_connection_gives_it_back_before_the_lookup(public_name, report):
    def server_thread() -> None:
        from django.db import connection as its_connection

        try:
            assert WebhookEndpoint.objects.count() == 0  # the request's connection, checked out
            webhook_url_validate("https://hooks.corp.example/hook")
        finally:
            its_connection.close()

    thread = threading.Thread(target=server_thread)
    thread.start()
    thread.join()
    assert report.read_text() == ""
