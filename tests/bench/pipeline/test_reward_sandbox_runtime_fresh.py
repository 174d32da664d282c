"""What bench/pipeline/README.md says the reward sandbox held on the TPU machine's gVisor is this sandbox's: each run in
bench/results/reward_sandbox_runtimes.json carries the digest of the sandbox's sources (bench/pipeline/reward_sandbox_runtime.py
SANDBOX_SOURCES), and they must not have changed since. After a sandbox change, run the bench there again."""

from __future__ import annotations

import json
from pathlib import Path

from bench.pipeline.reward_sandbox_runtime import SANDBOX_SOURCES, sandbox_digest

REPO = Path(__file__).resolve().parents[3]

RERUN = (
    "on the TPU machine (the device tool): `python3.12 bench/pipeline/reward_sandbox_runtime.py --runtime gvisor --commit <HEAD> "
    "--machine '...' --out $OUT/run.json`, its run into bench/results/reward_sandbox_runtimes.json, then "
    "`.venv/bin/python bench/readme_sections.py`"
)


def test_every_run_was_measured_on_the_sandbox_as_it_is() -> None:
    runs = json.loads((REPO / "bench" / "results" / "reward_sandbox_runtimes.json").read_text())["runs"]
    assert runs, "no run recorded"
    now = sandbox_digest()
    stale = [f"{run['runtime']} at {run['commit']} (digest {run['sandbox_digest']})" for run in runs if run["sandbox_digest"] != now]
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
