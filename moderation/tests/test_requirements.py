"""The locks (requirements/*.txt) against their one source (requirements/*.in).

Every package of every lock is pinned with hashes (``--require-hashes`` installs them); each pin
written in a source is the version its lock holds (a source edited and not compiled again fails
here); the runtime set holds no test, docs or lab-only package; requirements.txt takes the three.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements"
SETS = ("runtime", "test", "docs")
# Only the development sets need these; the product never imports them.
NOT_RUNTIME = {"matplotlib", "pytest", "mypy", "ruff", "playwright", "mkdocs", "pip-tools", "hypothesis"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _lock(set_name: str) -> dict[str, tuple[str, int]]:
    """Package -> (version, number of hashes), from a compiled lock."""
    pins: dict[str, tuple[str, int]] = {}
    current = ""
    for line in (REQUIREMENTS / f"{set_name}.txt").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            current = _name(match[1])
            pins[current] = (match[2], 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
    return pins


def _sources(set_name: str) -> dict[str, str]:
    """Package -> version, as pinned in a source (its ``==`` pins)."""
    pins = {}
    for line in (REQUIREMENTS / f"{set_name}.in").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line.strip()):
            pins[_name(match[1])] = match[2]
    return pins


@pytest.mark.parametrize("set_name", SETS)
def test_every_package_of_a_lock_is_pinned_with_hashes_and_matches_its_source(set_name):
    lock = _lock(set_name)
    assert lock, f"{set_name}.txt holds no package"
    assert [name for name, (_, hashes) in lock.items() if hashes == 0] == []
    stale = {
        name: (version, lock.get(name, ("missing", 0))[0])
        for name, version in _sources(set_name).items()
        if lock.get(name, ("", 0))[0] != version
    }
    assert stale == {}, f"{set_name}.in and {set_name}.txt disagree (source, lock): run `make requirements`"


def test_the_development_sets_agree_with_the_runtime_lock():
    runtime = _lock("runtime")
    for set_name in ("test", "docs"):
        differ = {
            name: (version, runtime[name][0])
            for name, (version, _) in _lock(set_name).items()
            if name in runtime and runtime[name][0] != version
        }
        assert differ == {}, set_name


def test_the_runtime_set_is_the_product_alone():
    runtime = _lock("runtime")
    assert NOT_RUNTIME & set(runtime) == set()
    assert "matplotlib" in _lock("test")  # the lab's charts: development only
    assert int(runtime["redis"][0].split(".")[0]) < 8  # redis-py 8 drops idle channels_redis sockets


def test_requirements_txt_takes_the_three_locks():
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert lines == [f"-r requirements/{set_name}.txt" for set_name in SETS]
