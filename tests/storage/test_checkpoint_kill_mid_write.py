"""A trainer killed while a checkpoint is being written resumes from a whole one, with the default
retention (keep the last 1): Orbax's own atomicity, under the options train_rl gives it.

Orbax writes step N+1 beside step N (a `.orbax-checkpoint-tmp` directory renamed at the end on a local
file system; on gs:// the step's objects count only once its `commit_success.txt` is written) and
deletes step N only after N+1 is finalized. So at every instant one whole checkpoint exists, and a
kill mid-write costs the steps since it, never the run. Each test kills the writer (SIGKILL) right
after step 2's asynchronous write starts, shows the write was cut short, and restores in a fresh
process the way a resumed train_rl does (Tunix's CheckpointManager, latest_step then restore).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SCRIPT = Path(__file__).with_name("orbax_kill_mid_write.py")


def _kill_mid_write(directory: str, env: dict[str, str], started: Callable[[], bool]) -> None:
    """SIGKILL the writer once step 2's write is under way (`started`), before it ends."""
    writer = subprocess.Popen(
        [sys.executable, str(SCRIPT), "save", directory], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert writer.stdout is not None
        for line in writer.stdout:
            if line.startswith("WRITING 2"):
                deadline = time.monotonic() + 60
                while not started() and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.kill(writer.pid, signal.SIGKILL)
                break
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL


def _restore(directory: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run([sys.executable, str(SCRIPT), "restore", directory], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_kill_during_a_local_checkpoint_write_leaves_the_previous_one_whole(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    _kill_mid_write(str(directory), env, lambda: (directory / "2.orbax-checkpoint-tmp").exists())
    # The kill landed mid-write: step 2 is still Orbax's temporary directory, and step 1 was not deleted.
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["1", "2.orbax-checkpoint-tmp"], names
    assert _restore(str(directory), env) == {"latest_step": 1, "whole_step_1": True}


def test_a_kill_during_a_gcs_checkpoint_write_leaves_the_previous_one_whole(emulator, gcs, bucket) -> None:
    directory = f"gs://{bucket}/out/rl-aaaaaaaaaaaa/rl/checkpoints"
    env = {**os.environ, **emulator.env(), "JAX_PLATFORMS": "cpu"}

    def names() -> list[str]:
        return [o.uri[len(directory) + 1 :] for o in gcs.list(directory)]

    _kill_mid_write(directory, env, lambda: any(n.startswith("2/") for n in names()))
    found = names()
    assert "1/commit_success.txt" in found, found
    # Cut short: some of step 2 reached the bucket, its commit marker did not.
    step_2 = [n for n in found if n.startswith("2/")]
    assert step_2 and "2/commit_success.txt" not in step_2, step_2
    assert _restore(directory, env) == {"latest_step": 1, "whole_step_1": True}
