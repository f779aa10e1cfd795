"""The architecture diagram on docs/contributors/architecture.md is the code's (scripts/architecture_diagram.py)."""

from __future__ import annotations

import pytest

from scripts.architecture_diagram import CONFIG, DECISION_PATH, OUTPUT, StaleStep, Step, diagram_build, layers_read


def test_the_committed_diagram_is_drawn_from_the_code_as_it_is():
    assert OUTPUT.read_text() == diagram_build(), "docs/img/architecture.svg is stale: run `make docs` and commit it"


def test_a_change_of_layers_changes_the_diagram(tmp_path):
    """The control: a layers contract with a package moved gives another picture, so a stale one is seen."""
    moved = (
        CONFIG.read_text()
        .replace("    moderation.live\n", "")
        .replace("moderation.web | ", "moderation.live | moderation.web | ")
    )
    assert moved != CONFIG.read_text()
    (tmp_path / ".importlinter").write_text(moved)
    assert diagram_build(tmp_path / ".importlinter") != OUTPUT.read_text()


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        (Step("moderation.core.locks", "moderation.review.decisions:item_decide", ""), "does not import"),
        (Step("moderation.web.views", "moderation.review.decisions:item_decided_somehow", ""), "defines no"),
    ],
)
def test_a_decision_step_the_code_does_not_have_stops_the_drawing(step, problem):
    with pytest.raises(StaleStep, match=problem):
        diagram_build(path=[*DECISION_PATH, step])


def test_the_layers_read_the_same_from_pyproject(tmp_path):
    """import-linter's settings may move to pyproject.toml; the diagram reads them there alike."""
    root, layers = layers_read(CONFIG)
    rows = ", ".join('"' + " | ".join(row) + '"' for row in layers)
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.importlinter]\nroot_package = "{root}"\n\n'
        f'[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\nlayers = [{rows}]\n'
    )
    assert layers_read(tmp_path / "pyproject.toml") == (root, layers)
