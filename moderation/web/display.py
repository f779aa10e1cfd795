"""What a submitter or an agent sent (an item's metadata, an action's arguments), as its reader sees it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from moderation.graphs.asks import ActionEdit

# CommonMark without raw HTML (shown as text) or images (no request leaves the page for them);
# markdown-it refuses javascript:, vbscript:, file: and data: links.
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).disable("image")


def value_display(value: Any) -> str:
    """A string as it is; anything else as JSON, an object or a list indented a level per nesting.

    The templates escape it and keep its line breaks (CSS ``white-space: pre-wrap``).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)) and value:
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def metadata_display(metadata: dict[str, Any]) -> list[tuple[str, str]]:
    """An item's metadata (a JSON object: the API refuses anything else) as (key, value) lines, in its own order."""
    return [(str(key), value_display(value)) for key, value in metadata.items()]


def _langchain_call_lines(name: str) -> re.Pattern[str]:
    # LangChain's HumanInTheLoopMiddleware ends a description it writes itself with the call:
    # "Tool execution requires approval\n\nTool: <name>\nArgs: {...}"; the page shows the call on its own.
    return re.compile(rf"(?:^|\n\n?)Tool: {re.escape(name)}\nArgs: [^\n]*(?=\n|\Z)")


def tool_description_display(*, name: str, description: str) -> str:
    """An action's description without the tool name and arguments LangChain repeats in it."""
    return _langchain_call_lines(name).sub("", description).strip()


def ask_body_display(*, body: str, actions: list[dict[str, Any]], ask: Any) -> str:
    """An agent's item body as its page shows it beside its actions: "" when it only repeats their calls
    (what ``interrupts_forward`` sends: "<tool>: <description>", or, before, the whole ask as JSON)."""
    try:
        if json.loads(body) == ask:
            return ""
    except ValueError:
        pass
    rest = body
    for action in actions:
        rest = _langchain_call_lines(action["name"]).sub("", rest)
    shown = set()
    for action in actions:
        description = tool_description_display(name=action["name"], description=action.get("description") or "")
        args = json.dumps(action.get("args"), ensure_ascii=False)
        shown |= {action["name"], f"{action['name']}: {description}", f"{action['name']}: {args}", *description.splitlines()}
    lines = [line for line in rest.splitlines() if line.strip() and line.strip() not in shown]
    return body if lines else ""


@dataclass(frozen=True)
class ContextMessage:
    role: str
    content: str
    name: str = ""


@dataclass(frozen=True)
class AskContext:
    """Why an agent asks, for its item's page: its summary as HTML, its messages as plain text."""

    summary_html: SafeString
    messages: list[ContextMessage]


def ask_context_display(*, context: dict[str, Any] | None) -> AskContext | None:
    """An ask's ``context`` (checked at submit) ready to render; None when there is nothing to show."""
    if not context or not (context.get("summary") or context.get("messages")):
        return None
    summary = context.get("summary") or ""
    return AskContext(
        summary_html=mark_safe(_MARKDOWN.render(summary)) if summary else SafeString(""),  # noqa: S308 - raw HTML is off
        messages=[
            ContextMessage(role=m["role"], content=m["content"], name=m.get("name") or "") for m in context.get("messages") or []
        ],
    )


@dataclass(frozen=True)
class ChangeShown:
    arg: str
    kind: str  # changed, added, removed
    before: str  # "" for an added argument
    after: str  # "" for a removed one


@dataclass(frozen=True)
class EditShown:
    """An edit's changes as its diff table shows them (``ask_edits_diff``'s values, readable)."""

    action: str
    changes: list[ChangeShown]


def edits_display(*, edits: list[ActionEdit] | tuple[ActionEdit, ...]) -> list[EditShown]:
    return [
        EditShown(
            action=edit.action,
            changes=[
                ChangeShown(
                    arg=c.arg,
                    kind=c.kind.value,
                    before="" if c.kind == "added" else value_display(c.before),
                    after="" if c.kind == "removed" else value_display(c.after),
                )
                for c in edit.changes
            ],
        )
        for edit in edits
    ]
