"""Named points inside the item and decision paths where tests can inject a delay or a failure.

Nothing happens at a point unless a test installed an action there, or the
REVIEWQUEUE_FAULTS setting names it (for crash tests of a real server process:
``after_resume:kill`` SIGKILLs the process there, ``after_row_lock:sleep=2``
stalls). Production pays one dict lookup per point.
"""

from __future__ import annotations

import os
import signal
import time
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
    _point_check(name)
    _actions[name] = action
    try:
        yield
    finally:
        _actions.pop(name, None)


def faults_install_from_setting(spec: str) -> None:
    """Install actions from a spec like ``before_commit:kill,after_row_lock:sleep=0.5``."""
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition(":")
        _point_check(name)
        if action == "kill":
            _actions[name] = _kill
        elif action.startswith("sleep="):
            seconds = float(action.removeprefix("sleep="))
            _actions[name] = _sleeper(seconds)
        else:
            raise ValueError(f"unknown fault action {action!r} for {name}; use kill or sleep=SECONDS")


def _sleeper(seconds: float) -> Callable[[str], None]:
    return lambda key: time.sleep(seconds)


def _kill(item_key: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _point_check(name: str) -> None:
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
