"""How much does the trainer add on top of MaxText? Runs, on the same tiny CPU spec, in one go:

1. the three bare MaxText commands (exactly those `trainer plan` prints, in a fresh run directory),
2. `python -m trainer run` on that spec in another fresh run directory,

and prints per-stage seconds for both and the overall overhead ratio (trainer / bare). Each invocation
is one run; with --json it is added to that file's runs (--fresh starts the file again), with the machine's
cores, its load average at the start and the end, the commit and the command line (bench/result_meta.py);
the README's entry is rendered from that file (bench/readme_sections.py).

    python bench/pipeline/trainer_overhead.py [--tiny DIR] [--json bench/results/trainer_overhead.json] [--fresh]
    # DIR from `python -m trainer make-tiny` (built if absent)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# --source TREE: measure that tree's trainer (e.g. `git archive HEAD`, while the work tree holds unfinished
# changes); the bench's own helpers still come from this checkout.
SOURCE = Path(sys.argv[sys.argv.index("--source") + 1]).resolve() if "--source" in sys.argv else REPO
sys.path[:0] = [str(SOURCE), str(REPO)]

from trainer.contract import RunLayout  # noqa: E402
from trainer.contract.spec.file import load_spec_file  # noqa: E402
from trainer.pipeline import describe_plan  # noqa: E402
from trainer.sources import (  # noqa: E402
    materialise_dataset,
    resolve_model,
)

SPEC = SOURCE / "examples" / "tiny-cpu.yaml"


def machine_facts() -> dict[str, object]:
    """bench/result_meta.py's facts, from this checkout's copy (with --source, `bench` may resolve to the tree's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rljob_result_meta", REPO / "bench" / "result_meta.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    facts: dict[str, object] = module.machine_facts()
    return facts


def run_bare(spec, out: Path) -> dict[str, float]:
    layout = RunLayout(str(out), "rl-benchbare0001")
    Path(layout.root).mkdir(parents=True)
    materialise_dataset(spec, Path(layout.root) / "data")  # what `plan` assumes is already there
    seconds: dict[str, float] = {}
    env = dict(os.environ, PYTHONPATH=str(SOURCE))
    for stage, command in describe_plan(spec, layout, resolve_model(spec)):
        if command.module.startswith("trainer.checks"):
            continue  # the bare pipeline has no load check
        if stage.value == "export":
            steps = sorted(int(p.name) for p in Path(layout.actor_checkpoints).iterdir() if p.name.isdigit())
            args = tuple(a.replace(f"/actor/{spec.grpo.num_batches}/", f"/actor/{steps[-1]}/") for a in command.args)
            command = type(command)(command.module, args, command.env)
        started = time.monotonic()
        subprocess.run(
            command.argv(), env={**env, **command.env}, cwd=out, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        seconds[stage.value] = time.monotonic() - started
    return seconds


def run_trainer(out: Path) -> tuple[dict[str, float], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--spec", str(SPEC), "--job-id", "rl-benchtrainer1"],
        cwd=SOURCE,
        env=dict(os.environ, RLJOB_OUTPUT=str(out), PYTHONPATH=str(SOURCE)),
        capture_output=True,
        text=True,
        check=True,
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
    parser.add_argument("--json", type=Path, help="add this run to the runs in this file")
    parser.add_argument("--fresh", action="store_true", help="with --json: drop the runs already in the file")
    parser.add_argument("--source", type=Path, help="measure the trainer in this tree (default: this checkout)")
    args = parser.parse_args()
    tiny = Path(args.tiny).resolve()
    if not (tiny / "model" / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny)], cwd=SOURCE, check=True)
    os.environ.update(RLJOB_TINY_DIR=str(tiny), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    machine = machine_facts()
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
    if args.json:
        run = {
            "machine": {**machine, "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
            "measured_tree": "this checkout" if SOURCE == REPO else str(args.source),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "bare_s": {**{k: round(v, 1) for k, v in bare.items()}, "total": round(bare_total, 1)},
            "trainer_s": {**{k: round(v, 1) for k, v in trainer.items()}, "total": round(trainer_total, 1)},
            "ratio": round(trainer_total / bare_total, 3),
        }
        old = [] if args.fresh or not args.json.exists() else json.loads(args.json.read_text())["runs"]
        args.json.write_text(json.dumps({"target_ratio": 1.05, "runs": [*old, run]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
