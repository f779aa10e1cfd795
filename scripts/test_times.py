"""Where a `make test` run's time went, per test file: the JUnit XML each pass leaves in var/test-results/.

    .venv/bin/python scripts/test_times.py [--top N]

Prints a Markdown table, longest first: each file's summed test time (set-up, call and
tear-down) in each pass, and its number of tests. Times are wall-clock seconds inside one
xdist worker, so they add up to about twice a pass's own duration on two workers.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "test-results"


def times_per_file(path: Path) -> dict[str, tuple[float, int]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split("::")[0]
        parts = module.split(".")
        # classname is dotted: the module path, then a class name if the test has one.
        while parts and not (ROOT / Path(*parts).with_suffix(".py")).exists():
            parts.pop()
        name = str(Path(*parts).with_suffix(".py")) if parts else module
        totals[name][0] += float(case.get("time", 0))
        totals[name][1] += 1
    return {name: (seconds, int(count)) for name, (seconds, count) in totals.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    passes = {p.stem: times_per_file(p) for p in sorted(RESULTS.glob("*.xml"))}
    if not passes:
        print(f"no results in {RESULTS}: run make test first", file=sys.stderr)
        return 1
    files = {name for times in passes.values() for name in times}
    ranked = sorted(files, key=lambda f: -sum(t.get(f, (0.0, 0))[0] for t in passes.values()))
    print("| file | " + " | ".join(f"{name} s (tests)" for name in passes) + " |")
    print("|---|" + "---:|" * len(passes))
    for name in ranked[: args.top]:
        cells = [f"{t[name][0]:.0f} ({t[name][1]})" if name in t else "" for t in passes.values()]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    totals = [f"{sum(s for s, _ in t.values()):.0f} ({sum(c for _, c in t.values())})" for t in passes.values()]
    print("| all | " + " | ".join(totals) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
