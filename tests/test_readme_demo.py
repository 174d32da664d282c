"""The README's first command, as a newcomer runs it: `scripts/demo.sh` sets up (bootstrap.sh, already done here, so
it only checks), starts the service on the embedded default, submits the tiny GRPO job over the service's socket and
follows it to its end. Here into a temporary work directory (`--work-dir`, the demo's own option)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_runs_the_tiny_job_to_succeeded_and_exports_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLJOB_", "PYTEST_"))}
    done = subprocess.run(
        ["scripts/demo.sh", "--work-dir", str(tmp_path / "demo")], cwd=REPO, env=env, capture_output=True, text=True, timeout=840
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert ": SUCCEEDED - finished successfully" in said, said[-4000:]
    (run,) = (tmp_path / "demo" / "runs").glob("rl-*")
    assert (run / "hf" / "model.safetensors").stat().st_size > 0
