"""MkDocs hook: the API reference page rendered from the OpenAPI schema django-ninja generates.

The schema is exported once per build (``manage.py export_openapi_schema``, in a child
process, so the docs build never imports Django itself) and rendered into Markdown where
the page holds the marker. Nothing on the page restates a path, field or status by hand,
so the reference cannot drift from the code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = "integrators/api-reference.md"
MARKER = "<!-- openapi: generated at build time from moderation.api.views.api -->"
API = "moderation.api.views.api"

_schema: dict[str, Any] | None = None


def schema_export() -> dict[str, Any]:
    """The OpenAPI schema of /api/v1, as the running code generates it."""
    env = {**os.environ, "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "reviewqueue.settings"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "export_openapi_schema", "--api", API],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"export_openapi_schema failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def on_pre_build(config: Any) -> None:
    global _schema
    _schema = schema_export()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise RuntimeError(f"{PAGE} lost its marker {MARKER!r}")
    return markdown.replace(MARKER, schema_render(_schema or schema_export()))


def schema_render(schema: dict[str, Any]) -> str:
    """Markdown for every operation (in the schema's order), then every schema it names."""
    out: list[str] = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            out += _operation(method.upper(), path, op)
    out += ["## Schemas", ""]
    for name, component in schema["components"]["schemas"].items():
        out += _component(name, component)
    return "\n".join(out)


def _anchor(name: str) -> str:
    return f"schema-{name.lower()}"


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in spec:
            return " or ".join(_type(s) for s in spec[key])
    if "enum" in spec:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if kind == "object" and "additionalProperties" in spec and isinstance(spec["additionalProperties"], dict):
        return f"object of {_type(spec['additionalProperties'])}"
    if "format" in spec:
        return f"{kind} ({spec['format']})"
    return "null" if kind == "null" else kind


_LIMITS = {
    "minLength": "length ≥ {}",
    "maxLength": "length ≤ {}",
    "minimum": "≥ {}",
    "maximum": "≤ {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
    "minItems": "items ≥ {}",
    "maxItems": "items ≤ {}",
}


def _notes(spec: dict[str, Any]) -> str:
    parts = [spec.get("description", "").strip()]
    for s in [spec, *spec.get("anyOf", [])]:
        parts += [text.format(s[key]) for key, text in _LIMITS.items() if key in s]
    if "default" in spec:
        parts.append(f"default `{json.dumps(spec['default'])}`")
    return _cell("; ".join(p for p in parts if p))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"## {method} `{path}`", ""]
    if op.get("summary"):
        out += [f"*{op['summary']}*", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    auth = [name for requirement in op.get("security", []) for name in requirement]
    out += [f"Authentication: {', '.join(auth) if auth else 'none'} (`Authorization: Bearer <token>`).", ""]
    if op.get("parameters"):
        out += ["| parameter | in | required | type | notes |", "|---|---|---|---|---|"]
        for p in op["parameters"]:
            spec = p.get("schema", {})
            notes = _cell("; ".join(x for x in (p.get("description", ""), _notes(spec)) if x))
            out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | {_type(spec)} | {notes} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        spec = body["content"]["application/json"]["schema"]
        out += [f"Request body ({'required' if body.get('required') else 'optional'}): {_type(spec)}", ""]
    out += ["| status | body | meaning |", "|---|---|---|"]
    for status, response in op.get("responses", {}).items():
        content = response.get("content", {}).get("application/json")
        kind = _type(content["schema"]) if content else "none"
        out.append(f"| {status} | {kind} | {_cell(response.get('description', ''))} |")
    return [*out, ""]


def _component(name: str, spec: dict[str, Any]) -> list[str]:
    out = [f"### {name} {{#{_anchor(name)}}}", ""]
    if spec.get("description"):
        out += [spec["description"].strip(), ""]
    if "enum" in spec:
        return [*out, _type(spec), ""]
    properties = spec.get("properties", {})
    if not properties:
        return [*out, f"Type: {_type(spec)}", ""]
    required = set(spec.get("required", []))
    out += ["| field | type | required | notes |", "|---|---|---|---|"]
    for field, field_spec in properties.items():
        out.append(f"| `{field}` | {_type(field_spec)} | {'yes' if field in required else 'no'} | {_notes(field_spec)} |")
    return [*out, ""]
