"""The integrators' tutorial (docs/integrators/index.md), run as written against real processes.

A daphne server, a webhook worker and a receiver; the page's curl calls and its Python
(httpx) code are read from the page itself, so the example cannot drift from the API.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import httpx
import pytest

from e2e.server import LiveServer
from moderation.tests.docs_examples import block_find
from moderation.tests.real_server import Reviewer
from moderation.tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.timeout(600)]

_ENDPOINT = """
from moderation.delivery.models import WebhookEndpoint
print("SECRET " + WebhookEndpoint.objects.create(name="example", url={url!r}, events=["item.decided"]).secret)
"""


PAGE = "integrators/index.md"


def test_the_tutorial_submits_waits_and_receives_the_decision(tmp_path, capsys, monkeypatch):
    receiver = Receiver().start()
    server = LiveServer(tmp_path / "site", extra_env={"DECISION_RATE_LIMIT": "0"})
    seeded = server.seed(users=["alice"], items=0)
    receiver.secret = server.manage("shell", "-c", _ENDPOINT.format(url=receiver.url)).split("SECRET ")[1].strip()
    token = server.manage("apiclient_create", "pipeline").strip()
    server.start(timeout=300)  # a hang guard: start-ups take minutes on a loaded machine
    server.worker_start()
    try:
        env = {"REVIEWQUEUE_URL": server.url, "REVIEWQUEUE_TOKEN": token, "PATH": "/usr/bin:/bin"}
        # curl, as written: the submit, then the long-poll, answered once alice decides. Its first
        # call alone, twice, is one item (the Idempotency-Key).
        curl = block_find(PAGE, "ID=$(curl").code
        submit = curl.split("\n  | jq")[0].removeprefix("ID=$(").rstrip(" \\")
        answers = [
            json.loads(
                subprocess.run(["bash", "-c", submit], env=env, capture_output=True, text=True, check=True, timeout=30).stdout
            )
            for _ in range(2)
        ]
        assert answers[0]["status"] == "pending" and answers[0]["id"] == answers[1]["id"]
        waiting_curl = subprocess.Popen(["bash", "-eo", "pipefail", "-c", curl], env=env, stdout=subprocess.PIPE, text=True)
        alice = Reviewer(server, "alice", seeded.sessions["alice"])
        time.sleep(1)  # the long-poll is under way (had it not begun, it answers the decided item at once all the same)
        assert alice.decide(answers[0]["id"], "approve")[0] == 200
        decided = json.loads(waiting_curl.communicate(timeout=60)[0])
        assert decided["status"] == "approved" and decided["decision"]["by"] == "alice"

        # Python, as written: it long-polls until alice decides.
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = block_find(PAGE, "import os\n\nimport httpx").code
        example: dict = {}
        waiting = threading.Thread(target=exec, args=(code, example))
        waiting.start()
        item_id = _item_wait(server, token)
        assert alice.decide(item_id, "approve")[0] == 200
        waiting.join(timeout=60)
        assert not waiting.is_alive() and example["decided"]["status"] == "approved"
        assert "approved by alice" in capsys.readouterr().out

        # The receiver half: a webhook the worker delivered passes the page's handler.
        receiver.wait_for(2)
        body, headers = next((b, h) for b, h in receiver.raw if item_id.encode() in b)
        example["on_webhook"](body, headers, receiver.secret)
        assert f"{item_id} approved" in capsys.readouterr().out
    finally:
        server.close()
        receiver.stop()


def _item_wait(server: LiveServer, token: str) -> str:
    """The id of the item the Python example submitted, once it exists."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = httpx.get(
            f"{server.url}/api/v1/items", params={"source": "agent"}, headers={"Authorization": f"Bearer {token}"}
        ).json()["items"]
        python_item = [item for item in found if item["title"] == "Refund 120 EUR" and item["metadata"] == {}]
        if python_item:
            return python_item[0]["id"]
        time.sleep(0.1)
    raise AssertionError("the example's item never appeared")
