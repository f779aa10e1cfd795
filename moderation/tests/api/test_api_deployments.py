"""The deployment webhook (``POST /api/v1/deployments/<name>/webhook``) tells its caller nothing of the deployment.

The caller is whoever holds the URL; the deployment's own words (what it refused, its
internal addresses) go to the operator's log only.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from moderation.delivery.models import ApiClient
from moderation.review.deployments import _digest, deployment_webhook_path
from moderation.review.models import Deployment

INTERNAL = "cannot open postgres://agent:hunter2@10.1.2.3:5432/threads"


@pytest.fixture
def refusing_deployment():
    """A deployment that answers every read with 400 and an internal detail."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"detail": INTERNAL}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.django_db
def test_a_deployments_error_is_logged_and_never_reaches_the_caller(
    refusing_deployment, client, django_user_model, caplog, django_capture_on_commit_callbacks
):
    user = django_user_model.objects.create_user("langgraph.agents")
    deployment = Deployment.objects.create(
        name="agents",
        url=refusing_deployment,
        graphs={"hitl": {"match": "graph_id"}},
        client=ApiClient.objects.create(name="langgraph.agents", user=user, scopes=[]),
        webhook_digest=_digest("s3cret"),
    )
    with (
        caplog.at_level(logging.WARNING, logger="moderation.review.deployments"),
        django_capture_on_commit_callbacks(execute=True),
    ):  # the discovery, run inline after the commit here
        answer = client.post(
            deployment_webhook_path(deployment=deployment, secret="s3cret"), {"thread_id": "t-1"}, content_type="application/json"
        )
    # The webhook only queues the thread: its caller hears nothing of the deployment, whatever it answers.
    assert answer.status_code == 202 and answer.json() == {"thread_id": "t-1"}
    assert INTERNAL in caplog.text and "agents" in caplog.text  # the operator sees what went wrong
