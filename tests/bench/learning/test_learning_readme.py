"""bench/learning/README.md's learning-benchmark section is bench/learning/render_learning.py's rendering of the committed
bench/results/learning.json, and that file's stored summary is what its per-row outcomes give."""

from __future__ import annotations

import copy
import json

import pytest

from bench.learning import learning_stats, render_learning

RESULTS = json.loads(render_learning.RESULT_FILE.read_text())
FOLLOWUPS = render_learning.followup_files()


def test_the_readme_section_is_the_rendering_of_the_result_file() -> None:
    section = render_learning.readme_section(render_learning.README.read_text())
    assert section == render_learning.render_section(RESULTS, FOLLOWUPS), (
        "bench/learning/README.md's learning-benchmark section differs from bench/results/learning.json; "
        "run `.venv/bin/python bench/learning/render_learning.py`"
    )


ALL = {"learning.json": RESULTS, **FOLLOWUPS}


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_stored_summary_is_what_the_rows_give(name: str) -> None:
    rows = {model: result["rows"] for model, result in ALL[name]["models"].items()}
    assert ALL[name]["summary"] == learning_stats.summarize(rows)


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_result_file_has_every_model_on_the_same_rows_and_every_arms_job(name: str) -> None:
    results = ALL[name]
    ids = {model: [r["id"] for r in result["rows"]] for model, result in results["models"].items()}
    assert set(ids) == {"base", "trained", "control"}
    assert len(set(map(frozenset, ids.values()))) == 1 and len(ids["base"]) == results["eval"]["rows"]
    samples = {len(r["samples"]) for model in results["models"].values() for r in model["rows"]}
    assert samples == {results["eval"]["samples"]}
    for arm in ("trained", "control"):
        assert results["arms"][arm]["job_id"].startswith("rl-")
        assert results["arms"][arm]["train"], f"{arm}: no per-step metrics"


def test_a_changed_outcome_changes_the_rendering() -> None:
    edited = copy.deepcopy(RESULTS)
    row = edited["models"]["trained"]["rows"][0]
    row["greedy"] = 1 - row["greedy"]
    assert render_learning.render_section(edited) != render_learning.render_section(RESULTS)
    edited = copy.deepcopy(RESULTS)
    edited["arms"]["control"]["train"][0]["signal_fraction"] = 0.5 if not edited["arms"]["control"]["train"][0]["signal_fraction"] else 0.0
    assert render_learning.render_section(edited) != render_learning.render_section(RESULTS)


def test_the_section_sits_between_its_markers_once() -> None:
    readme = render_learning.README.read_text()
    assert readme.count(render_learning.BEGIN) == 1 and readme.count(render_learning.END) == 1
    with pytest.raises(ValueError):
        render_learning.readme_section("no markers here")
