"""README passages with figures are bench/readme_sections.py's renderings of the committed result files."""

from __future__ import annotations

import copy

import pytest

from bench import readme_sections


@pytest.mark.parametrize("name", sorted(readme_sections.SECTIONS))
def test_the_readme_holds_the_rendering_of_the_result_files(name: str) -> None:
    section = readme_sections.current(readme_sections.README.read_text(), name)
    assert section is not None, f"README.md has no bench:{name} block"
    assert section == readme_sections.rendered(name), (
        f"README.md's bench:{name} section differs from {readme_sections.SECTIONS[name][0]}; "
        "run `.venv/bin/python bench/readme_sections.py`"
    )


def test_a_changed_figure_in_the_file_changes_the_rendering() -> None:
    result = readme_sections.load("goodput-bar.json")
    edited = copy.deepcopy(result)
    edited["goodput"]["parts"]["rollout"] += 1.0
    assert readme_sections.render_goodput_tiny(edited) != readme_sections.render_goodput_tiny(result)


def test_replace_rewrites_only_its_block() -> None:
    readme = "a\n<!-- bench:x:begin -->\nold\n<!-- bench:x:end -->\nb\n"
    assert readme_sections.replace(readme, "x", "new\nlines") == "a\n<!-- bench:x:begin -->\nnew\nlines\n<!-- bench:x:end -->\nb\n"
    assert readme_sections.current("<!-- bench:x:begin -->\n<!-- bench:x:end -->", "x") == ""
