"""The group READMEs' passages with figures are bench/readme_sections.py's renderings of the committed result files,
each in the README of the group its bench belongs to."""

from __future__ import annotations

import copy
import re

import pytest

from bench import readme_sections

BLOCK = re.compile(r"^ *<!-- bench:([\w-]+):begin -->$", re.MULTILINE)  # a marker on a line of its own


@pytest.mark.parametrize("name", sorted(readme_sections.SECTIONS))
def test_the_readme_holds_the_rendering_of_the_result_files(name: str) -> None:
    page = readme_sections.page(name)
    section = readme_sections.current(page.read_text(), name)
    assert section is not None, f"{page} has no bench:{name} block"
    assert section == readme_sections.rendered(name), (
        f"{page}'s bench:{name} section differs from {readme_sections.SECTIONS[name][0]}; run `.venv/bin/python bench/readme_sections.py`"
    )


def test_every_block_is_in_its_groups_readme_once_and_in_no_other_page() -> None:
    pages = {"index": readme_sections.README, **readme_sections.PAGES}
    held = {where: BLOCK.findall(path.read_text()) for where, path in pages.items()}
    for where, names in held.items():
        assert len(names) == len(set(names)), f"{pages[where]} holds a block twice: {names}"
        for name in names:
            assert name in readme_sections.SECTIONS, f"{pages[where]} holds bench:{name}, which no SECTIONS entry renders"
            assert readme_sections.SECTIONS[name][2] == where, f"bench:{name} belongs in {readme_sections.page(name)}, not {pages[where]}"
    assert sorted(n for names in held.values() for n in names) == sorted(readme_sections.SECTIONS)


def test_each_group_is_a_folder_of_bench_with_its_readme() -> None:
    for group, page in readme_sections.PAGES.items():
        assert page == readme_sections.REPO / "bench" / group / "README.md" and page.is_file(), page
        assert (page.parent / "__init__.py").is_file(), f"bench/{group}/ is not a package"
    assert {group for _, _, group in readme_sections.SECTIONS.values()} <= set(readme_sections.GROUPS)


def test_a_changed_figure_in_the_file_changes_the_rendering() -> None:
    result = readme_sections.load("goodput-bar.json")
    edited = copy.deepcopy(result)
    edited["goodput"]["parts"]["rollout"] += 1.0
    assert readme_sections.render_goodput_tiny(edited) != readme_sections.render_goodput_tiny(result)


def test_replace_rewrites_only_its_block() -> None:
    readme = "a\n<!-- bench:x:begin -->\nold\n<!-- bench:x:end -->\nb\n"
    assert readme_sections.replace(readme, "x", "new\nlines") == "a\n<!-- bench:x:begin -->\nnew\nlines\n<!-- bench:x:end -->\nb\n"
    assert readme_sections.current("<!-- bench:x:begin -->\n<!-- bench:x:end -->", "x") == ""


def test_an_indented_block_is_read_and_written_at_its_indentation() -> None:
    readme = "- item\n  <!-- bench:x:begin -->\n  old\n\n  table\n  <!-- bench:x:end -->\n- next\n"
    assert readme_sections.current(readme, "x") == "old\n\ntable"
    assert readme_sections.replace(readme, "x", "new\n\nrows") == (
        "- item\n  <!-- bench:x:begin -->\n  new\n\n  rows\n  <!-- bench:x:end -->\n- next\n"
    )


@pytest.mark.parametrize("name", sorted(readme_sections.SECTIONS))
def test_every_result_file_of_a_section_is_committed_beside_the_bench(name: str) -> None:
    for file in readme_sections.SECTIONS[name][0]:
        assert (readme_sections.RESULTS / file).is_file(), f"bench:{name} renders bench/results/{file}, which is missing"


def test_the_kill_loop_says_how_many_lives_each_backend_lost_during_start_up() -> None:
    result = readme_sections.load("kill_loop.json")
    text = readme_sections.SECTIONS["kill-loop"][1](result)
    for entry in result.values():
        assert f"{entry.get('kills_before_ready', 0)} of {entry['iterations']} lives killed during start-up" in text


def test_a_result_file_without_machine_facts_says_so() -> None:
    from bench.readme_render.common import where

    assert "no machine facts" in where(None)
    facts = {"cpu_count": 2, "load_average": [1.5, 1.0, 0.5], "commit": "abc", "command": "python bench/x.py"}
    assert where(facts) == "2 CPU cores, load 1.50 at the start, commit `abc`, `python bench/x.py`"
