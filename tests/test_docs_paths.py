"""Every repository path a page names in backticks exists, and every relative link resolves from the page's folder,
so a file moved or renamed elsewhere in the repository cannot leave the front door, the architecture map or the
reference pages pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "bench").glob("*/README.md"), *(ROOT / "docs").glob("*.md")])
TOP_DIRS = ("service", "trainer", "bench", "docs", "tests", "scripts", "k8s", "docker", "examples", "dashboard", "harness", ".ci")
TOP_FILES = ("skaffold.yaml", "pyproject.toml", "constraints.txt", "README.md")
# `service/api/deps.py`, `trainer/stages/`, `skaffold.yaml`: a path under one of our top folders, or a top-level file.
PATH = re.compile(rf"`((?:{'|'.join(map(re.escape, TOP_DIRS))})/[\w./-]*|{'|'.join(map(re.escape, TOP_FILES))})`")


# The same paths bare, as a ```text diagram writes them (README.md's picture of a job's path).
DIAGRAM = re.compile(r"```text\n(.*?)```", re.DOTALL)
BARE_PATH = re.compile(rf"(?<![\w/<>.-])((?:{'|'.join(map(re.escape, TOP_DIRS))})/[\w./-]*[\w/])")


def named_paths(text: str) -> set[str]:
    """The repository paths in backticks or in a text diagram (a glob or a placeholder such as `<run>` is not one)."""
    found = PATH.findall(text) + [m for diagram in DIAGRAM.findall(text) for m in BARE_PATH.findall(diagram)]
    return {m.rstrip("/") for m in found if "*" not in m and "{" not in m}


def test_the_pattern_finds_paths_and_leaves_other_code_alone() -> None:
    text = "`service/app.py`, `trainer/stages/`, `skaffold.yaml`, `rljob status ID`, `<run>/logs/`, `dashboard/src/*.js`"
    diagram = "```text\n  store   (service/adapters/store/, trainer/pipeline.py)  <run>/events.jsonl\n```"
    assert named_paths(text + diagram) == {
        "service/app.py",
        "trainer/stages",
        "skaffold.yaml",
        "service/adapters/store",
        "trainer/pipeline.py",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = sorted(p for p in named_paths(page.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist (moved or renamed?): {missing}"


# [text](target): a relative target, not a web address or an anchor on the same page.
LINK = re.compile(r"(?<!`)\[[^\]]*\]\((?!https?:|#|<|mailto:)([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"`[^`\n]*`", "", page.read_text())  # a pattern in code is not a link
    broken = sorted({t for t in LINK.findall(text) if not (page.parent / t.split("#")[0]).exists()})
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there (relative to its folder): {broken}"


def test_the_link_pattern_skips_web_addresses_anchors_and_code() -> None:
    text = re.sub(r"`[^`\n]*`", "", "[a](docs/x.md) [b](https://x.org) [c](#here) `[d](e)` [f](../bench/README.md#top)")
    assert LINK.findall(text) == ["docs/x.md", "../bench/README.md#top"]
