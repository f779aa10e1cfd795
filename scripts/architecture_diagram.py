"""Draw docs/img/architecture.svg from the code: the packages in their layers and the path of one decision.

The layers come from the `layers` contract in `.importlinter`; the arrows between packages are
the imports that exist (grimp, import-linter's own graph builder); each step of a decision's
path is checked against the code (the caller imports the callee's module, which defines the
function). `make docs` runs it before the build:

    python scripts/architecture_diagram.py           # rewrite the SVG
    python scripts/architecture_diagram.py --check   # exit 1 if the committed SVG is stale

A step that no longer matches the code stops the script, naming it: update DECISION_PATH.
"""

from __future__ import annotations

import ast
import configparser
import sys
import tomllib
from dataclasses import dataclass
from html import escape
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
# import-linter reads .importlinter when it exists, else pyproject.toml.
CONFIG = ROOT / ".importlinter" if (ROOT / ".importlinter").exists() else ROOT / "pyproject.toml"
OUTPUT = ROOT / "docs" / "img" / "architecture.svg"


@dataclass(frozen=True)
class Step:
    caller: str  # module that makes the call
    callee: str  # "module:function"
    what: str


# One decision, from the moderator's click to the graph's resume (docs/contributors/architecture.md).
DECISION_PATH = [
    Step("moderation.web.views", "moderation.review.decisions:item_decide", "the POST is translated into a decision"),
    Step("moderation.review.decisions", "moderation.core.locks:item_lock", "the item's in-process lock"),
    Step("moderation.review.decisions", "moderation.delivery.outbox:item_settled_record", "webhooks, in the transaction"),
    Step("moderation.review.decisions", "moderation.review.apply:item_apply_enqueue", "the apply task, in the transaction"),
    Step("moderation.management.commands.db_worker", "moderation.review.apply:item_apply_task", "a worker runs the task"),
    Step("moderation.review.apply", "moderation.core.resumelock:thread_resume_lock", "one resume of a thread at a time"),
    Step("moderation.review.apply", "moderation.graphs.runtime:graph_resume", "the graph resumes"),
    Step("moderation.review.apply", "moderation.delivery.outbox:item_applied_record", "item.applied webhook"),
]


class StaleStep(Exception):
    """A step of DECISION_PATH that the code no longer has."""


def layers_read(config: Path = CONFIG) -> tuple[str, list[list[str]]]:
    """The root package and the layers contract's layers, top first, each a list of packages.

    ``config`` is import-linter's INI file (``.importlinter``) or a ``pyproject.toml`` whose
    ``[tool.importlinter]`` holds the contracts, whichever the project keeps.
    """
    if config.suffix == ".toml":
        settings = tomllib.loads(config.read_text())["tool"]["importlinter"]
        root = settings.get("root_package") or settings["root_packages"][0]
        contracts = [(c.get("type", ""), c.get("layers", [])) for c in settings.get("contracts", [])]
    else:
        parser = configparser.ConfigParser()
        parser.read(config)
        section = parser["importlinter"]
        # The first of root_packages (the others, e.g. reviewqueue, only for the contracts' sources).
        root = (section.get("root_package") or section["root_packages"].split()[0]).strip()
        contracts = [
            (parser[s].get("type", "").strip(), parser[s].get("layers", "").splitlines())
            for s in parser.sections()
            if s.startswith("importlinter:contract:")
        ]
    for kind, lines in contracts:
        if kind == "layers":
            rows = [line.strip() for line in lines if line.strip()]
            return root, [[part.strip() for part in row.replace(":", "|").split("|")] for row in rows]
    raise ValueError(f"{config}: no layers contract")


def imports_between(graph: grimp.ImportGraph, packages: list[str]) -> list[tuple[str, str]]:
    """(importer, imported) for every pair of packages where one imports the other, directly."""
    return sorted(
        (a, b)
        for a in packages
        for b in packages
        if a != b and graph.direct_import_exists(importer=a, imported=b, as_packages=True)
    )


def path_check(graph: grimp.ImportGraph, path: list[Step]) -> None:
    """Raise StaleStep unless each step's caller imports the callee's module and that module defines the function."""
    for number, step in enumerate(path, 1):
        module, function = step.callee.split(":")
        if not graph.direct_import_exists(importer=step.caller, imported=module):
            raise StaleStep(f"step {number}: {step.caller} does not import {module}")
        source = ROOT / (module.replace(".", "/") + ".py")
        defined = {
            node.name for node in ast.parse(source.read_text()).body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        if function not in defined:
            raise StaleStep(f"step {number}: {module} defines no {function}()")


def _package_of(module: str, packages: list[str]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def _short(name: str, root: str) -> str:
    return name.removeprefix(root + ".")


def svg_render(root: str, layers: list[list[str]], imports: list[tuple[str, str]], path: list[Step]) -> str:
    """The diagram as SVG text; the same inputs give the same bytes."""
    left, width, gap, line_h, char = 20, 560, 18, 14, 6.7  # char: a monospace 11px character's width
    packages = [p for row in layers for p in row]
    steps_in: dict[str, list[int]] = {p: [] for p in packages}
    for number, step in enumerate(path, 1):
        package = _package_of(step.callee.split(":")[0], packages)
        if package is not None:
            steps_in[package].append(number)
    out: list[str] = []
    y = 60
    for row in layers:
        w = (width - 12 * (len(row) - 1)) / len(row)
        texts = {p: _wrapped(p, root, imports, int((w - 16) / char)) for p in row}
        h = 30 + line_h * max(len(t) for t in texts.values())
        for i, package in enumerate(row):
            x = left + i * (w + 12)
            fill = "#fdecea" if steps_in[package] else "#eef2f7"
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}" rx="6" fill="{fill}" stroke="#34495e"/>')
            out.append(f'<text x="{x + 8:.1f}" y="{y + 18}" font-weight="bold">{escape(_short(package, root))}</text>')
            for j, numbers in enumerate(steps_in[package]):
                cx = x + w - 14 - 22 * (len(steps_in[package]) - 1 - j)
                out += _badge(cx, y + 14, numbers)
            for k, text in enumerate(texts[package]):
                out.append(f'<text x="{x + 8:.1f}" y="{y + 34 + k * line_h}" font-size="11" fill="#555">{escape(text)}</text>')
        y += h + gap
    sx = left + width + 40
    step_texts = [(f"{_short(s.caller, root)} → {_short(s.callee.replace(':', '.'), root)}()", s.what) for s in path]
    total_w = int(sx + 28 + max(len(t) for t, _ in step_texts) * 7.3 + 20)
    total_h = max(y, 60 + len(path) * 46 + 10)
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total_w} {total_h}" width="{total_w}" height="{total_h}" '
        'font-family="monospace" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="24" font-size="14" font-weight="bold">The packages of {root}, in layers: each imports only below</text>',
        f'<text x="{left}" y="42" fill="#555">generated from .importlinter and the imports by scripts/architecture_diagram.py</text>',
        f'<text x="{sx}" y="24" font-size="14" font-weight="bold">One decision: who calls what</text>',
        f'<text x="{sx}" y="42" fill="#555">each number is also on the package called</text>',
    ]
    for number, (call, what) in enumerate(step_texts, 1):
        top = 60 + (number - 1) * 46
        out += _badge(sx + 10, top + 10, number)
        out.append(f'<text x="{sx + 28}" y="{top + 14}">{escape(call)}</text>')
        out.append(f'<text x="{sx + 28}" y="{top + 31}" fill="#555">{escape(what)}</text>')
    return "\n".join([*head, *out, "</svg>"]) + "\n"


def _badge(cx: float, cy: float, number: int) -> list[str]:
    return [
        f'<circle cx="{cx:.1f}" cy="{cy}" r="9" fill="#c0392b"/>',
        f'<text x="{cx:.1f}" y="{cy + 4}" text-anchor="middle" font-size="11" fill="white">{number}</text>',
    ]


def _wrapped(package: str, root: str, imports: list[tuple[str, str]], columns: int) -> list[str]:
    """The packages ``package`` imports, as "imports a, b, c" wrapped at ``columns`` characters."""
    imported = [_short(b, root) for a, b in imports if a == package]
    if not imported:
        return ["imports none of the others"]
    lines = ["imports"]
    for i, name in enumerate(imported):
        word = name + ("," if i < len(imported) - 1 else "")
        if len(lines[-1]) + 1 + len(word) > columns:
            lines.append(word)
        else:
            lines[-1] += " " + word
    return lines


def diagram_build(config: Path = CONFIG, path: list[Step] = DECISION_PATH) -> str:
    """The SVG for the code as it is now (raises StaleStep if the decision's path has moved)."""
    root, layers = layers_read(config)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # grimp finds the package on the path: this checkout's
    graph = grimp.build_graph(root, cache_dir=None)
    path_check(graph, path)
    return svg_render(root, layers, imports_between(graph, [p for row in layers for p in row]), path)


def main(argv: list[str]) -> int:
    try:
        svg = diagram_build()
    except StaleStep as exc:
        print(f"scripts/architecture_diagram.py: DECISION_PATH {exc}", file=sys.stderr)
        return 1
    if argv == ["--check"]:
        if not OUTPUT.exists() or OUTPUT.read_text() != svg:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run `make docs` and commit it", file=sys.stderr)
            return 1
        return 0
    if not OUTPUT.exists() or OUTPUT.read_text() != svg:
        OUTPUT.write_text(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
