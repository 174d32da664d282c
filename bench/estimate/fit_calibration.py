"""How close is the fit estimate (trainer/sizing/fit.py) to what a run really holds? Measured on CPU.

Runs `python -m trainer run` (convert -> GRPO, export off) on two random Llama-3.1-architecture models
of different widths, the tiny spec's GRPO settings otherwise, and records the peak resident memory
(VmHWM) of the train stage's process (MaxText's train_rl with the jax rollout). On cpu the estimate
counts one device, so its total is what that process should add on top of the runtime it starts with
(Python, JAX, MaxText, Tunix, the compiled programs). That runtime is not in the estimate, so the
numbers compared are the two runs' differences: measured growth / estimated growth from the small
model to the larger one. Each run's own measured / estimated ratio is printed too.

    python bench/estimate/fit_calibration.py [--out DIR]   # writes bench/results/fit_calibration.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from trainer.contract.spec.file import load_spec_file  # noqa: E402
from trainer.sizing.fit import estimate_job_fit  # noqa: E402
from trainer.sizing.tpu_memory import GIB  # noqa: E402

TINY_SPEC = REPO / "examples" / "tiny-cpu.yaml"
RESULTS = REPO / "bench" / "results" / "fit_calibration.json"
# Two widths of the tiny model (trainer/offline/tiny.py's is the first): the vocabulary (Llama 3's 128256)
# stays, so the embeddings dominate both and the difference is mostly training state.
SIZES = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    },
    "wide": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
}
TRAIN_MODULE_MARK = "train_rl"  # in the train stage's command line (trainer.maxtext_entry.train_rl_jax_entry)
POLL_S = 0.1


def build_model(tiny: Path, out: Path, dims: dict[str, int]) -> None:
    """A random model of `dims` beside the tiny one's tokenizer (what make-tiny writes, resized)."""
    import shutil

    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    shutil.copytree(tiny / "model", out)
    config = AutoConfig.from_pretrained(out)
    for key, value in dims.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)


def _descendants(pid: int) -> list[int]:
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent_of[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parent_of.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _peak_kib(pid: int) -> int | None:
    try:
        if TRAIN_MODULE_MARK not in (Path("/proc") / str(pid) / "cmdline").read_text():
            return None
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_and_measure(spec_path: Path, work: Path) -> int:
    """Peak RSS in bytes of the train stage's process while `trainer run` runs the spec."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", RLJOB_CONVERSION_CACHE="off", RLJOB_WORK_DIR=str(work / "scratch"))
    log = (work / "trainer.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "run", "--spec", str(spec_path)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    peak = 0
    while proc.poll() is None:
        for child in _descendants(proc.pid):
            peak = max(peak, _peak_kib(child) or 0)
        time.sleep(POLL_S)
    if proc.returncode != 0 or peak == 0:
        raise SystemExit(f"trainer run failed (exit {proc.returncode}, train peak {peak} KiB); see {work / 'trainer.log'}")
    return peak * 1024


def spec_for(model_dir: Path, tiny: Path, out: Path) -> Path:
    text = TINY_SPEC.read_text().replace("${RLJOB_TINY_DIR}", str(tiny)).replace("${RLJOB_OUTPUT}", str(out))
    data: dict[str, Any] = yaml.safe_load(text)
    data["model"]["source"] = str(model_dir)
    data["grpo"].update(num_batches=1, num_test_batches=0, checkpoint_period=1)
    data["export"] = {"enabled": False}
    path = out / f"{model_dir.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    machine = machine_facts()
    work = args.out or Path(tempfile.mkdtemp(prefix="rljob-fit-"))
    tiny = work / "inputs"  # make-tiny's model, tokenizer, data and reward
    subprocess.run(
        [sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny)],
        cwd=REPO,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
        stdout=subprocess.DEVNULL,
    )
    rows: list[dict[str, Any]] = []
    for name, dims in SIZES.items():
        model_dir = work / f"model-{name}"
        if not model_dir.exists():
            build_model(tiny, model_dir, dims)
        run_dir = work / f"run-{name}"
        run_dir.mkdir(exist_ok=True)
        spec_path = spec_for(model_dir, tiny, run_dir)
        estimate = estimate_job_fit(load_spec_file(spec_path))
        assert estimate is not None, "the model's config.json is local: the estimate must exist"
        measured = run_and_measure(spec_path, run_dir)
        rows.append(
            {
                "model": name,
                "parameters": estimate.parameters,
                "estimated_bytes": estimate.total_bytes_per_chip,
                "per_chip": estimate.per_chip.model_dump(),
                "measured_peak_rss_bytes": measured,
            }
        )
        print(
            f"{name}: {estimate.parameters:,} parameters, estimated {estimate.total_bytes_per_chip / GIB:.2f} GiB, "
            f"train stage peak RSS {measured / GIB:.2f} GiB (ratio {measured / estimate.total_bytes_per_chip:.2f})"
        )
    small, large = rows
    grown_measured = large["measured_peak_rss_bytes"] - small["measured_peak_rss_bytes"]
    grown_estimated = large["estimated_bytes"] - small["estimated_bytes"]
    ratio = grown_measured / grown_estimated
    print(
        f"growth {small['model']} -> {large['model']}: measured {grown_measured / GIB:.2f} GiB, "
        f"estimated {grown_estimated / GIB:.2f} GiB, ratio {ratio:.2f}"
    )
    write_result(RESULTS.name, {"runs": rows, "growth_ratio_measured_over_estimated": ratio}, machine)


if __name__ == "__main__":
    main()
