"""bench/rollout/README.md's rollout-speed section is bench/rollout/render_rollout_speed.py's rendering of the committed
bench/results/rollout_speed.json, and the file carries what the issue asks it to record."""

from __future__ import annotations

import json

from bench.rollout import render_rollout_speed

RESULTS = json.loads(render_rollout_speed.RESULT_FILE.read_text())


def test_the_readme_section_is_the_rendering_of_the_result_file() -> None:
    section = render_rollout_speed.readme_section(render_rollout_speed.README.read_text())
    assert section == render_rollout_speed.render_section(RESULTS), (
        "bench/rollout/README.md's rollout-speed section differs from bench/results/rollout_speed.json; "
        "run `.venv/bin/python bench/rollout/render_rollout_speed.py`"
    )


def test_the_result_file_records_the_figures_and_the_machine() -> None:
    for key in ("rljob_tokens_per_s", "hf_tokens_per_s", "bound_tokens_per_s"):
        assert RESULTS[key] > 0, key
    assert RESULTS["rljob_tokens_per_s"] == RESULTS["engines"]["current"]["tokens_per_s"]
    machine = RESULTS["machine"]
    assert machine["cores"] >= 1 and len(machine["load_average"]) == 3 and machine["command"]
    assert len(machine["commit"]) == 40 and not machine["engine_files_modified"]
