"""Agents in their own OS processes (``e2e/remote_agent.py``) for the tests: start, read what they say, kill.

Each process prints ``serving`` once its webhook server listens and ``ready [...]`` once it
has reconciled (its ask forwarded, a decision already made resumed); ``effects`` reads the
tool's runs from its directory, what the tests count.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from e2e.children import children_adopt
from e2e.server import ROOT, LiveServer
from moderation.lab.waits import progress_wait


class AgentProcess:
    """One ``remote_agent.py`` process (or ``script``, which says the same: ``async_agent.py``; or ``command``,
    a program that does: the TypeScript client's agent service, run in ``cwd`` with ``env`` added) on
    ``workdir`` (replicas share one), answering webhooks on ``port``."""

    def __init__(
        self,
        *,
        server: LiveServer,
        workdir: Path,
        port: int,
        token: str,
        secret: str,
        thread: str = "support-thread-1",
        flags: tuple[str, ...] = (),
        script: str = "remote_agent.py",
        command: tuple[str, ...] | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        env = {
            **os.environ,
            "REVIEWQUEUE_URL": server.url,
            "REVIEWQUEUE_TOKEN": token,
            "REVIEWQUEUE_WEBHOOK_SECRET": secret,
            "PYTHONPATH": f"{ROOT / 'reviewqueue-client'}{os.pathsep}{ROOT}",
            **(env or {}),
        }
        self.workdir = workdir
        self.port = port
        self.process = subprocess.Popen(
            [
                *(command or (sys.executable, str(ROOT / "e2e" / script))),
                "--port",
                str(port),
                "--dir",
                str(workdir),
                "--thread",
                thread,
                *flags,
            ],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        children_adopt(self.process)
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            self._lines.put(line.strip())
        self._lines.put(None)

    def said(self, word: str, *, timeout: float = 120) -> str:
        """The next line starting with ``word`` (its start-up imports LangChain: seconds on a busy machine)."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the agent did not say {word!r} in {timeout} s:\n{''.join(self.output)}") from None
            if line is None:
                raise AssertionError(f"the agent exited ({self.process.wait()}) before saying {word!r}:\n{''.join(self.output)}")
            if line.startswith(word):
                return line

    def ready(self) -> list[bool]:
        """Once reconciled: for each decision it found already made, whether it resumed its thread with it."""
        return json.loads(self.said("ready").removeprefix("ready"))

    def resumes(self, *, at_least: int) -> list[bool]:
        """Each webhook and long-poll it acted on so far (at least ``at_least`` of them): did it resume."""
        said = progress_wait(
            lambda: [line for line in self.output if line.startswith("resumed")],
            done=lambda lines: len(lines) >= at_least,
            stall=60,
        )
        assert len(said) >= at_least, "".join(self.output)
        return [line.split()[1] == "true" for line in said]

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing of it runs on."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def agent_effects(workdir: Path) -> list[dict]:
    """Every run of the agent's tool in ``workdir``, in order: its arguments."""
    path = workdir / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
