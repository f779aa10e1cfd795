"""Named points inside the item and decision paths where tests can inject a delay or a failure.

Nothing happens at a point unless a test installed an action there, or the lab app
(``moderation.lab.faults``, never installed in production unless asked for) did from the
REVIEWQUEUE_FAULTS setting. Production pays one dict lookup per point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = (
    # The guard (moderation.review.decisions), in a reviewer's request:
    "after_item_lock",
    "after_row_lock",
    "before_commit",
    "after_commit",
    "before_response",
    # The worker applying a decision (moderation.review.apply), and the moderation graph's nodes:
    # in_review_node: the resumed node, holding its answer, not yet checkpointed; in_apply_node: the
    # next node, the resume's first checkpoint written.
    "before_resume",
    "after_resume",
    "before_record",
    "in_prescreen_node",
    "in_review_node",
    "in_apply_node",
    # Any graph's run (moderation.core.checkpointer): a step's nodes finished, their writes saved, its checkpoint not yet.
    "before_checkpoint",
    # A LangGraph deployment's item (moderation.review.remote): its thread there resumed, its next round not yet taken.
    "after_remote_resume",
    # The worker starting a queued item (moderation.review.starts): its graph has run, its row not yet written.
    "after_start_run",
    # An agent's outcome report (moderation.review.outcomes): checked under the item's lock, not yet written.
    "outcome_checked",
)

_actions: dict[str, Callable[[str], None]] = {}


def fault_point(name: str, *, item_key: str) -> None:
    action = _actions.get(name)
    if action is not None:
        action(item_key)


@contextmanager
def fault_inject(name: str, action: Callable[[str], None]) -> Iterator[None]:
    """Run ``action(item_key)`` whenever the decision path passes ``name``."""
    fault_install(name=name, action=action)
    try:
        yield
    finally:
        _actions.pop(name, None)


def fault_install(*, name: str, action: Callable[[str], None]) -> None:
    """Run ``action(item_key)`` whenever the decision path passes ``name``, for the rest of the process."""
    _point_check(name)
    _actions[name] = action


def _point_check(name: str) -> None:
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
