"""Orbax/tensorstore write a checkpoint to gs:// on the emulator and restore it (in a child process,
with only the environment variables a MaxText stage would get)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("orbax_roundtrip.py")


def test_orbax_checkpoint_round_trip_on_gs(emulator, gcs, bucket):
    directory = f"gs://{bucket}/out/rl-aaaaaaaaaaaa/rl/checkpoints"
    env = {**os.environ, **emulator.env(), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(SCRIPT), directory], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"steps": [2], "equal": True}
    names = [o.uri[len(directory) + 1 :] for o in gcs.list(directory)]
    assert any(n.startswith("2/") for n in names) and not any(n.startswith("1/") for n in names)
    assert "2/_CHECKPOINT_METADATA" in names
