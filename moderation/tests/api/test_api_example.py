"""The README's "Use it from your system" example, run as written against real processes.

A daphne server, a webhook worker and a receiver; the README's curl call and its Python
(httpx) code are taken from README.md itself, so the example cannot drift from the API.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import httpx
import pytest

from e2e.server import ROOT, LiveServer
from moderation.tests.real_server import Reviewer
from moderation.tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.timeout(120)]

_ENDPOINT = """
from moderation.models import WebhookEndpoint
print("SECRET " + WebhookEndpoint.objects.create(name="example", url={url!r}, events=["item.decided"]).secret)
"""


def _readme_block(starts_with: str, language: str) -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(rf"```{language}\n(.*?)```", readme, flags=re.S)
    return next(block for block in blocks if block.startswith(starts_with))


def test_the_readme_example_submits_waits_and_receives_the_decision(tmp_path, capsys):
    receiver = Receiver().start()
    server = LiveServer(tmp_path / "site", extra_env={"DECISION_RATE_LIMIT": "0"})
    seeded = server.seed(users=["alice"], items=0)
    receiver.secret = server.manage("shell", "-c", _ENDPOINT.format(url=receiver.url)).split("SECRET ")[1].strip()
    token = server.manage("apiclient_create", "pipeline").strip()
    server.start()
    server.worker_start()
    try:
        # curl, as written (the first call, and the same call again: one item).
        curl = _readme_block("TOKEN=", "sh").split("\n", 1)[1].split("# ->")[0]
        curl = curl.replace("http://127.0.0.1:8000", server.url)
        answers = [
            json.loads(subprocess.run(["bash", "-c", curl], env={"TOKEN": token, "PATH": "/usr/bin:/bin"},
                                      capture_output=True, text=True, check=True, timeout=30).stdout)
            for _ in range(2)
        ]
        assert answers[0]["status"] == "pending" and answers[0]["id"] == answers[1]["id"]

        # Python, as written: it long-polls until alice decides.
        code = _readme_block("import httpx", "python").replace("http://127.0.0.1:8000", server.url)
        example: dict = {"TOKEN": token}
        waiting = threading.Thread(target=exec, args=(code, example))
        waiting.start()
        alice = Reviewer(server, "alice", seeded.sessions["alice"])
        item_id = _item_wait(server, token)
        assert alice.decide(item_id, "approve")[0] == 200
        waiting.join(timeout=60)
        assert not waiting.is_alive() and example["decided"]["status"] == "approved"
        assert "approved by alice" in capsys.readouterr().out

        # The receiver half: the webhook the worker delivered passes the README's handler.
        receiver.wait_for(1)
        body, headers = receiver.raw[0]
        example["on_webhook"](body, headers, receiver.secret)
        assert f"{item_id} approved" in capsys.readouterr().out
    finally:
        server.close()
        receiver.stop()


def _item_wait(server: LiveServer, token: str) -> str:
    """The id of the item the Python example submitted, once it exists."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = httpx.get(f"{server.url}/api/v1/items", params={"source": "agent"},
                          headers={"Authorization": f"Bearer {token}"}).json()["items"]
        python_item = [item for item in found if item["title"] == "Refund 120 EUR" and item["metadata"] == {}]
        if python_item:
            return python_item[0]["id"]
        time.sleep(0.1)
    raise AssertionError("the example's item never appeared")
