"""What a submitter or an agent sent (an item's metadata, an action's arguments), as its reader sees it."""

from __future__ import annotations

import json
from typing import Any


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
