"""Fixtures for the browser end-to-end tests.

- ``e2e_template`` (session): one migrated database with alice, bob, carol
  (moderators) and dave (viewer); every module's server starts from a copy of it.
- ``server`` (module): a real daphne process on a free port over that fresh copy,
  with the project's settings except for a fast password hasher (e2e/settings.py).
- ``browser`` (module): one headless Chromium per module.
- ``crowd`` (test): logs users in (one browser context each, through the login form),
  and owns their pages: when the test fails it screenshots every open page and the
  server log into e2e/artifacts/<test>/ and says so in the report. Every page of every
  test is watched for Content-Security-Policy violations; any fails the test.

The test process never touches the ORM (no DJANGO_ALLOW_ASYNC_UNSAFE needed): the
database is read from the server's file or through e2e/dbtool.py in a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from e2e.browser import TIMEOUT_MS, chromium_find, chromium_launch, context_new, login
from e2e.pages import RECORDER_JS
from e2e.server import LiveServer

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
E2E_SETTINGS = "e2e.settings"  # the project's settings with a fast password hasher (see there)
expect.set_options(timeout=TIMEOUT_MS)


def _artifact_dir(item: pytest.Item) -> Path:
    return ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid.replace("e2e/", "", 1)).strip("_")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    if report.failed and report.when in ("setup", "call") and "crowd" in getattr(item, "fixturenames", ()):
        report.sections.append(("e2e artifacts", f"screenshots of every open page and the server log: {_artifact_dir(item)}/"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    saved = getattr(config, "_e2e_artifacts", [])
    if saved:
        terminalreporter.section("e2e artifacts")
        for line in saved:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def e2e_template(tmp_path_factory) -> LiveServer:
    template = LiveServer(tmp_path_factory.mktemp("e2e-template"), settings=E2E_SETTINGS)
    template.prepare()
    return template


@asynccontextmanager
async def e2e_server_running(template: LiveServer, workdir: Path, *, env: dict[str, str] | None = None):
    """A server over a fresh copy of the template database (``env`` for its processes only)."""
    live = LiveServer(workdir, settings=E2E_SETTINGS, extra_env=env)
    live.clone_from(template)
    # Two Django start-ups, side by side: the server, and the dbtool process tests talk to.
    await asyncio.gather(live.astart(), live.atool("ping"))
    try:
        yield live
    finally:
        await live.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory, request):
    workdir = tmp_path_factory.mktemp(f"e2e-{request.module.__name__.rsplit('.', 1)[-1]}")
    async with e2e_server_running(e2e_template, workdir) as live:
        yield live


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    async with async_playwright() as playwright:
        try:
            chromium_find(playwright)
        except FileNotFoundError as exc:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"e2e needs a browser in CI: {exc}")
            pytest.skip(str(exc))
        instance = await chromium_launch(playwright)
        try:
            yield instance
        finally:
            await instance.close()


class Crowd:
    """The users of one test, each in their own browser context."""

    def __init__(self, browser: Browser, server: LiveServer) -> None:
        self.browser = browser
        self.server = server
        self.contexts: dict[str, BrowserContext] = {}
        self.csp_violations: list[str] = []

    async def context(self, label: str) -> BrowserContext:
        context = await context_new(self.browser, self.server.url)
        await context.expose_binding(
            "__cspViolation", lambda source, text: self.csp_violations.append(f"{label} {source['page'].url}: {text}")
        )
        await context.add_init_script(RECORDER_JS)
        self.contexts[label] = context
        return context

    async def login(self, username: str, *, label: str | None = None, next_path: str = "") -> Page:
        """A new context logged in as ``username`` through the form; returns its first page,
        on the queue or on ``next_path``.

        ``label`` names a second (third...) context for the same user: another
        browser, another session.
        """
        context = await self.context(label or username)
        return await login(context, username, next_path=next_path)

    async def anonymous(self, label: str = "anonymous") -> Page:
        return await (await self.context(label)).new_page()

    async def page(self, username: str, path: str | None = None) -> Page:
        """Another tab for an already logged-in user."""
        page = await self.contexts[username].new_page()
        if path:
            await page.goto(path)
        return page

    async def screenshots(self, target: Path) -> list[Path]:
        target.mkdir(parents=True, exist_ok=True)
        saved = []
        for label, context in self.contexts.items():
            for n, page in enumerate(context.pages, start=1):
                if page.is_closed():
                    continue
                path = target / f"{label}-{n}.png"
                try:
                    await page.screenshot(path=str(path), full_page=True, timeout=5_000)
                    (target / f"{label}-{n}.url.txt").write_text(page.url + "\n")
                    saved.append(path)
                except Exception as exc:  # noqa: BLE001 - a crashed page must not hide the failure
                    (target / f"{label}-{n}.error.txt").write_text(f"{page.url}\n{exc}\n")
        return saved

    async def close(self) -> None:
        for context in self.contexts.values():
            with contextlib.suppress(Exception):
                await context.close()
        self.contexts.clear()


@pytest_asyncio.fixture(loop_scope="module")
async def crowd(browser, server, request):
    people = Crowd(browser, server)
    try:
        yield people
    finally:
        failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
        if failed:
            target = _artifact_dir(request.node)
            shutil.rmtree(target, ignore_errors=True)
            shots = await people.screenshots(target)
            (target / "server.log").write_text(server.log_tail(400) + "\n")
            line = f"{request.node.nodeid}: {len(shots)} screenshot(s) and server.log in {target}/"
            request.config._e2e_artifacts = [*getattr(request.config, "_e2e_artifacts", []), line]
            print(f"\ne2e: {line}")
        await people.close()
    assert not people.csp_violations, "the browser reported Content-Security-Policy violations:\n" + "\n".join(
        people.csp_violations
    )
