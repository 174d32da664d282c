"""The GRPO train stage on one TPU v5e chip, measured: each step's time by part, compile time, peak HBM, and the
fit estimate's prediction for the same spec.

Two halves, because the chip's machine has no network and no torch:

    .venv/bin/python bench/chip/tpu_grpo.py prepare             # here: bench/.tpu-inputs/ (configs, tokenizers, GSM8K rows)
    python3.12 bench/chip/tpu_grpo.py run --out DIR [--shapes a,b]   # on the chip: DIR/tpu_grpo-<shape>.json per shape
    .venv/bin/python bench/chip/tpu_grpo.py collect DIR         # here: bench/results/tpu_grpo.json

Each shape is a real job spec (`hardware.accelerator: v5e-1`, the jax rollout engine, the GSM8K reward file from
examples/rewards run through the reward sandbox) whose train-stage command is built by the trainer's own
`build_train_command`, as `python -m trainer run` builds it, and run unchanged but for one thing: the weights are
MaxText's random initialisation (no `load_parameters_path`, `convert_checkpoint_if_possible=false`), because the
convert stage needs torch. Random weights never stop early, so every completion runs to its full length: the
step does the most work its settings allow.

What is read: the trainer's own `RLJOB_GOODPUT` lines (cumulative seconds by part after each step; their
differences are each step's parts), the probe in bench/chip/tpu_probe/ (JAX's `memory_stats()` peak and the seconds JAX
reported compiling), the reward sandbox's line, the objective's resolved config line, and the wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS  # noqa: E402

INPUTS = REPO / "bench" / ".tpu-inputs"
PROBE_DIR = REPO / "bench" / "chip" / "tpu_probe"
RESULT = "tpu_grpo.json"
# What the measured step runs of rljob's own: a change to any of them makes the figures stale (tests/bench).
TRAINER_FILES = (
    "trainer/maxtext_entry",
    "trainer/rollout",
    "trainer/contract/run/shim_config.py",
    "trainer/stages/train.py",
    "trainer/stages/common.py",
    "trainer/rewards_sandbox",
    "trainer/sizing/layer_activations.py",
)

# GSM8K-style GRPO (the tutorial's rl.yml lengths: 256 prompt slots; 512 new tokens), 8 generations, a reference.
GSM8K = {
    "num_batches": 6,
    "num_test_batches": 0,
    "batch_size": 4,
    "num_generations": 8,
    "beta": 0.08,
    "temperature": 1.0,
    "learning_rate": 1e-6,
    "max_prefill_predict_length": 256,
    "max_target_length": 768,
    "kv_cache_buffer": 8,
    "checkpoint_period": 3,
}


def _body(layers: int, hidden: int, mlp: int, heads: int, kv: int, head_dim: int, rope_theta: float) -> dict[str, Any]:
    """The config.json fields of a decoder body's shape, as each model's published config.json spells them."""
    return {
        "hidden_size": hidden,
        "intermediate_size": mlp,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "rope_parameters": {"rope_theta": rope_theta, "rope_type": "default"},
    }


def _qwen3(layers: int, hidden: int, mlp: int, heads: int, kv: int) -> dict[str, Any]:
    body = _body(layers, hidden, mlp, heads, kv, head_dim=128, rope_theta=1000000.0)
    return body | {"layer_types": ["full_attention"] * layers, "max_window_layers": layers}


def _llama(layers: int, hidden: int, mlp: int, heads: int, kv: int) -> dict[str, Any]:
    return _body(layers, hidden, mlp, heads, kv, head_dim=hidden // heads, rope_theta=10000.0) | {"tie_word_embeddings": False}


# name -> (the make-tiny/make-model directory whose tokenizer and config it starts from, config.json changes,
# weight dtype, GRPO settings changed from GSM8K). Dimensions from each model's published config.json. Llama 3.2 1B is
# not here: rljob refuses its config (rope factor 32; MaxText 0.2.5's llama3 RoPE scaling is fixed at 8).
# TinyLlama-1.1B was taken for the largest Llama-family model that fits full fine-tuning on one v5e chip
# (SmolLM2-1.7B's parameters, gradients, moments and reference alone need 15.9 GiB); its body here keeps SmolLM2's
# 49,152-token vocabulary (TinyLlama's own is 32,000) so that the GSM8K prompts' token ids stay inside the table:
# 1.17B parameters where the real model has 1.10B.
SHAPES: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "tiny": ("tiny-llama", {}, "float32", {"max_prefill_predict_length": 128, "max_target_length": 256}),
    "smollm2-135m": ("smollm2", {}, "bfloat16", {}),
    "qwen3-0.6b": ("tiny-qwen3", _qwen3(28, 1024, 3072, 16, 8), "bfloat16", {"batch_size": 1}),
    "tinyllama-1.1b": ("smollm2", _llama(22, 2048, 5632, 32, 4), "bfloat16", {"batch_size": 1}),
    # SmolLM2-360M (tied, as published): the largest Llama-family model the fit estimate now accepts on one v5e chip
    # (TinyLlama's body ran out of HBM at its third step, and the estimate by phase refuses it).
    "smollm2-360m": ("smollm2", _body(32, 960, 2560, 15, 5, head_dim=64, rope_theta=100000.0), "bfloat16", {}),
}


@dataclass(frozen=True)
class Precision:
    """A variant's model settings (spec fields), the MaxText settings it appends after the trainer's own, and what MaxText
    must end up reading: each key's last value on the train command (MaxText takes the last), whoever wrote it."""

    model: dict[str, str]
    overrides: tuple[str, ...]
    reads: dict[str, str]


# Variants by their `run --precision` (None: the shape's own). MaxText's default matmul precision on TPU takes one bf16
# pass, so float32 weights alone would still multiply in bf16; logits-float32 keeps bf16 everywhere but the logits'
# projection: the spec's model.logits_dtype (since 92d0630; the variants kept from 6f98f53 appended MaxText's
# logits_dot_in_fp32=true instead, which MaxText reads the same), which the rollout engine reads from the same config.
PRECISIONS: dict[str | None, Precision] = {
    None: Precision({}, (), {}),
    "float32": Precision(
        {"dtype": "float32", "compute_dtype": "float32"},
        ("matmul_precision=highest",),
        {"weight_dtype": "float32", "dtype": "float32", "matmul_precision": "highest"},
    ),
    "float32-compute": Precision(
        {"compute_dtype": "float32"}, ("matmul_precision=highest",), {"dtype": "float32", "matmul_precision": "highest"}
    ),
    "logits-float32": Precision({"logits_dtype": "float32"}, (), {"logits_dot_in_fp32": "true"}),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def _trainer(*args: str, out: Path) -> Path:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    subprocess.run([sys.executable, "-m", "trainer", *args, "--out", str(out)], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return out


def prepare() -> None:
    """Configs and tokenizers (no weights), GSM8K rows, packed as bench/.tpu-inputs.tar.gz for the chip."""
    work = INPUTS.with_suffix(".build")
    shutil.rmtree(work, ignore_errors=True)
    bases = {
        "tiny-llama": _trainer("make-tiny", out=work / "tiny-llama") / "model",
        "tiny-qwen3": _trainer("make-tiny", "--family", "qwen3", out=work / "tiny-qwen3") / "model",
        "smollm2": _trainer("make-model", "smollm2-135m", out=work / "smollm2"),
    }
    _trainer("make-data", "gsm8k", "--train-rows", "200", out=work / "gsm8k")
    shutil.rmtree(INPUTS, ignore_errors=True)
    for name, (base, changes, _, _) in SHAPES.items():
        target = INPUTS / "models" / name
        target.mkdir(parents=True)
        config = json.loads((bases[base] / "config.json").read_text())
        config.update(changes)
        (target / "config.json").write_text(json.dumps(config, indent=2))
        for file in TOKENIZER_FILES:
            if (bases[base] / file).exists():
                shutil.copy(bases[base] / file, target / file)
    shutil.copytree(work / "gsm8k", INPUTS / "gsm8k", ignore=shutil.ignore_patterns("*.jsonl"))
    with tarfile.open(INPUTS.with_suffix(".tar.gz"), "w:gz") as tar:
        tar.add(INPUTS, arcname=INPUTS.name)
    shutil.rmtree(work)
    print(f"wrote {INPUTS.with_suffix('.tar.gz')} ({INPUTS.with_suffix('.tar.gz').stat().st_size / 2**20:.1f} MiB)")


def spec_for(name: str, runs: Path, batch_size: int | None = None, precision: str | None = None) -> Any:
    """The shape's job spec. `precision`, the variants of the sampler-trainer agreement by precision (issue 66 §2):
    `float32`, weights and compute in float32 (model.dtype and model.compute_dtype); `float32-compute`, the shape's
    weights with float32 compute (where float32 weights do not fit); `logits-float32`, the shape's spec (its change
    is a MaxText setting, PRECISIONS)."""
    from trainer.contract import JobSpec

    _, _, dtype, changes = SHAPES[name]
    model_dir = INPUTS / "models" / name
    model = {"source": str(model_dir), "dtype": dtype} | PRECISIONS[precision].model
    return JobSpec.model_validate(
        {
            "name": f"tpu-{name.replace('.', '-')}",
            "model": model,
            "dataset": {"train_files": [str(INPUTS / "gsm8k" / "train.parquet")], "eval_files": [str(INPUTS / "gsm8k" / "eval.parquet")]},
            "grpo": {
                **GSM8K,
                **changes,
                **({"batch_size": batch_size} if batch_size else {}),
                "rewards": {
                    "functions_path": str(REPO / "examples" / "rewards" / "gsm8k_answer_line.py"),
                    "functions": ["answer_line_format", "answer_line_correct"],
                },
            },
            "hardware": {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"},
            "export": {"enabled": False},
            "output": str(runs),
        }
    )


def random_init_command(spec: Any, work: Path) -> tuple[list[str], dict[str, str]]:
    """The train stage's command for `spec` as the trainer builds it, with MaxText's random initialisation."""
    from trainer.contract import RunLayout, default_job_id
    from trainer.sources import materialise_dataset, resolve_model
    from trainer.stages.train import build_train_command

    layout = RunLayout(spec.output, default_job_id(spec))
    source = spec.model.source
    command = build_train_command(
        spec,
        layout,
        resolve_model(spec, allow_hub=False),
        local_data=materialise_dataset(spec, work / "data"),
        local_tokenizer=source,
        local_source=source,
        local_rewards=spec.grpo.rewards.functions_path,
    )
    args = [a for a in command.args if not a.startswith("load_parameters_path=")]
    return [sys.executable, "-m", command.module, *args, "convert_checkpoint_if_possible=false"], dict(command.env)


def steps_from_log(lines: list[str]) -> list[dict[str, Any]]:
    """Each step's seconds by part: the differences of the cumulative RLJOB_GOODPUT lines."""
    from trainer.contract.run.goodput import GOODPUT_LINE_PREFIX, TRAIN_PARTS, TrainGoodput

    reports = [TrainGoodput.model_validate_json(line.split(GOODPUT_LINE_PREFIX, 1)[1]) for line in lines if GOODPUT_LINE_PREFIX in line]
    steps, last = [], None
    for report in reports:
        if report.final or (last is not None and report.step == last.step):
            continue
        before = last.parts if last else dict.fromkeys(TRAIN_PARTS, 0.0)
        parts = {p: round(report.parts.get(p, 0.0) - before.get(p, 0.0), 3) for p in TRAIN_PARTS}
        wall = report.elapsed_s - (last.elapsed_s if last else 0.0)
        steps.append({"step": report.step, "wall_s": round(wall, 3), "parts": parts, "rest_s": round(wall - sum(parts.values()), 3)})
        last = report
    return steps


def label_of(name: str, batch_size: int, precision: str | None) -> str:
    return f"{name}-b{batch_size}" + (f"-{precision}" if precision else "")


def parse_label(label: str) -> tuple[str, int, str | None]:
    """(shape name, batch size, precision) of a run's label."""
    found = re.fullmatch(r"(.+?)-b(\d+)(?:-(.+))?", label)
    if found is None:
        raise ValueError(f"{label!r} is not NAME-bBATCH[-PRECISION]")
    return found[1], int(found[2]), found[3]


def run_shape(
    name: str,
    out: Path,
    batch_size: int | None = None,
    trace_step: int = 0,
    overrides: tuple[str, ...] = (),
    precision: str | None = None,
) -> dict[str, Any]:
    from trainer.sizing.fit import estimate_job_fit

    work = Path(os.environ.get("TMPDIR", "/tmp")) / "rljob-tpu-grpo" / name
    shutil.rmtree(work, ignore_errors=True)
    spec = spec_for(name, work / "runs", batch_size, precision)
    label = label_of(name, spec.grpo.batch_size, precision)
    estimate = estimate_job_fit(spec)
    argv, env = random_init_command(spec, work)
    overrides = PRECISIONS[precision].overrides + overrides
    argv += list(overrides)  # a variant's MaxText settings, after the trainer's own: MaxText takes the last
    probe = work / "probe.json"
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(PROBE_DIR), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env["RLJOB_BENCH_PROBE_OUT"] = str(probe)
    env["RLJOB_BENCH_PROBE_TRACE_STEP"] = str(trace_step)
    log_path = out / f"tpu_grpo-{label}.log"
    started = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.run(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.monotonic() - started
    lines = log_path.read_text(errors="replace").splitlines()
    result = {
        "shape": label,
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "settings": {k: getattr(spec.grpo, k) for k in GSM8K}
        | {"weight_dtype": spec.model.dtype, "compute_dtype": spec.model.resolved_compute_dtype("v5e-1")},
        "parameters": estimate.parameters if estimate else None,
        "fit_estimate": estimate.model_dump() if estimate else None,
        "probe": json.loads(probe.read_text()) if probe.exists() else None,
        "steps": steps_from_log(lines),
        "sandbox": [line for line in lines if "rljob: reward sandbox:" in line][:2],
        "reward_failures": sum("RLJOB_REWARD_FAILED" in line for line in lines),
        "objective": [line[-400:] for line in lines if "GRPO config resolved" in line][:1],
        "completed": any("RL Training Completed Successfully" in line for line in lines),
        "samples": _samples(work / "runs"),
        "agreement": _agreement(work / "runs"),
        "command": argv[1:],
        "trace_step": trace_step,
        "maxtext_overrides": list(overrides),
    }
    trace = Path(f"{probe}.trace")
    if trace.is_dir():
        profile_tables(trace, out / f"profile-{label}.json.gz")
    (out / f"tpu_grpo-{label}.json").write_text(json.dumps(result, indent=1))
    print(label, "exit", proc.returncode, "wall", round(wall), "steps", [s["wall_s"] for s in result["steps"]], flush=True)
    return result


def _agreement(runs: Path) -> dict[str, dict[str, float]]:
    """The sampler-trainer agreement each step logged (trainer/maxtext_entry/logprob_agreement.py), tag -> step -> value."""
    from trainer.progress.tensorboard_scalars import read_scalars

    if not runs.is_dir():
        return {}
    return {
        tag: {str(step): value for step, value in sorted(by_step.items())}
        for tag, by_step in read_scalars(runs).items()
        if tag.startswith("sampler_trainer/")
    }


def profile_tables(trace: Path, target: Path) -> None:
    """xprof's per-HLO-op table and roofline of the traced step, from the profiler's xplane.pb (about 100 MB for
    one step: too large to carry back, so it is read where it was written)."""
    from xprof.convert import raw_to_tool_data

    paths = [str(p) for p in trace.rglob("*.xplane.pb")]
    tables = {}
    for tool in ("hlo_stats", "roofline_model"):
        data, _ = raw_to_tool_data.xspace_to_tool_data(paths, tool, {})
        tables[tool] = json.loads(data) if data else None
    with gzip.open(target, "wt") as f:
        json.dump(tables, f)


def _samples(runs: Path) -> dict[str, Any]:
    """Rewards the reward sandbox returned, from the sample recorder's files: which runs scored rewards."""
    rewards: list[float] = []
    for file in sorted(runs.rglob("samples/train-*.json")):
        for sample in json.loads(file.read_text()).get("samples", []):
            rewards += [float(r) for r in (sample.get("rewards") or {}).values() if isinstance(r, (int, float))]
    return {"rewards_seen": len(rewards), "nonzero": sum(r != 0 for r in rewards)}


def run(
    out: Path,
    shapes: list[str],
    batch_size: int | None = None,
    trace_step: int = 0,
    overrides: tuple[str, ...] = (),
    precision: str | None = None,
) -> None:
    """Each of `shapes` (`name` or `name:batch_size`) in turn, after the chip's HBM bandwidth (its own process: the
    chip takes one process at a time)."""
    out.mkdir(parents=True, exist_ok=True)
    if not INPUTS.exists():
        with tarfile.open(INPUTS.with_suffix(".tar.gz")) as tar:
            tar.extractall(INPUTS.parent, filter="data")
    subprocess.run([sys.executable, __file__, "bandwidth", "--out", str(out)], check=True)
    for entry in shapes:
        name, _, batch = entry.partition(":")
        run_shape(name, out, int(batch) if batch else batch_size, trace_step, overrides, precision)


def _steady(shape: dict[str, Any], bandwidth_bytes_per_s: float) -> dict[str, Any] | None:
    """Means over the steps after the first, leaving out the one after the profiled step (the profiler's dump)."""
    from bench.chip.tpu_grpo_profile import decode_bytes

    trace = shape.get("trace_step") or 0
    steady = [s for s in shape["steps"] if s["step"] > 1 and not (trace and s["step"] == trace + 1)]
    if not steady or not shape["parameters"]:
        return None
    s = shape["settings"]
    sequences = s["batch_size"] * s["num_generations"]
    tokens = sequences * s["max_target_length"]
    positions = s["max_target_length"] - s["max_prefill_predict_length"]
    update = sum(x["parts"]["update"] for x in steady) / len(steady)
    rollout = sum(x["parts"]["rollout"] for x in steady) / len(steady)
    wall = sum(x["wall_s"] for x in steady)
    config = json.loads((INPUTS / "models" / parse_label(shape["shape"])[0] / "config.json").read_text())
    weight_bytes = 2 if s["compute_dtype"] == "bfloat16" else 4  # the engine's layout is in the compute dtype
    step_bytes = decode_bytes(config, shape["parameters"], sequences, s["max_target_length"] + s["kv_cache_buffer"], weight_bytes)
    return {
        "steps": len(steady),
        "step_s": round(sum(x["wall_s"] for x in steady) / len(steady), 3),
        "rollout_s": round(rollout, 3),
        "update_s": round(update, 3),
        # the step waiting on the host for the reference's and the agreement's forwards (a share of the rest)
        "logprobs_s": round(sum(x["parts"].get("logprobs", 0.0) for x in steady) / len(steady), 3),
        "checkpoint_s": round(sum(x["parts"]["checkpoint"] for x in steady) / len(steady), 3),
        # what is neither rollout, update nor a checkpoint save (whose period is the job's own setting)
        "rest_share": round(
            sum(x["wall_s"] - x["parts"]["rollout"] - x["parts"]["update"] - x["parts"]["checkpoint"] for x in steady) / wall, 3
        ),
        "rollout_tokens_per_s": round(sequences * positions / rollout, 1),
        "rollout_ms_per_token_position": round(rollout / positions * 1000, 2),
        "update_mfu": round(6 * shape["parameters"] * tokens / update / TPU_GENERATIONS["v5e"].peak_bf16_flops_per_device, 3),
        "decode_bytes_per_step": step_bytes,
        "decode_bound_ms": round(step_bytes / bandwidth_bytes_per_s * 1000, 3),
    }


def collect(folder: Path, device: str, variants: Path | None = None) -> None:
    """One result file from the chip's per-shape files, with the chip, JAX's version, the commit measured, the HBM
    bandwidth measured beside them and the profiled steps' summaries. `variants`: runs of the same shapes with MaxText
    settings of their own (`run --override`), kept apart from the trainer's figures."""
    from bench.chip.tpu_grpo_profile import best_bandwidth
    from bench.result_meta import machine_facts, write_result

    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("bandwidth*.json"))]
    if variants is not None:
        runs += [json.loads(p.read_text()) for p in sorted(variants.glob("bandwidth*.json"))]
    bandwidth = sum(best_bandwidth(r) for r in runs) / len(runs)
    facts = machine_facts()
    report = {
        "device": device,
        "jax": "0.11.1",
        "trainer_commit": facts["commit"],
        "trainer_files": list(TRAINER_FILES),
        "hbm_bandwidth": {
            "bytes_per_s": round(bandwidth),
            "runs": runs,
            "spec_bytes_per_s": TPU_GENERATIONS["v5e"].hbm_bytes_per_s_per_device,
        },
        "shapes": _collect_shapes(folder, bandwidth),
        "variants": [_checked_label(v) for v in _collect_shapes(variants, bandwidth)] if variants is not None else [],
    }
    write_result(RESULT, report, facts)


def collect_variants(folder: Path, path: Path = REPO / "bench" / "results" / RESULT) -> None:
    """Variants run in a later session (`run --precision`, `run --override`) into the committed result, its shapes kept:
    only where the trainer files they ran are the result's (unchanged since its commit), so they pair with its shapes."""
    from bench.chip.tpu_grpo_profile import best_bandwidth
    from bench.result_meta import machine_facts

    report = json.loads(path.read_text())
    diff = subprocess.run(
        ["git", "diff", "--name-only", report["trainer_commit"], "--", *report["trainer_files"]],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    if diff.stdout.split():
        raise SystemExit(
            f"{path}: its trainer files changed since {report['trainer_commit']} ({diff.stdout.split()}): run its shapes again"
        )
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("bandwidth*.json"))]
    bandwidth = sum(best_bandwidth(r) for r in runs) / len(runs)
    facts = machine_facts()
    variants = [_checked_label(v) for v in _collect_shapes(folder, bandwidth)]
    for variant in variants:
        variant["session"] = {"collected_at": facts["started_at"], "commit": facts["commit"], "hbm_bytes_per_s": round(bandwidth)}
    report["variants"] = variants
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}: {len(variants)} variant(s)")


def _checked_label(variant: dict[str, Any]) -> dict[str, Any]:
    """A variant's label names what it ran: the train command it recorded leaves MaxText reading its precision's
    settings (each key's last value; the trainer's own or an appended override alike)."""
    precision = parse_label(variant["shape"])[2]
    if precision not in PRECISIONS:
        raise SystemExit(f"{variant['shape']}: no precision {precision!r} (PRECISIONS)")
    read = dict(arg.split("=", 1) for arg in variant["command"] if "=" in arg and not arg.startswith("-"))
    expected = PRECISIONS[precision].reads
    if {key: read.get(key) for key in expected} != expected:
        raise SystemExit(f"{variant['shape']}: MaxText read { ({key: read.get(key) for key in expected}) }, its label's are {expected}")
    return variant


def _collect_shapes(folder: Path, bandwidth: float) -> list[dict[str, Any]]:
    from bench.chip.tpu_grpo_profile import memory_summary, summarise
    from trainer.sizing.fit import estimate_job_fit

    shapes = [json.loads(p.read_text()) for p in sorted(folder.glob("tpu_grpo-*.json"))]
    for shape in shapes:
        # The estimate as the service makes it now (pure: the spec in), not as the chip's copy of the code made it.
        name, batch, precision = parse_label(shape["shape"])
        estimate = estimate_job_fit(spec_for(name, folder / "runs", batch, precision))
        shape["fit_estimate"] = estimate.model_dump() if estimate else None
        shape["steady"] = _steady(shape, bandwidth)
        shape["memory"] = memory_summary(shape)
        profile = folder / f"profile-{shape['shape']}.json.gz"
        shape["profile"] = summarise(profile) if profile.exists() else None
        if shape["steady"] and shape["profile"] and shape["profile"]["decode_ms_per_step"]:
            shape["steady"]["decode_over_bound"] = round(shape["profile"]["decode_ms_per_step"] / shape["steady"]["decode_bound_ms"], 2)
        memory = shape["memory"] or {}
        if memory and shape["fit_estimate"]:
            shape["peak_over_estimate"] = round(memory["peak_bytes_in_use"] / shape["fit_estimate"]["total_bytes_per_chip"], 3)
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare")
    p = sub.add_parser("run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--batch-size", type=int, default=None, help="GRPO batch_size instead of the shape's")
    p.add_argument("--trace-step", type=int, default=0, help="record this step with JAX's profiler (0: none)")
    p.add_argument("--override", action="append", default=[], help="a MaxText KEY=VALUE after the trainer's own (a variant)")
    p.add_argument(
        "--precision",
        choices=[p for p in PRECISIONS if p],
        default=None,
        help="float32: weights and compute in float32; float32-compute: float32 compute only; logits-float32: the logits' "
        "projection in float32 (model.logits_dtype) (a variant, so labelled; each sets its spec fields and MaxText settings, PRECISIONS)",
    )
    b = sub.add_parser("bandwidth")
    b.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("collect")
    c.add_argument("folder", type=Path)
    c.add_argument("--variants", type=Path, default=None, help="a folder of `run --override` runs")
    c.add_argument("--device", default="one TPU v5e chip (JAX device kind 'TPU v5 lite'), gVisor, the machine's libtpu")
    v = sub.add_parser("collect-variants", help="a later session's variants into the committed result, its shapes kept")
    v.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare()
    elif args.command == "run":
        run(args.out, args.shapes.split(","), args.batch_size, args.trace_step, tuple(args.override), args.precision)
    elif args.command == "bandwidth":
        from bench.chip.tpu_grpo_profile import measure_bandwidth

        measure_bandwidth(args.out)
    elif args.command == "collect-variants":
        collect_variants(args.folder)
    else:
        collect(args.folder, args.device, args.variants)


if __name__ == "__main__":
    main()
