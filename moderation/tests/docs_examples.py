"""The code blocks of the documentation (``docs/**/*.md``), read the way the docs tests run them.

A fenced block in one of ``RUN_LANGUAGES`` is a command or program a reader will run, so
the tests run it (``test_docs.py``) unless HTML comments right above its fence say
otherwise, each on its own line:

- ``<!-- docs-test: skip — <reason> -->``: never run (a server that runs until Ctrl-C, a
  systemd unit); the reason is required.
- ``<!-- docs-test: runs in <path> -->``: run, exactly as written, by that test module,
  which reads the block from here (its path must exist and name the page).
- ``<!-- docs-test: status N -->``: the exit status expected (0 otherwise).
- ``<!-- docs-test: expect <text> -->``: text its output (stdout and stderr) must contain.

Blocks in other languages (``text``, ``ini``, ``nginx``, ``yaml``, ``jsonc``...) are
configuration or output shown to the reader, not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUN_LANGUAGES = {"sh": "bash", "bash": "bash", "shell": "bash", "python": "python", "py": "python"}

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*$")
_MARKER = re.compile(r"^\s*<!-- docs-test: (?P<what>skip|runs in|status|expect)\b\s*(?P<arg>.*?)\s*-->\s*$")


class DocsMarkerError(ValueError):
    """A docs-test marker that cannot be honoured (a skip without a reason, an unknown marker)."""


@dataclass
class Block:
    page: str  # relative to docs/
    line: int  # of the opening fence, 1-based
    language: str  # "bash" or "python" for blocks that run; the fence's word otherwise
    code: str
    skip: str = ""
    runs_in: str = ""
    status: int = 0
    expect: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in ("bash", "python")


def pages() -> list[str]:
    """Every page under docs/, in the site's navigation order first (mkdocs.yml), then the rest by name."""
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    every = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    return [p for p in nav if p in every] + [p for p in every if p not in nav]


def page_blocks(page: str) -> list[Block]:
    """The fenced blocks of one page, with the markers right above each."""
    lines = (DOCS / page).read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, word = opening["indent"], opening["lang"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        block = Block(page=page, line=i + 1, language=RUN_LANGUAGES.get(word, word or "text"), code=code)
        _markers_apply(block, lines, i)
        blocks.append(block)
        i = end + 1
    return blocks


def _markers_apply(block: Block, lines: list[str], fence: int) -> None:
    above = fence - 1
    while above >= 0 and lines[above].strip().startswith("<!-- docs-test"):
        marker = _MARKER.match(lines[above])
        if not marker:
            raise DocsMarkerError(f"{block.id}: unknown docs-test marker {lines[above].strip()!r}")
        what, arg = marker["what"], marker["arg"].lstrip("—-: ").strip()
        if what == "skip":
            if not arg:
                raise DocsMarkerError(f"{block.id}: a skip needs its reason")
            block.skip = arg
        elif what == "runs in":
            block.runs_in = arg
        elif what == "status":
            block.status = int(arg)
        else:
            block.expect.append(arg)
        above -= 1


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in page_blocks(page)]


def block_find(page: str, starts_with: str) -> Block:
    """The block of ``page`` whose code starts with ``starts_with`` (for the tests that run a block themselves)."""
    found = [b for b in page_blocks(page) if b.code.startswith(starts_with)]
    if len(found) != 1:
        raise LookupError(f"{page}: {len(found)} blocks start with {starts_with!r}")
    return found[0]
