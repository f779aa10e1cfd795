"""Every command and program in the documentation, run exactly as written against a real server.

One server for the whole run (``e2e.server.LiveServer``: daphne and a task worker on a
fresh SQLite database, migrated and given the demo data ``make run`` gives), in the
environment a reader of the docs has after ``make run``:

- ``REVIEWQUEUE_URL``: the server's address (``http://127.0.0.1:8000`` under ``make run``);
- ``REVIEWQUEUE_TOKEN``: an API client's token (``manage.py apiclient_create``);
- ``REVIEWQUEUE_SESSION``, ``REVIEWQUEUE_CSRF``: a logged-in moderator's (alice's) session
  cookie and CSRF token, for the session endpoint;
- ``DATABASE_URL`` and ``DEBUG=true``: what ``manage.py`` reads.

Shell blocks run in ``bash -eo pipefail`` and Python blocks in the project's interpreter,
both from the repository root, one after another in the site's order (a page's blocks may
build on the ones above them, as its reader does). Markers above a block (see
``docs_examples``) skip it with a reason, hand it to the test that runs it, or state the
exit status and output it must show.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from e2e.server import LiveServer
from moderation.tests.docs_examples import ROOT, Block, all_blocks, block_find, page_blocks, pages
from moderation.tests.real_server import CSRF

pytestmark = [pytest.mark.timeout(900)]

BLOCKS = all_blocks()
RUN_HERE = [b for b in BLOCKS if b.runs and not b.skip and not b.runs_in]


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("docs-site"), extra_env={"DECISION_RATE_LIMIT": "0"})
    seeded = server.seed(users=["alice"], items=0)
    server.manage("seed_demo", timeout=300)
    token = server.manage("apiclient_create", "docs").strip()
    server.start(timeout=300)  # a hang guard: start-ups take minutes on a loaded machine
    server.worker_start()
    env = {
        **server.env(),
        "REVIEWQUEUE_URL": server.url,
        "REVIEWQUEUE_TOKEN": token,
        "REVIEWQUEUE_SESSION": seeded.sessions["alice"],
        "REVIEWQUEUE_CSRF": CSRF,
        # The client package of this checkout, whichever one .venv's editable install points at.
        "PYTHONPATH": str(ROOT / "reviewqueue-client"),
    }
    try:
        yield env
    finally:
        server.close()


def block_problems(block: Block, env: dict[str, str]) -> list[str]:
    """Run ``block`` as a reader would; what went other than its markers say (nothing: it passed)."""
    if block.language == "bash":
        cmd = ["bash", "-eo", "pipefail", "-c", block.code]
    else:
        script = Path(tempfile.mkdtemp(prefix="docs-example-")) / "example.py"
        script.write_text(block.code)
        cmd = [sys.executable, str(script)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    problems = [f"exited {done.returncode}, expected {block.status}"] if done.returncode != block.status else []
    problems += [f"{text!r} not in its output" for text in block.expect if text not in output]
    return [f"{block.id}: {problem}:\n{output[-4000:]}" for problem in problems]


@pytest.mark.parametrize("block", RUN_HERE, ids=[b.id for b in RUN_HERE])
def test_the_docs_example_runs_as_written(block, docs_env):
    problems = block_problems(block, docs_env)
    assert not problems, "\n".join(problems)


def test_the_readmes_tour_submits_an_item_as_written(docs_env):
    """The front door's one command block (README, "A five-minute tour", step 3), run as
    written but at the test server's address instead of ``make run``'s port 8000."""
    block = block_find("../README.md", "export REVIEWQUEUE_URL=")
    assert "http://127.0.0.1:8000" in block.code
    tour = replace(
        block,
        code=block.code.replace("http://127.0.0.1:8000", docs_env["REVIEWQUEUE_URL"]),
        expect=['"title": "Hello"', '"status": "pending"'],
    )
    problems = block_problems(tour, docs_env)
    assert not problems, "\n".join(problems)


def test_the_agents_page_registers_its_endpoint_and_its_service_resumes_once_and_reports(docs_env, tmp_path):
    """integrators/agents.md as written: the client registers its own endpoint (the server allows
    127.0.0.1, as the page says it must); the service asks, alice approves, it resumes its agent,
    reports the outcome and stops."""
    import httpx

    from e2e.server import free_port
    from reviewqueue_client import ReviewQueue

    env = {**docs_env, "AGENT_PORT": str(free_port())}
    register = block_find("integrators/agents.md", "import os\n\nfrom reviewqueue_client import ReviewQueue\n")
    service = block_find("integrators/agents.md", "import os, sqlite3\n")
    (tmp_path / "register.py").write_text(register.code)
    (tmp_path / "service.py").write_text(service.code)
    registered = subprocess.run(
        [sys.executable, "register.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert registered.returncode == 0, registered.stderr
    env["REVIEWQUEUE_WEBHOOK_SECRET"] = registered.stdout.strip().splitlines()[-1]
    agent = subprocess.Popen(
        [sys.executable, "service.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    reviews = ReviewQueue(env["REVIEWQUEUE_URL"], env["REVIEWQUEUE_TOKEN"])
    try:
        asked = agent.stdout.readline()
        assert asked.startswith("asked: "), asked + agent.stdout.read()
        item = asked.split()[-1]
        decided = httpx.post(
            f"{env['REVIEWQUEUE_URL']}/api/items/{item}/decision",
            json={"decision": "approve"},
            headers={
                "X-CSRFToken": env["REVIEWQUEUE_CSRF"],
                "Cookie": f"sessionid={env['REVIEWQUEUE_SESSION']}; csrftoken={env['REVIEWQUEUE_CSRF']}",
            },
            timeout=60,
        )
        assert decided.status_code == 200, decided.text
        output = agent.communicate(timeout=240)[0]
        assert agent.returncode == 0 and "resumed; outcome reported: True" in output, output
        assert reviews.read(item).outcome["status"] == "done"
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        for endpoint in reviews.webhooks():
            reviews.delete_webhook(endpoint.id)
        reviews.close()


def _client_public_api() -> set[str]:
    """Every public name of the client package: its modules' functions, classes, constants, and their members."""
    import dataclasses
    import importlib
    import inspect

    names: set[str] = set()
    for module_name in ("client", "webhooks", "langgraph", "aio_langgraph", "locks", "blocking"):
        module = importlib.import_module(f"reviewqueue_client.{module_name}")
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", module.__name__) == module.__name__
            if name.startswith("_") or not defined_here or inspect.ismodule(value) or name in ("annotations", "logger"):
                continue
            names.add(name)
            if inspect.isclass(value):
                names |= {n for n in vars(value) if not n.startswith("_")}
                names |= {f.name for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
                if not issubclass(value, Exception):
                    names |= {n for n in inspect.signature(value).parameters if n not in ("args", "kwargs")}
            elif inspect.isfunction(value):
                names |= {n for n in inspect.signature(value).parameters if n not in ("args", "kwargs")}
    return names


def test_the_client_page_names_the_whole_public_api():
    """integrators/client.md is the package's reference: each public function, class, method,
    field, parameter and constant is named there, in code."""
    page = (ROOT / "docs" / "integrators" / "client.md").read_text()
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```$", flags=re.S | re.M)
    spans = fenced.findall(page) + re.findall(r"`([^`\n]+)`", fenced.sub("", page))
    in_code = {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
    missing = sorted(_client_public_api() - in_code)
    assert not missing, f"not on integrators/client.md: {missing}"


def test_every_block_that_is_not_run_here_says_why_or_where():
    """A skip has its reason (the parser refuses one without), and a block run elsewhere
    names a test module that exists and reads that page."""
    for block in BLOCKS:
        if block.runs_in:
            module = ROOT / block.runs_in
            assert module.is_file(), f"{block.id}: {block.runs_in} does not exist"
            assert block.page in module.read_text(), f"{block.id}: {block.runs_in} never reads {block.page}"
        if block.skip:
            assert len(block.skip) > 10, f"{block.id}: say why it is not run"


def test_the_marker_parser_sees_a_block_and_its_markers(tmp_path, monkeypatch):
    """The negative control: a page with an unmarked, a skipped and an expected-failure block
    is read as such (so a block cannot slip through the runner unseen)."""
    import moderation.tests.docs_examples as docs_examples

    (tmp_path / "p.md").write_text(
        "```sh\nfalse\n```\n\n<!-- docs-test: skip — runs forever -->\n```sh\nmake run\n```\n\n"
        "<!-- docs-test: status 1 -->\n<!-- docs-test: expect nope -->\n```bash\necho nope; exit 1\n```\n\n"
        "```ini\n[Service]\n```\n"
    )
    monkeypatch.setattr(docs_examples, "DOCS", tmp_path)
    first, skipped, failing, config = page_blocks("p.md")
    assert (first.runs, first.skip, first.status) == (True, "", 0)
    assert skipped.skip == "runs forever"
    assert (failing.status, failing.expect) == (1, ["nope"])
    assert not config.runs
    (tmp_path / "q.md").write_text("<!-- docs-test: skip -->\n```sh\nmake run\n```\n")
    with pytest.raises(docs_examples.DocsMarkerError):
        page_blocks("q.md")


def test_the_runner_sees_a_failing_command_and_a_changed_answer():
    """The negative control: a command that fails, and one whose answer is not what the page
    says, are each reported (so a renamed flag or a changed answer cannot pass unseen)."""
    env = {"PATH": "/usr/bin:/bin"}
    failing = Block(page="control.md", line=1, language="bash", code="ls --no-such-flag\necho done\n")
    changed = Block(page="control.md", line=5, language="bash", code="echo hello\n", expect=["goodbye"])
    python = Block(page="control.md", line=9, language="python", code="raise SystemExit(3)\n")
    reported = block_problems(failing, env)
    assert len(reported) == 1 and "control.md:1: exited 2, expected 0" in reported[0] and "done" not in reported[0]
    assert "'goodbye' not in its output" in block_problems(changed, env)[0]
    assert "exited 3, expected 0" in block_problems(python, env)[0]
    assert block_problems(Block(page="control.md", line=1, language="bash", code="echo goodbye\n", expect=["goodbye"]), env) == []


def test_every_page_is_read():
    assert "moderators/index.md" in pages() and len(BLOCKS) > 10


def test_the_api_reference_renders_every_operation_and_schema_of_the_running_code():
    """The docs build's hook (scripts/docs_api_reference.py) on the schema django-ninja generates
    now: every path and method, parameter and schema is on the page; and a schema it was not
    given is not (the page is the schema's, not a copy)."""
    import importlib.util

    from moderation.api.views import api

    spec = importlib.util.spec_from_file_location("docs_api_reference", ROOT / "scripts" / "docs_api_reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    schema = api.get_openapi_schema()
    page = hook.schema_render(schema)
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            assert f"## {method.upper()} `{path}`" in page
            for parameter in op.get("parameters", []):
                assert f"| `{parameter['name']}` |" in page
    for name in schema["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in page
    schema["paths"].pop("/api/v1/items:batch")
    assert "`/api/v1/items:batch`" not in hook.schema_render(schema)


def _distribution_of(module: str) -> str:
    """The installed distribution whose files hold ``module`` (``langgraph`` alone is a namespace of several);
    the client package's, installed editable from this checkout, by its pyproject.toml."""
    import importlib
    import importlib.metadata as metadata
    import tomllib

    client = tomllib.loads((ROOT / "reviewqueue-client" / "pyproject.toml").read_text())
    if module.partition(".")[0] in client["tool"]["setuptools"]["packages"]:
        return client["project"]["name"]
    path = Path(importlib.import_module(module).__file__).resolve()
    top = module.partition(".")[0]
    for name in metadata.packages_distributions().get(top, []):
        if any(Path(metadata.distribution(name).locate_file(f)).resolve() == path for f in metadata.files(name) or []):
            return metadata.distribution(name).metadata["Name"].lower()
    raise LookupError(f"no installed distribution holds {module}")


def _installed_by(requirements: list[str]) -> set[str]:
    """The distributions ``pip install`` of ``requirements`` brings in: each, and what each requires (its extras named)."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        wanted = todo.pop()
        name = canonicalize_name(wanted.name)
        if name in seen:
            continue
        seen.add(name)
        for raw in metadata.requires(name) or []:
            needed = Requirement(raw)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in wanted.extras or [""]):
                todo.append(needed)
    return seen


def _imports(code: str) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {m for m in found if m.partition(".")[0] not in sys.stdlib_module_names}


def test_the_agents_pages_install_line_brings_every_package_its_programs_import_at_the_pinned_versions():
    """agents.md's service stopped at "No module named 'langgraph.checkpoint.sqlite'": its install line
    (not run here: it installs into the reader's own environment) lacked langgraph-checkpoint-sqlite."""
    line = block_find("integrators/agents.md", "pip install ").code
    requirements = [r.strip('"').replace("./reviewqueue-client", "reviewqueue-client") for r in line.split()[2:]]
    runtime = (ROOT / "requirements" / "runtime.in").read_text().split()
    assert [r for r in requirements if "==" in r and r not in runtime] == [], "pinned as make install pins them"
    installed = _installed_by(requirements)
    programs = [b for b in page_blocks("integrators/agents.md") if b.language == "python"]
    imported = set().union(*(_imports(b.code) for b in programs))
    assert "langgraph.checkpoint.sqlite" in imported
    assert sorted(m for m in imported if _distribution_of(m) not in installed) == []
    # The negative control: the line as it was, without the SQLite checkpointer.
    before = [r for r in requirements if not r.startswith("langgraph-checkpoint-sqlite")]
    assert _distribution_of("langgraph.checkpoint.sqlite") not in _installed_by(before)
