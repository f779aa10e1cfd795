"""Named points inside the decision path where tests can inject a delay or a failure.

Nothing happens at a point unless a test installed an action there, so production
pays one dict lookup per point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = ("after_item_lock", "after_row_lock", "in_apply_node", "after_graph_resume", "before_commit")

_actions: dict[str, Callable[[str], None]] = {}


def fault_point(name: str, *, item_key: str) -> None:
    action = _actions.get(name)
    if action is not None:
        action(item_key)


@contextmanager
def fault_inject(name: str, action: Callable[[str], None]) -> Iterator[None]:
    """Run ``action(item_key)`` whenever the decision path passes ``name``."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
    _actions[name] = action
    try:
        yield
    finally:
        _actions.pop(name, None)
