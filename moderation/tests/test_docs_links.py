"""The docs' links: every page in mkdocs.yml's nav is in the home page's "Find your part" table and linked from another page."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)\s]*)?\)")


def _nav_pages(nav=None) -> list[str]:
    if nav is None:
        nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _links(page: str, text: str | None = None) -> set[str]:
    """The pages ``page`` links to (or those linked from ``text``, a part of it), as paths under docs/."""
    base = (DOCS / page).parent
    text = (DOCS / page).read_text() if text is None else text
    return {str((base / target).resolve().relative_to(DOCS.resolve())) for target in LINK.findall(text)}


def _find_your_part() -> str:
    home = (DOCS / "index.md").read_text()
    return home.split("## Find your part", 1)[1].split("\n## ", 1)[0]


def test_every_page_of_the_nav_is_in_the_homes_find_your_part_table():
    table = _links("index.md", _find_your_part())
    assert [page for page in _nav_pages() if page != "index.md" and page not in table] == []


def test_every_page_of_the_nav_is_linked_from_another_page():
    pages = _nav_pages()
    linked_from = {page: {other for other in pages if other != page and page in _links(other)} for page in pages}
    assert [page for page, others in linked_from.items() if page != "index.md" and not others - {"index.md"}] == []


def test_the_checks_see_a_missing_page():
    """A negative control: a page in the nav that no page names is found."""
    assert "integrators/nowhere.md" not in _links("index.md", _find_your_part())
    assert _links("operators/users.md", "see [a page](../integrators/policies.md#x)") == {"integrators/policies.md"}
