"""The chip's correctness verdicts in bench/results/tpu_correctness.json are this trainer's: the result names the
commit whose trainer files ran on the chip, and those files (bench/chip/tpu_correctness.py's TRAINER_FILES) must not differ
from it. Until the chip's result is committed nothing may publish it: no bench/chip/README.md section renders it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import readme_sections
from bench.chip import tpu_correctness

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "bench" / "results" / tpu_correctness.RESULT
SECTION = "tpu-correctness"
RERUN = (
    "run bench/chip/tpu_correctness.py on the chip again (its docstring says how), collect it and "
    "`.venv/bin/python bench/readme_sections.py`"
)


def changed(since: str, until: str | None, paths: list[str]) -> list[str]:
    revisions = [since] + ([until] if until else [])
    diff = subprocess.run(["git", "diff", "--name-only", *revisions, "--", *paths], cwd=REPO, capture_output=True, text=True, check=True)
    return diff.stdout.split()


def test_the_checked_trainer_files_are_unchanged_since_the_commit_checked_and_nothing_publishes_a_missing_result() -> None:
    if not RESULT.exists():
        # The chip's result is not committed yet: nothing may render figures it does not have.
        assert SECTION not in readme_sections.SECTIONS, f"bench:{SECTION} is registered but bench/results/{RESULT.name} is missing"
        assert f"<!-- bench:{SECTION}:begin -->" not in readme_sections.PAGES["chip"].read_text()
        return
    result = json.loads(RESULT.read_text())
    assert result["trainer_files"] == list(tpu_correctness.TRAINER_FILES), "the result names other files than the bench checks"
    stale = changed(result["trainer_commit"], None, result["trainer_files"])
    assert not stale, f"checked with the trainer at {result['trainer_commit']}; since then {', '.join(stale)} changed: {RERUN}"


@pytest.mark.parametrize(
    ("commit", "files"),
    [
        ("7753171", ["trainer/maxtext_entry/cached_llama.py"]),  # Qwen3 in the engine
        (
            "7c9013d",
            ["trainer/maxtext_entry/jax_rollout.py", "trainer/maxtext_entry/stop_token.py", "trainer/maxtext_entry/train_rl_entry.py"],
        ),
        ("7a5b487", ["trainer/maxtext_entry/grpo_objective.py", "trainer/maxtext_entry/train_rl_entry.py", "trainer/stages/train.py"]),
        ("fce6669", []),  # docs only
    ],
)
def test_a_change_to_a_checked_file_is_seen(commit: str, files: list[str]) -> None:
    assert changed(f"{commit}^", commit, [*tpu_correctness.TRAINER_FILES, *tpu_correctness.FORMER_PATHS]) == files
