"""The run's JAX compilation cache on gs:// (trainer/compile_cache.py) against fake-gcs-server: JAX writes its entry
through etils' epath (gcsfs, STORAGE_EMULATOR_HOST) and a second process of the job runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.trainer.test_compile_cache import COMPILE
from trainer.contract import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_process_runs_what_the_first_compiled_into_a_gs_cache(emulator, gcs, bucket):
    text = (ROOT / "examples" / "tiny-cpu.yaml").read_text().replace("${RLJOB_TINY_DIR}", "/tiny")
    spec = JobSpec.model_validate({**yaml.safe_load(text.replace("${RLJOB_OUTPUT}", "/unused")), "output": f"gs://{bucket}/runs"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "RLJOB_JAX_CACHE"))}
    env |= {**emulator.env(), "JAX_PLATFORMS": "cpu", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", COMPILE, spec.model_dump_json()], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["hits"] == 0 and runs[1]["hits"] >= 1
    entries = [o.uri for o in gcs.list(f"gs://{bucket}/runs/_cache/jax")]
    # Entries only: no size bound, so no access times and no lock, which JAX would take in a local `gs:` directory.
    assert entries and all(uri.endswith("-cache") for uri in entries)
