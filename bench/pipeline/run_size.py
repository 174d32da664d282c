"""How big a real run directory gets with the default retention: SmolLM2-135M-Instruct, 25 GRPO steps.

Issue 21's measurement: the 25-step SmolLM2 learning run kept 8 checkpoints (MaxText's rl.yml keeps 10),
11.5 GiB. This runs the same shape of job through `python -m trainer run` (examples/smollm2-arith-cpu.yaml
with 25 steps, a checkpoint every 5, no evaluation) with the spec's default `grpo.keep_last_checkpoints`
(1), then records what the trainer measured at each stage's end (its `storage` events: bytes by part)
and the directory's size as `du` counts it, the checkpoint steps left, and the target (<= 2.5 GiB).

    python bench/pipeline/run_size.py [--steps 25] [--period 5]     # about 15 minutes on 2 cores

Writes bench/results/run_size.json (with the machine's facts); the README block bench:run-size is rendered
from it by bench/readme_sections.py.
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

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from trainer.contract import RunLayout, parse_event  # noqa: E402

JOB_ID = "rl-runsize00001"
TARGET_GIB = 2.5


def _trainer(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, env=env, check=True)


def _du_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--period", type=int, default=5, help="grpo.checkpoint_period")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (its logs) afterwards")
    args = parser.parse_args()
    machine = machine_facts()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="rljob-run-size-", delete=not args.keep) as tmp:
        work = Path(tmp)
        _trainer("make-model", "smollm2-135m", "--out", str(work / "model"), env=env)
        _trainer("make-data", "arith", "--out", str(work / "arith"), env=env)
        text = (REPO / "examples" / "smollm2-arith-cpu.yaml").read_text()
        for var, value in (("RLJOB_SMOLLM2_DIR", work / "model"), ("RLJOB_ARITH_DIR", work / "arith"), ("RLJOB_OUTPUT", work / "runs")):
            text = text.replace("${" + var + "}", str(value))
        spec = yaml.safe_load(text)
        spec["grpo"].update(num_batches=args.steps, num_test_batches=0, checkpoint_period=args.period)
        spec["export"] = {"verify": False}
        spec_file = work / "spec.yaml"
        spec_file.write_text(yaml.safe_dump(spec))
        started = time.monotonic()
        _trainer("run", "--spec", str(spec_file), "--job-id", JOB_ID, env=env)
        wall_s = time.monotonic() - started
        layout = RunLayout(str(work / "runs"), JOB_ID)
        events = [parse_event(line) for line in Path(layout.events).read_text().splitlines() if line.strip()]
        measured = [
            e.storage.model_dump(mode="json") | {"stage": e.stage.value if e.stage else None} for e in events if e.type == "storage"
        ]
        root = Path(layout.root)
        steps_kept = sorted(int(p.name) for p in Path(layout.actor_checkpoints).iterdir() if p.name.isdigit())
        report = {
            "model": "SmolLM2-135M-Instruct (dequantised Q4_1)",
            "spec": "examples/smollm2-arith-cpu.yaml",
            "steps": args.steps,
            "checkpoint_period": args.period,
            "keep_last_checkpoints": "default",
            "wall_s": round(wall_s, 1),
            "checkpoint_steps_kept": steps_kept,
            "du_bytes": _du_bytes(root),
            "storage_events": measured,
            "target_gib": TARGET_GIB,
            "baseline": {"checkpoints_kept": 8, "gib": 11.5, "source": "issue 21: the 25-step learning run with rl.yml's retention"},
        }
    write_result("run_size.json", report, machine)
    print(json.dumps({k: report[k] for k in ("steps", "checkpoint_steps_kept", "du_bytes", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
