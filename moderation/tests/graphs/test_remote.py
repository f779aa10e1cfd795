"""Where a LangGraph deployment may be reached: public addresses and ``DEPLOYMENT_ALLOWED_NETWORKS`` only,
at registration and at every call, checked on the address connected to (as webhooks are)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network

import pytest

from moderation.delivery.models import ApiClient
from moderation.graphs.remote import Connection, RemoteRefused, remote_thread_read
from moderation.review.deployments import DeploymentInvalid, GraphRoute, deployment_register, deployments_sweep
from moderation.review.models import Deployment


class StubDeployment:
    """Just enough of LangGraph Server's API for a registration and a thread read; counts what reaches it."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(200, [{"assistant_id": "a-1", "graph_id": "hitl"}])

            def do_GET(self):
                self._answer(404, {"detail": "no such thread"})

            def _answer(self, status, body):
                stub.requests.append(f"{self.command} {self.path} Host: {self.headers['Host']}")
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def stub():
    server = StubDeployment()
    yield server
    server.stop()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "host, kind",
    [
        ("127.0.0.1", "a loopback address"),
        ("localhost", "a loopback address"),
        ("169.254.169.254", "a link-local address"),
        ("10.1.2.3", "a private address"),
        ("[::ffff:127.0.0.1]", "a loopback address"),
    ],
)
def test_registering_a_deployment_at_an_internal_address_is_refused_and_reaches_nothing(stub, settings, host, kind):
    settings.DEPLOYMENT_ALLOWED_NETWORKS = []
    with pytest.raises(DeploymentInvalid) as refused:
        deployment_register(name="agents", url=f"http://{host}:{stub.port}", api_key="", routes=[GraphRoute(graph="hitl")])
    assert kind in str(refused.value) and "DEPLOYMENT_ALLOWED_NETWORKS" in str(refused.value), refused.value
    assert stub.requests == [] and not Deployment.objects.exists() and not ApiClient.objects.exists()


@pytest.mark.django_db
def test_an_allowed_network_is_reached_the_control(stub, settings):
    settings.DEPLOYMENT_ALLOWED_NETWORKS = [ip_network("127.0.0.0/8")]
    deployment, _ = deployment_register(
        name="agents", url=f"http://127.0.0.1:{stub.port}", api_key="", routes=[GraphRoute(graph="hitl")]
    )
    assert deployment.graphs["hitl"]["match"] == "graph_id" and stub.requests[0].startswith("POST /assistants/search")


@pytest.mark.django_db
def test_every_call_is_checked_a_deployment_no_longer_allowed_is_refused_by_the_sweep(stub, settings):
    settings.DEPLOYMENT_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32")]
    deployment, _ = deployment_register(
        name="agents", url=f"http://127.0.0.1:{stub.port}", api_key="", routes=[GraphRoute(graph="hitl")]
    )
    stub.requests.clear()
    settings.DEPLOYMENT_ALLOWED_NETWORKS = []
    assert deployments_sweep() == 0
    deployment.refresh_from_db()
    assert "refused: 127.0.0.1 is a loopback address" in deployment.sweep_error, deployment.sweep_error
    assert stub.requests == []


def _dns(monkeypatch, answers: list[str]) -> list[str]:
    """agents.example.test resolves to each of ``answers`` in turn (DNS changing its mind); returns the lookups made."""
    lookups, real = [], socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        if host != "agents.example.test":
            return real(host, port, *args, **kwargs)
        lookups.append(answers[min(len(lookups), len(answers) - 1)])
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (lookups[-1], 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return lookups


def test_a_name_rebound_to_an_internal_address_is_refused_and_an_allowed_one_connected_to_as_checked(
    stub,
    settings,
    monkeypatch,
):
    settings.DEPLOYMENT_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32")]
    lookups = _dns(monkeypatch, ["127.0.0.1", "10.9.9.9"])
    connection = Connection(url=f"http://agents.example.test:{stub.port}")
    assert remote_thread_read(connection=connection, thread_id="t-1").status == "deleted"  # 404: reached
    assert stub.requests == [f"GET /threads/t-1 Host: agents.example.test:{stub.port}"]  # the name, at the checked address
    with pytest.raises(RemoteRefused, match=r"refused: agents.example.test: 10.9.9.9 is a private address"):
        remote_thread_read(connection=connection, thread_id="t-2")  # DNS answers otherwise now
    assert lookups == ["127.0.0.1", "10.9.9.9"] and len(stub.requests) == 1


def test_the_calls_to_a_deployment_load_the_ca_bundle_once_per_process_not_per_call(monkeypatch):
    """Each call makes a client; loading the CA bundle for each took ~90 ms on a loaded machine, three
    times a client, most of an apply's own time (bench 27). Still guarded: a private address is refused."""
    import ssl

    loads = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda self, *a, **k: (loads.append(1), real(self, *a, **k))[1])
    for _ in range(5):
        Connection(url="https://deployment.example.org").client().close()
    assert len(loads) <= 1, f"the CA bundle loaded {len(loads)} times for 5 clients"
    with pytest.raises(RemoteRefused):
        remote_thread_read(connection=Connection(url="http://10.1.2.3:9"), thread_id="t-1")
