"""One webhook POST against a real receiver: bounded as a whole, hardly reading an error, never to a refused address.

Attempts run as a worker runs them (``delivery_attempt``); the receiver is
moderation/tests/webhook_receiver.py, on 127.0.0.1 (allowed for the suite by conftest.py).
"""

import socket
from ipaddress import ip_network

import pytest

from moderation.delivery.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from moderation.delivery.posting import BODY_READ_MAX, EXCERPT_CHARS, error_excerpt
from moderation.delivery.sending import delivery_attempt
from moderation.delivery.targets import webhook_url_validate
from moderation.tests.webhook_receiver import Receiver

WAIT = 30  # seconds the receiver may take to notice the sender hung up (a safety net, not a bound)


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def _endpoint(receiver: Receiver, url: str | None = None) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.create(name="pipeline", url=url or receiver.url, events=["item.created"])
    receiver.secret = endpoint.secret
    return endpoint


def _attempted(endpoint: WebhookEndpoint, make_item) -> WebhookDelivery:
    item = make_item()
    delivery = WebhookDelivery.objects.get(item_public_id=item.public_id, endpoint=endpoint)
    delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    return delivery


def test_an_answer_trickled_byte_by_byte_is_cut_at_the_attempts_whole_timeout(db, receiver, make_item, settings):
    # Every byte comes well within the timeout, so only a bound on the whole attempt ends it.
    settings.WEBHOOK_TIMEOUT = 0.5
    receiver.trickle_next, receiver.trickle_interval = 1, 0.1
    delivery = _attempted(_endpoint(receiver), make_item)
    [answer] = receiver.answers
    assert answer.done.wait(WAIT)
    assert answer.cut and answer.sent < answer.total, answer  # the sender hung up mid-answer
    [attempt] = delivery.attempt_log.all()
    assert (delivery.status, attempt.status_code) == (DeliveryStatus.PENDING, None)  # failed: retried later
    assert attempt.error.startswith("ReadTimeout: the attempt took its whole WEBHOOK_TIMEOUT"), attempt.error


def test_a_huge_error_answer_is_hardly_read_and_only_a_scrubbed_excerpt_kept(db, receiver, make_item):
    receiver.fail_next = 1
    receiver.fail_body = b"db_password=hunter2 internal error " + b"x" * (64 * 1024 - 35)
    receiver.fail_body_times = 1024  # 64 MiB
    delivery = _attempted(_endpoint(receiver), make_item)
    [answer] = receiver.answers
    assert answer.done.wait(WAIT)
    assert answer.cut and answer.sent < answer.total // 4, answer  # read a little, then closed
    [attempt] = delivery.attempt_log.all()
    assert attempt.status_code == 500
    assert attempt.error == delivery.last_error
    assert attempt.error.startswith("HTTP 500: db_password=[redacted] internal error xxx") and attempt.error.endswith("x…")
    assert len(attempt.error) == len("HTTP 500: ") + EXCERPT_CHARS


@pytest.mark.parametrize(
    "head, kept",
    [
        (b'{"error":"invalid signature"}', 'HTTP 502: {"error":"invalid signature"}'),
        (
            b'{"detail":"down","api_key":"sk_live_51H8xYz","Token": "t0k3n"}',
            'HTTP 502: {"detail":"down","api_key":"[redacted]","Token": "[redacted]"}',
        ),
        (
            b"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc\nsession=a1b2c3",
            "HTTP 502: Authorization: [redacted] session=[redacted]",
        ),
        (b"upstream 10.0.0.5 said AKIAIOSFODNN7EXAMPLE1234 nope", "HTTP 502: upstream 10.0.0.5 said [redacted] nope"),
        # A pair inside another pair's value (the issue's own example), at any depth.
        (b"ERROR: secret=s3cr3t-value", "HTTP 502: ERROR: secret=[redacted]"),
        (
            b"ERROR:secret=s3cr3t-value; detail: note: password=hunter2",
            "HTTP 502: ERROR:secret=[redacted]; detail: note: password=[redacted]",
        ),
        (b"x=y=token=t0k", "HTTP 502: x=y=token=[redacted]"),
        # A quoted value is redacted to its closing quote, spaces and escaped quotes included.
        (b'{"password": "correct horse \\"battery\\" staple", "ok": 1}', 'HTTP 502: {"password": "[redacted]", "ok": 1}'),
        (b"auth_header='Basic dXNlcjpwYXNz'", "HTTP 502: auth_header='[redacted]'"),
        (b"line one\r\n\tline\x00two \x1b[31mred\xff", "HTTP 502: line one line two [31mred\ufffd"),
        (b"", "HTTP 502"),
    ],
)
def test_an_error_excerpt_is_one_short_printable_line_with_secrets_redacted(head, kept):
    assert error_excerpt(status=502, head=head) == kept


def test_the_excerpt_redacts_before_it_cuts(db):
    # A secret across the cut is not half shown.
    head = b"e" * 80 + b" password=" + b"p" * 40
    assert error_excerpt(status=500, head=head) == "HTTP 500: " + "e" * 80 + " password=[redacted]"
    assert len(head) < BODY_READ_MAX


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_refused_address_is_refused_at_send_time_too(db, receiver, make_item, settings, host):
    """Saved while allowed (or written without validation); the worker still checks where it connects."""
    endpoint = _endpoint(receiver, f"http://{host}:{receiver.port}/hook")
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    delivery = _attempted(endpoint, make_item)
    assert receiver.requests == 0
    assert delivery.status == DeliveryStatus.PENDING
    assert delivery.last_error == (
        "refused: " + ("" if host == "127.0.0.1" else "localhost: ") + "127.0.0.1 is a loopback "
        "address; webhooks go to public addresses only, unless WEBHOOK_ALLOWED_NETWORKS allows it"
    )


def _dns(monkeypatch, answers: list[str]) -> list[str]:
    """hooks.example.test resolves to each of ``answers`` in turn (DNS changing its mind); returns the lookups made."""
    lookups, real = [], socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        if host != "hooks.example.test":
            return real(host, port, *args, **kwargs)
        lookups.append(answers[min(len(lookups), len(answers) - 1)])
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (lookups[-1], 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return lookups


def test_a_name_rebound_to_an_internal_address_after_it_was_saved_is_refused(db, receiver, make_item, settings, monkeypatch):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    lookups = _dns(monkeypatch, ["93.184.215.14", "127.0.0.1"])
    url = f"http://hooks.example.test:{receiver.port}/hook"
    webhook_url_validate(url)  # saved: public then
    delivery = _attempted(_endpoint(receiver, url), make_item)
    assert lookups == ["93.184.215.14", "127.0.0.1"]
    assert delivery.last_error.startswith("refused: hooks.example.test: 127.0.0.1 is a loopback address")
    assert receiver.requests == 0


def test_the_worker_connects_to_the_address_it_checked(db, receiver, make_item, settings, monkeypatch):
    """One lookup per attempt, and the socket goes where it said: no second lookup to rebind."""
    settings.WEBHOOK_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32")]
    lookups = _dns(monkeypatch, ["127.0.0.1", "10.9.9.9"])
    delivery = _attempted(_endpoint(receiver, f"http://hooks.example.test:{receiver.port}/hook"), make_item)
    assert (delivery.status, lookups) == (DeliveryStatus.DELIVERED, ["127.0.0.1"])
    [(_, headers)] = receiver.raw
    assert headers["Host"] == f"hooks.example.test:{receiver.port}"  # the URL's name, at the checked address
