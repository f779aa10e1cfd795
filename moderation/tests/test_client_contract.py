"""One contract for the three: the OpenAPI schema the server generates, the Python client, the TypeScript client.

- The TypeScript client's API types (clients/typescript/src/schema.ts) are generated from the
  schema (scripts/openapi_typescript.py) and compiled against (e2e/test_typescript_client.py
  type-checks the package): the committed file must be what the schema generates now, so a
  renamed field, a new enum value or a removed one fails here until it is regenerated, and
  then fails the client's build wherever the client spoke the old shape.
- The Python client is run against a transport that answers from the schema: every request it
  sends goes to a path and method the schema has, with query parameters it declares and JSON
  bodies whose fields and enum values its request schemas allow; every field it reads of an
  answer is one the answer's schema has.
- Every error code either client names (the TypeScript `ErrorCode` union, the Python client's
  comparisons and the codes its docstrings promise) is one the server emits.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import reviewqueue_client.client as python_client
import reviewqueue_client.langgraph as python_glue
from reviewqueue_client import ReviewQueue

ROOT = Path(__file__).resolve().parents[2]
TS_CLIENT = ROOT / "clients" / "typescript" / "src" / "client.ts"
# Codes the clients make themselves, for answers that carry none.
CLIENT_CODES = {"unreachable", "http_error"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    from moderation.api.views import api

    return api.get_openapi_schema()


def _generator():
    spec = importlib.util.spec_from_file_location("openapi_typescript", ROOT / "scripts" / "openapi_typescript.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_typescript_clients_types_are_the_schemas(schema):
    generator = _generator()
    assert generator.TARGET.read_text() == generator.schema_typescript(schema), (
        "clients/typescript/src/schema.ts differs from the OpenAPI schema: run .venv/bin/python scripts/openapi_typescript.py"
    )


def test_the_generator_sees_a_drift(schema):
    """The negative control: a renamed field and a new enum value change the generated types."""
    generator = _generator()
    drifted = json.loads(json.dumps(schema))
    item = drifted["components"]["schemas"]["ItemOut"]["properties"]
    item["external_ids"] = item.pop("external")
    drifted["components"]["schemas"]["OutcomeStatus"]["enum"].append("partly")
    text = generator.schema_typescript(drifted)
    assert text != generator.TARGET.read_text()
    assert "external_ids?:" in text and '"partly"' in text


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in spec:
        spec = schema["components"]["schemas"][spec["$ref"].rsplit("/", 1)[1]]
    return spec


def _conforms(schema: dict[str, Any], spec: dict[str, Any], value: Any, where: str) -> list[str]:
    """Where ``value`` has a field or enum value ``spec`` does not allow (the shapes, not every constraint)."""
    spec = _resolve(schema, spec)
    for key in ("anyOf", "oneOf"):
        if key in spec:
            tries = [_conforms(schema, s, value, where) for s in spec[key]]
            return [] if any(not t for t in tries) else tries[0]
    if "enum" in spec:
        return [] if value in spec["enum"] else [f"{where}: {value!r} not in {spec['enum']}"]
    if isinstance(value, dict) and spec.get("properties"):
        problems = []
        for name, inner in value.items():
            if name not in spec["properties"]:
                problems.append(f"{where}.{name}: no such field")
            else:
                problems += _conforms(schema, spec["properties"][name], inner, f"{where}.{name}")
        return problems
    if isinstance(value, list) and "items" in spec:
        return [p for n, v in enumerate(value) for p in _conforms(schema, spec["items"], v, f"{where}[{n}]")]
    return []


def _sample(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """An answer of component ``name``: each property, as a key-reading guard sees it."""
    return dict.fromkeys(_resolve(schema, {"$ref": f"#/components/schemas/{name}"})["properties"], None)


class _Reads(dict):
    """An answer that records every key read of it (``[]`` and ``get``)."""

    def __init__(self, data: dict[str, Any], log: list[str]) -> None:
        super().__init__(data)
        self.log = log

    def __getitem__(self, key: str) -> Any:
        self.log.append(key)
        return super().get(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.log.append(key)
        return super().get(key, default)


def _operation(schema: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]] | None:
    for template, operations in schema["paths"].items():
        pattern = "^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return template, operations[method.lower()]
    return None


def _python_client_checked(schema: dict[str, Any], run) -> tuple[list[str], list[str]]:
    """Run ``run(client)`` against answers from the schema; (what its requests got wrong, the item fields it read)."""
    problems: list[str] = []
    reads: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        found = _operation(schema, request.method, request.url.path)
        if found is None:
            problems.append(f"{request.method} {request.url.path}: no such operation")
            return httpx.Response(404, json={"error": "not_found", "message": "no"})
        template, op = found
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        problems.extend([f"{template}: query {name!r} not declared" for name in request.url.params if name not in declared])
        if request.content:
            body_spec = op["requestBody"]["content"]["application/json"]["schema"]
            problems.extend(_conforms(schema, body_spec, json.loads(request.content), f"{request.method} {template}"))
        if template.endswith("/webhooks") and request.method == "POST":
            return httpx.Response(201, json=_sample(schema, "WebhookEndpointCreated"))
        if template.endswith("/webhooks"):
            return httpx.Response(200, json={"endpoints": [_sample(schema, "WebhookEndpointOut")]})
        if request.method == "DELETE":
            return httpx.Response(204)
        if template == "/api/v1/items" and request.method == "GET":
            return httpx.Response(200, json={"items": [_sample(schema, "ItemOut")], "next_cursor": None})
        return httpx.Response(200, json=_sample(schema, "ItemOut"))

    original = python_client.Item.of.__func__

    def recording(cls, raw):
        return original(cls, _Reads(raw, reads))

    client = ReviewQueue("http://reviews.test", "token", transport=httpx.MockTransport(handle))
    python_client.Item.of = classmethod(recording)
    try:
        run(client)
    finally:
        python_client.Item.of = classmethod(original)
    return problems, reads


def _python_client_everything(client: ReviewQueue) -> None:
    client.submit(
        title="t",
        body="b",
        source="s",
        ask={"action_requests": []},
        idempotency_key="k",
        external={"thread_id": "t", "interrupt_id": "i", "run_id": "r"},
        team="ops",
        priority=1,
        requested_by="agent",
        context={"summary": "why", "messages": [{"role": "human", "content": "hi"}]},
    )
    list(client.list(status="pending", source="s", external_id="t:i", graph="ask"))
    client.read("00000000-0000-0000-0000-000000000000").outcome  # noqa: B018 - the read is what is checked
    client.wait("00000000-0000-0000-0000-000000000000", timeout=1)
    client.cancel("00000000-0000-0000-0000-000000000000", reason="r")
    for status in ("done", "failed"):
        client.report_outcome("00000000-0000-0000-0000-000000000000", status=status, message="m")
    client.create_webhook(name="n", url="https://example.com/hooks", events=["item.decided"])
    client.webhooks()
    client.delete_webhook(1)


def test_the_python_client_speaks_the_schemas_shapes(schema):
    problems, reads = _python_client_checked(schema, _python_client_everything)
    assert problems == []
    assert set(reads) <= set(schema["components"]["schemas"]["ItemOut"]["properties"]), set(reads)
    assert {"id", "status", "external", "resume", "outcome"} <= set(reads)


def test_the_python_clients_check_sees_a_drift(schema):
    """The negative control: a field the schema does not have, and an enum value it does not allow, are reported."""

    def wrong(client: ReviewQueue) -> None:
        client.submit(title="t", body="b", source="s", idempotency_key="k", externals={"thread_id": "t"})
        client.report_outcome("00000000-0000-0000-0000-000000000000", status="partly", attempts=1)

    problems, _ = _python_client_checked(schema, wrong)
    assert any("externals: no such field" in p for p in problems), problems
    assert any("'partly' not in" in p for p in problems), problems


def _server_codes() -> set[str]:
    """Every string literal of the server's code: the codes it can answer with are among them."""
    literals: set[str] = set()
    for path in (ROOT / "moderation").rglob("*.py"):
        if "tests" not in path.parts:
            literals |= set(re.findall(r"""["']([a-z][a-z_]+)["']""", path.read_text()))
    return literals


def _typescript_codes() -> set[str]:
    union = re.search(r"export type ErrorCode =(.*?);", TS_CLIENT.read_text(), re.S)
    assert union, "client.ts lost its ErrorCode union"
    return set(re.findall(r'"([a-z_]+)"', union.group(1)))


def _python_codes() -> set[str]:
    codes: set[str] = set()
    for module in (python_client, python_glue):
        codes |= set(re.findall(r"""code\s*==\s*["']([a-z_]+)["']""", inspect.getsource(module)))
    for documented in (
        python_client.ReviewQueueError,
        python_client.ReviewQueue.cancel,
        python_client.ReviewQueue.report_outcome,
        python_client.ReviewQueue.create_webhook,
    ):
        codes |= set(re.findall(r"``([a-z][a-z_]+)``", documented.__doc__ or "")) - {"status", "retry_after", "code", "secret"}
    return codes


def test_every_error_code_a_client_names_is_one_the_server_emits():
    server = _server_codes()
    for client, codes in (("typescript", _typescript_codes()), ("python", _python_codes())):
        assert len(codes) >= 5, (client, codes)
        assert codes - CLIENT_CODES - server == set(), f"{client} names codes the server never answers with"
    assert "idempotency_key_reused" in _typescript_codes() & _python_codes()
    assert "no_such_code_anywhere" not in server  # the check can fail


def test_the_typescript_clients_list_filters_are_the_list_operations_parameters(schema):
    """The one request shape the TypeScript client writes by hand (query parameters are not components)."""
    declared = re.search(r"export type ListFilters = \{(.*?)\};", TS_CLIENT.read_text(), re.S)
    assert declared, "client.ts lost its ListFilters"
    filters = set(re.findall(r"(\w+)\?:", declared.group(1)))
    parameters = {p["name"] for p in schema["paths"]["/api/v1/items"]["get"]["parameters"]}
    assert filters and filters <= parameters, filters - parameters
    assert parameters - filters == {"cursor"}  # the client pages by itself
