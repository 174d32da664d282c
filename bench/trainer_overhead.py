"""How much does the trainer add on top of MaxText? Runs, on the same tiny CPU spec, in one go:

1. the three bare MaxText commands (exactly those `trainer plan` prints, in a fresh run directory),
2. `python -m trainer run` on that spec in another fresh run directory,

and prints per-stage seconds for both and the overall overhead ratio (trainer / bare).

    python bench/trainer_overhead.py [--tiny DIR]   # DIR from `python -m trainer make-tiny` (built if absent)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer.contract import RunLayout  # noqa: E402
from trainer.contract.spec_file import load_spec_file  # noqa: E402
from trainer.pipeline import describe_plan  # noqa: E402
from trainer.sources import (  # noqa: E402
    materialise_dataset,
    resolve_model,
)

SPEC = REPO / "examples" / "tiny-cpu.yaml"


def run_bare(spec, out: Path) -> dict[str, float]:
    layout = RunLayout(str(out), "rl-benchbare0001")
    Path(layout.root).mkdir(parents=True)
    materialise_dataset(spec, Path(layout.root) / "data")  # what `plan` assumes is already there
    seconds: dict[str, float] = {}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for stage, command in describe_plan(spec, layout, resolve_model(spec)):
        if command.module.startswith("trainer.checks"):
            continue  # the bare pipeline has no load check
        if stage.value == "export":
            steps = sorted(int(p.name) for p in Path(layout.actor_checkpoints).iterdir() if p.name.isdigit())
            args = tuple(
                a.replace(f"/actor/{spec.grpo.num_batches}/", f"/actor/{steps[-1]}/") for a in command.args
            )
            command = type(command)(command.module, args, command.env)
        started = time.monotonic()
        subprocess.run(command.argv(), env={**env, **command.env}, cwd=out, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds[stage.value] = time.monotonic() - started
    return seconds


def run_trainer(out: Path) -> tuple[dict[str, float], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--spec", str(SPEC), "--job-id", "rl-benchtrainer1"],
        cwd=REPO, env=dict(os.environ, RLJOB_OUTPUT=str(out)), capture_output=True, text=True, check=True,
    )
    total = time.monotonic() - started
    per_stage = {}
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        if event["type"] == "stage_finished":
            per_stage[event["stage"]] = event["duration_s"]
    return per_stage, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", default=os.environ.get("RLJOB_TINY_DIR", "/tmp/rljob-tiny"))
    args = parser.parse_args()
    tiny = Path(args.tiny).resolve()
    if not (tiny / "model" / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny)], cwd=REPO, check=True)
    os.environ.update(RLJOB_TINY_DIR=str(tiny), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="rljob-bench-") as scratch:
        os.environ["RLJOB_OUTPUT"] = str(Path(scratch) / "bare")
        spec = load_spec_file(SPEC)
        bare_started = time.monotonic()
        bare = run_bare(spec, Path(scratch) / "bare")
        bare_total = time.monotonic() - bare_started
        trainer, trainer_total = run_trainer(Path(scratch) / "trainer")
    print(f"{'stage':<10}{'bare MaxText s':>16}{'trainer run s':>16}")
    for stage in ("convert", "train", "export"):
        print(f"{stage:<10}{bare.get(stage, 0):>16.1f}{trainer.get(stage, 0):>16.1f}")
    print(f"{'total':<10}{bare_total:>16.1f}{trainer_total:>16.1f}")
    print(f"overhead ratio (trainer run / bare MaxText): {trainer_total / bare_total:.3f}")
    print("trainer export includes the transformers load check; the bare export does not")
    return 0


if __name__ == "__main__":
    sys.exit(main())
