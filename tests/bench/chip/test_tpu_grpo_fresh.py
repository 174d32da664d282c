"""The TPU figures in bench/chip/README.md are this trainer's: bench/results/tpu_grpo.json names the commit whose trainer
files ran on the chip, and those files (its TRAINER_FILES) must not differ from that commit. After a change, run the
bench on the chip again (bench/chip/tpu_grpo.py's docstring says how) and render bench/chip/README.md."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "bench" / "results" / "tpu_grpo.json"


def changed_since(commit: str, paths: list[str]) -> list[str]:
    diff = subprocess.run(["git", "diff", "--name-only", commit, "--", *paths], cwd=REPO, capture_output=True, text=True, check=True)
    return diff.stdout.split()


def test_the_measured_trainer_files_are_unchanged_since_the_commit_measured() -> None:
    result = json.loads(RESULT.read_text())
    changed = changed_since(result["trainer_commit"], result["trainer_files"])
    assert not changed, (
        f"bench/results/tpu_grpo.json was measured with the trainer at {result['trainer_commit']}; since then "
        f"{', '.join(changed)} changed: run bench/chip/tpu_grpo.py on the chip again and `.venv/bin/python bench/readme_sections.py`"
    )


def test_a_change_to_a_measured_file_is_seen() -> None:
    result = json.loads(RESULT.read_text())
    # 115ebfd is before issue 51's sandbox changes: the measured files differ from it.
    assert changed_since("115ebfd", result["trainer_files"])
