"""What bench/pipeline/README.md says the reward sandbox held on the TPU machine's gVisor is this sandbox's: each run in
bench/results/reward_sandbox_runtimes.json carries the digest of the sandbox's sources (bench/pipeline/reward_sandbox_runtime.py
SANDBOX_SOURCES), and they must not have changed since. After a sandbox change, run the bench there again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench.pipeline.reward_sandbox_runtime import MOVED_MODULES, SANDBOX_SOURCES, sandbox_digest

REPO = Path(__file__).resolve().parents[3]

RERUN = (
    "on the TPU machine (the device tool): `python3.12 bench/pipeline/reward_sandbox_runtime.py --runtime gvisor --commit <HEAD> "
    "--machine '...' --out $OUT/run.json`, its run into bench/results/reward_sandbox_runtimes.json, then "
    "`.venv/bin/python bench/readme_sections.py`"
)


RUNS = json.loads((REPO / "bench" / "results" / "reward_sandbox_runtimes.json").read_text())["runs"]


def moved_whole_since(commit: str, old: str, new: str) -> bool:
    """Whether git sees the module `old` renamed to `new` since `commit`, its file's content unchanged."""
    paths = [f"{old.replace('.', '/')}.py", f"{new.replace('.', '/')}.py"]
    diff = subprocess.run(
        ["git", "diff", "-M100%", "--name-status", commit, "--", *paths], cwd=REPO, capture_output=True, text=True, check=True
    )
    return diff.stdout.split() == ["R100", *paths]


def is_fresh(run: dict[str, Any]) -> bool:
    """The run's sources are today's, or today's with only the imports of modules moved whole since its commit undone."""
    moves = tuple(move for move in MOVED_MODULES if moved_whole_since(run["commit"], *move))
    return run["sandbox_digest"] in (sandbox_digest(), sandbox_digest(moves_undone=moves))


def test_every_run_was_measured_on_the_sandbox_as_it_is() -> None:
    runs = RUNS
    assert runs, "no run recorded"
    now = sandbox_digest()
    stale = [f"{run['runtime']} at {run['commit']} (digest {run['sandbox_digest']})" for run in runs if not is_fresh(run)]
    assert not stale, f"{', '.join(stale)}: the sandbox's sources ({', '.join(SANDBOX_SOURCES)}) changed since (now {now}); {RERUN}"


def test_the_digest_changes_with_any_source(tmp_path: Path) -> None:
    for name in SANDBOX_SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    assert sandbox_digest(tmp_path) == sandbox_digest()
    for name in SANDBOX_SOURCES:
        original = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(original + b"\n")
        assert sandbox_digest(tmp_path) != sandbox_digest(), name
        (tmp_path / name).write_bytes(original)


def test_a_move_counts_only_where_the_moved_file_is_whole_and_nothing_else_changed(tmp_path: Path) -> None:
    """trainer/contract/reward_sandbox.py moved to spec/ unchanged (3576900): today's sources with that import undone
    are the sources of 32481d53dc, whose runs stay fresh. spec.py's move to spec/job.py came with an edit (92d0630's
    logits_dtype), so it is no move; and a source changed beside a move's import path does not match."""
    assert moved_whole_since("32481d53dc", *MOVED_MODULES[0])
    assert not moved_whole_since("0272b7c", "trainer.contract.spec", "trainer.contract.spec.job")
    for name in SANDBOX_SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(
            subprocess.run(["git", "show", f"32481d53dc:{name}"], cwd=REPO, capture_output=True, check=True).stdout
        )
    then = sandbox_digest(tmp_path)
    assert then != sandbox_digest() and sandbox_digest(moves_undone=MOVED_MODULES) == then
    for name in SANDBOX_SOURCES:
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    pool = tmp_path / "trainer" / "rewards_sandbox" / "pool.py"
    pool.write_bytes(pool.read_bytes() + b"\n")
    assert sandbox_digest(tmp_path, moves_undone=MOVED_MODULES) != then
