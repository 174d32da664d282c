"""The pipeline process (python -m trainer) imports no stage-process module: trainer.maxtext_entry's import registers
a SIGUSR1 stack dump (right in a stage process, which the hang watchdog signals; not in the pipeline, whose SIGUSR1
keeps its default) and loads MaxText's and JAX's state, which belongs in the stage's own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PIPELINE = ("trainer.cli", "trainer.pipeline", "trainer.stages.convert", "trainer.stages.train", "trainer.stages.export")


def test_the_pipeline_imports_no_stage_process_module() -> None:
    program = (
        "import importlib, sys\n"
        f"for name in {PIPELINE!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('trainer.maxtext_entry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
