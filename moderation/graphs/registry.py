"""Which graphs an item may run: ``settings.REVIEWQUEUE_GRAPHS``, name → ``"module:callable"``.

The callable takes a LangGraph checkpointer and returns the compiled graph
(``builder.compile(checkpointer=...)``, or ``create_agent(..., checkpointer=...)``).
Every entry is imported when the server starts (``reviewqueue.asgi``) and by Django's system
checks (``moderation.apps``: the worker and most commands run them), so a typo stops the server
and the worker at start-up with the name and the import error, never as a 500 on the first
item. Not at app load: a process that runs no graph (``moderator_add``) never imports LangGraph.

A graph left out altogether (``REVIEWQUEUE_EXTRA_GRAPHS`` forgotten on a restart) cannot be
told from one retired on purpose, so it stops nothing: its items keep their rows and
threads as they are (``graph_loaded`` is false for them), and whatever would run the graph
(the worker's start and apply, ``recover``) leaves them for a process that runs it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULT_GRAPH = "moderation"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

GraphFactory = Callable[[Any], Any]


class UnknownGraph(ValueError):
    pass


def graph_names() -> list[str]:
    return sorted(settings.REVIEWQUEUE_GRAPHS)


def graph_loaded(*, name: str) -> bool:
    """Whether this process runs the graph ``name`` (an item's may have been left out of its registry)."""
    return name in settings.REVIEWQUEUE_GRAPHS


def graph_not_loaded_text(*, name: str) -> str:
    return f"graph {name!r} is not loaded in this process (add it to REVIEWQUEUE_GRAPHS or REVIEWQUEUE_EXTRA_GRAPHS)"


def graph_name_validate(*, name: object) -> str:
    """``name`` if it is registered; ``UnknownGraph`` listing the registered ones otherwise."""
    if name in (None, ""):
        return DEFAULT_GRAPH
    if not isinstance(name, str) or name not in settings.REVIEWQUEUE_GRAPHS:
        raise UnknownGraph(f"unknown graph {name!r}; this server runs {', '.join(graph_names())}")
    return name


def graph_factory(*, name: str) -> GraphFactory:
    path = settings.REVIEWQUEUE_GRAPHS.get(name)
    if path is None:
        raise UnknownGraph(f"unknown graph {name!r}; this server runs {', '.join(graph_names())}")
    return _import(name, path)


def _import(name: str, path: str) -> GraphFactory:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ImproperlyConfigured(f"REVIEWQUEUE_GRAPHS[{name!r}] = {path!r}: expected 'module.path:callable'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ImproperlyConfigured(
            f"REVIEWQUEUE_GRAPHS[{name!r}] = {path!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(factory):
        raise ImproperlyConfigured(f"REVIEWQUEUE_GRAPHS[{name!r}] = {path!r} is not callable")
    return factory


def graphs_check() -> None:
    """Import every registered graph; ``ImproperlyConfigured`` naming the first that fails."""
    graphs = settings.REVIEWQUEUE_GRAPHS
    if DEFAULT_GRAPH not in graphs:
        raise ImproperlyConfigured(f"REVIEWQUEUE_GRAPHS must register the built-in {DEFAULT_GRAPH!r} graph")
    for name, path in graphs.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ImproperlyConfigured(f"REVIEWQUEUE_GRAPHS: {name!r} is not a valid graph name (a-z, 0-9, _)")
        _import(name, path)
