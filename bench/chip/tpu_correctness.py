"""The jax rollout engine and the GRPO step's patches, checked on the TPU chip as the CPU slow tests check them.

    python3.12 bench/chip/tpu_correctness.py run --out DIR [--shapes tiny,smollm2-135m]   # on the chip: DIR/tpu_correctness.json
    .venv/bin/python bench/chip/tpu_correctness.py collect DIR                              # here: bench/results/tpu_correctness.json

`run` needs bench/.tpu-inputs (or its .tar.gz; `bench/chip/tpu_grpo.py prepare` writes both): it reads each shape's
config.json only. It needs no network, and no torch: the chip's machine has none, so `run` makes torch unimportable
in itself and in its subprocesses (`sys.modules["torch"] = None`: `import torch` fails and `find_spec` finds nothing,
as where it is not installed; tensorboardX, which MaxText's pyconfig imports, otherwise takes torch here), and asserts
at the end that no torch module was loaded. With JAX_PLATFORMS=cpu it runs here too.

Per shape and dtype (fp32, and bf16 as `model.dtype: bfloat16` runs; MaxText's `dtype`/`weight_dtype`), MaxText's
model with its random initialisation (the norm scales and output projections redrawn as qwen3_rollout_check.py
does, so a misplaced norm shows) and the engine (`CachedLlamaLM`) built over the same arrays:

- logits: tests/trainer/maxtext_parity_check.py's `cached_rollout`, imported, not copied (two left-padded sequences of
  different lengths, one prefill then a token per decode step, every position against MaxText's full forward);
- greedy: the engine decodes NEW_TOKENS tokens greedily from two left-padded prompts, and MaxText's argmax after
  each prefix of the finished sequences must be the token the engine chose (the first disagreement is reported with
  MaxText's top-2 margin there: a disagreement inside the logit tolerance is a near-tie, not a wrong forward).

The step: `python -m tests.trainer.grpo_learner_step` (Tunix's own learner step under the entry shim's main, every
wrapper installed) with the objective's flags; its STEP line must equal tests/trainer/rollout/test_stop_token.py's
STOP_TOKEN_COUNTED (read from that file). The objective: the same main with a probe in train_rl's place that builds
`GrpoConfig` as train_rl's own call does; the resolved config must carry the flags' estimator and upper clip
(bench/chip/tpu_correctness_step.py). fp32 on TPU: if the logits miss the bound, the check runs again at fp32 matmul
precision and keeps both (XLA's default there multiplies fp32 in bf16 passes), as a diagnosis; the verdict is the
first. `run` exits 1 when a verdict is false, after writing the file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.chip.tpu_correctness_step import block_torch, import_check, step_checks, torch_loaded  # noqa: E402

INPUTS = REPO / "bench" / ".tpu-inputs"
RESULT = "tpu_correctness.json"
# What the verdicts are about: a change to any of them makes the result stale (tests/bench/chip/test_tpu_correctness_fresh.py).
TRAINER_FILES = (
    "trainer/rollout/cached_llama.py",
    "trainer/rollout/few_rows_matmul.py",
    "trainer/rollout/jax_rollout.py",
    "trainer/rollout/rollout_keys.py",
    "trainer/rollout/stop_token.py",
    "trainer/contract/run/shim_config.py",
    "trainer/maxtext_entry/grpo_objective.py",
    "trainer/maxtext_entry/train_rl_entry.py",
    "trainer/sizing/hf_model.py",
    "trainer/stages/train.py",
)
# Where the engine's files were until issue 54 moved them to trainer/rollout/: a change there at an older commit is a
# change to the same file.
FORMER_PATHS = tuple(
    rel.replace("trainer/rollout/", "trainer/maxtext_entry/") for rel in TRAINER_FILES if rel.startswith("trainer/rollout/")
)
SHAPES = ("tiny", "smollm2-135m", "qwen3-0.6b")
# Largest |engine - MaxText| allowed, relative to max(1, the largest |logit|). fp32: the CPU slow tests' bound
# (test_slow_qwen3_rollout.py, test_slow_pipeline.py). bf16: both sides round every product and the residual stream to
# 8 significant bits (2**-8 relative each) in different places (the engine fuses q/k/v and gate/up), and the largest
# difference over every logit of every position is a tail: measured on CPU, 2.1% of the scale (tiny) and 2.9%
# (smollm2-135m), so 2**-4. A wrong forward (a misplaced norm, RoPE, a mask) differs by the order of the scale itself.
TOLERANCE = {"float32": 1e-4, "bfloat16": 2**-4}
ROLLOUT_LENGTHS = (47, 22)  # cached_rollout's sequences: the shorter one's first half is the prefill
PROMPT_LENGTHS = (31, 20)
NEW_TOKENS = 16
PAD = 0


def sequences(lengths: tuple[int, ...], vocab: int, seed: int) -> list[list[int]]:
    """Fixed token ids (random weights make the tokenizer irrelevant); the first holds a pad-valued token mid-way,
    which must be attended as a token."""
    import numpy as np

    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, vocab, size=n).tolist() for n in lengths]
    seqs[0][len(seqs[0]) // 3] = PAD
    return seqs


def build_model(shape: str, dtype: str, max_length: int, untied: bool = False) -> tuple[Any, Any]:
    """MaxText's model for the shape's config.json (the trainer's own overrides), randomly initialised; `untied`: with
    an output projection of its own instead of the embedding table (a diagnosis: MaxText's tied logits dot takes XLA's
    default precision, every other dot `matmul_precision`)."""
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils

    from trainer.sizing.hf_model import resolve_maxtext_model
    from trainer.stages.maxtext_paths import base_config

    fp32_forward = import_check("maxtext_parity_check").FP32_FORWARD
    hf_config = json.loads((INPUTS / "models" / shape / "config.json").read_text())
    model = resolve_maxtext_model(None, None, hf_config | ({"tie_word_embeddings": False} if untied else {}))
    forward = [a for a in fp32_forward if not a.startswith(("dtype=", "weight_dtype="))] + [f"dtype={dtype}", f"weight_dtype={dtype}"]
    config = pyconfig.initialize(
        [
            "",
            base_config(),
            f"model_name={model.name}",
            *forward,
            "convert_checkpoint_if_possible=false",
            f"max_target_length={max_length}",
            "max_prefill_predict_length=8",
            "run_name=tpu-correctness",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/tpu-correctness",
            *model.args(),
        ]
    )
    maxtext, mesh = model_creation_utils.from_pretrained(config)
    _redraw(maxtext)
    return maxtext, mesh


def _redraw(model: Any) -> None:
    """qwen3_rollout_check.py's draw over this model: norm scales away from all ones, larger output projections."""
    import jax
    from flax import nnx

    draw = import_check("qwen3_rollout_check")._draw
    params = nnx.state(model, nnx.Param)
    leaves, tree = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))
    keys = jax.random.split(jax.random.key(7), len(leaves))
    drawn = [draw(jax.tree_util.keystr(path), value, key) for (path, value), key in zip(leaves, keys, strict=True)]
    nnx.replace_by_pure_dict(params, jax.tree_util.tree_unflatten(tree, drawn))
    nnx.update(model, params)


def _forward(model: Any, ids: list[int]) -> Any:
    import jax.numpy as jnp
    import numpy as np

    tokens = jnp.asarray([ids], jnp.int32)
    positions = jnp.arange(len(ids), dtype=jnp.int32)[None]
    return np.asarray(
        model(decoder_input_tokens=tokens, decoder_positions=positions, decoder_segment_ids=jnp.ones_like(tokens)), np.float32
    )[0]


def greedy(model: Any, mesh: Any, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """The engine's greedy tokens from left-padded prompts against MaxText's argmax after each prefix."""
    import jax.numpy as jnp
    import numpy as np

    from trainer.rollout.cached_llama import build_cached_llama

    cached = build_cached_llama(model)
    rows, width = len(prompts), max(len(p) for p in prompts)
    size = width + new_tokens
    buf, positions = np.full((rows, width), PAD, np.int32), np.zeros((rows, width), np.int32)
    real = np.ones((rows, size), bool)  # which cache slots hold a real token (left padding is masked)
    for row, ids in enumerate(prompts):
        buf[row, width - len(ids) :], positions[row, width - len(ids) :] = ids, np.arange(len(ids))
        real[row, : width - len(ids)] = False
    with mesh:
        cache = cached.init_cache(rows, size, None)
        mask = np.zeros((rows, width, size), bool)
        mask[:, :, :width] = np.tril(np.ones((width, width), bool)) & real[:, None, :width]
        logits, cache = cached(jnp.asarray(buf), jnp.asarray(positions), cache, jnp.asarray(mask))
        generated = np.zeros((rows, 0), np.int32)
        for step in range(new_tokens):
            token = np.asarray(logits, np.float32)[:, -1].argmax(-1).astype(np.int32)[:, None]
            generated = np.concatenate([generated, token], axis=1)
            if step < new_tokens - 1:
                step_mask = real[:, None, :].copy()
                step_mask[:, :, width + step + 1 :] = False
                pos = np.array([[len(p) + step] for p in prompts], np.int32)
                logits, cache = cached(jnp.asarray(token), jnp.asarray(pos), cache, jnp.asarray(step_mask))
        agree, first, worst = True, None, 0.0
        for row, ids in enumerate(prompts):
            reference = _forward(model, ids + generated[row].tolist())[len(ids) - 1 : -1]  # the logits each token was chosen from
            for t, chosen in enumerate(generated[row].tolist()):
                best = int(reference[t].argmax())
                top2 = np.sort(reference[t])[-2:]
                if best != chosen and first is None:
                    first = {"row": row, "token": t, "engine": chosen, "maxtext": best, "maxtext_top2_margin": float(top2[1] - top2[0])}
                agree = agree and best == chosen
                worst = max(worst, float(reference[t][best] - reference[t][chosen]))
    return {"tokens_equal": agree, "first_disagreement": first, "largest_logit_shortfall": worst, "generated": generated.tolist()}


def engine_check(shape: str, dtype: str, untied: bool = False) -> dict[str, Any]:
    import jax

    cached_rollout = import_check("maxtext_parity_check").cached_rollout
    longest = max(*ROLLOUT_LENGTHS, max(PROMPT_LENGTHS) + NEW_TOKENS)
    started = time.monotonic()
    model, mesh = build_model(shape, dtype, longest, untied)
    vocab = int(model.config.vocab_size)
    rollout = cached_rollout(model, mesh, sequences(ROLLOUT_LENGTHS, vocab, seed=1), PAD)
    result = {
        "shape": shape,
        "dtype": dtype,
        "untied": untied,
        "rollout": rollout,
        "greedy": greedy(model, mesh, sequences(PROMPT_LENGTHS, vocab, seed=2), NEW_TOKENS),
    }
    if dtype == "float32" and not engine_verdict(result)["logits_within_tolerance"]:
        # A diagnosis, not the verdict: on TPU an fp32 dot at XLA's default precision is a bf16 product unless asked.
        with jax.default_matmul_precision("float32"):
            result["rollout_at_fp32_matmul_precision"] = cached_rollout(model, mesh, sequences(ROLLOUT_LENGTHS, vocab, seed=1), PAD)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["verdict"] = engine_verdict(result)
    print(shape, dtype, json.dumps(result["verdict"]), flush=True)
    return result


def engine_verdict(result: dict[str, Any]) -> dict[str, Any]:
    rollout, greedy_result = result["rollout"], result["greedy"]
    tolerance = TOLERANCE[result["dtype"]] * max(1.0, rollout["logit_scale"])
    fp32 = result["dtype"] == "float32"
    # bf16 logits are MaxText's bf16 products: a few ulps apart at the top of a large vocabulary is common, so a greedy
    # token MaxText ranks below its best by no more than the logit tolerance is a near-tie, not a wrong forward.
    near_ties = greedy_result["largest_logit_shortfall"] <= tolerance
    return {
        "max_abs_diff": rollout["max_abs_diff"],
        "logit_scale": rollout["logit_scale"],
        "tolerance": tolerance,
        "logits_within_tolerance": rollout["max_abs_diff"] <= tolerance,
        "argmax_agree": rollout["argmax_agree"],
        "greedy_tokens_equal": greedy_result["tokens_equal"],
        "greedy_agrees": (greedy_result["tokens_equal"] and rollout["argmax_agree"])
        if fp32
        else (greedy_result["tokens_equal"] or near_ties),
    }


def unpack_inputs() -> None:
    if not INPUTS.exists():
        with tarfile.open(INPUTS.with_suffix(".tar.gz")) as tar:
            tar.extractall(INPUTS.parent, filter="data")


def run(out: Path, shapes: list[str], dtypes: list[str]) -> dict[str, Any]:
    import jax

    out.mkdir(parents=True, exist_ok=True)
    unpack_inputs()
    started = time.monotonic()
    # The step's subprocesses first: a TPU takes one process at a time (libtpu's lockfile), and this process holds
    # the chip from its first jax.devices() on.
    steps = step_checks(out)
    device = jax.devices()[0]
    engine = [engine_check(shape, dtype) for shape in shapes for dtype in dtypes]
    report = {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "jax": jax.__version__,
        "jax_default_matmul_precision": str(jax.config.jax_default_matmul_precision),
        "tolerance_relative_to_logit_scale": TOLERANCE,
        "engine": engine,
        **steps,
        "torch_loaded": torch_loaded(),
        "wall_s": round(time.monotonic() - started, 1),
    }
    report["verdicts"] = {
        "engine_logits_within_tolerance": all(e["verdict"]["logits_within_tolerance"] for e in engine),
        "greedy_agrees": all(e["verdict"]["greedy_agrees"] for e in engine),
        "stop_token_fix_active": steps["stop_token"]["active"],
        "objective_patch_active": steps["objective"]["active"],
    }
    (out / RESULT).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["verdicts"]), "wall", report["wall_s"], flush=True)
    assert not report["torch_loaded"], "torch was loaded: the chip's machine has none"
    return report


# Lines `shape dtype {verdict}` as `run` prints them, kept from a run that printed every shape's verdict and was
# stopped before it wrote its file (a call on the chip has ten minutes); they count in the verdicts.
PRINTED = "engine_printed.txt"
UNTIED = "untied.json"


def collect(folder: Path, more: list[Path] | None = None, untied: Path | None = None) -> None:
    """bench/results/tpu_correctness.json from the chip's file, with the commit whose trainer files ran there. `more`:
    runs of further shapes at the same files (one call on the chip has ten minutes), their engine checks appended."""
    from bench.result_meta import machine_facts, write_result

    facts = machine_facts()
    report = json.loads((folder / RESULT).read_text())
    for extra in more or []:
        other = json.loads((extra / RESULT).read_text())
        report["engine"] += other["engine"]
        report["wall_s"] = round(report["wall_s"] + other["wall_s"], 1)
        report["torch_loaded"] = report["torch_loaded"] or other["torch_loaded"]
        for name in ("engine_logits_within_tolerance", "greedy_agrees"):
            report["verdicts"][name] = report["verdicts"][name] and other["verdicts"][name]
    printed = folder / PRINTED
    if printed.exists():  # every shape's verdict as a run printed it, where that run stopped before writing its file
        rows = [line.split(" ", 2) for line in printed.read_text().splitlines() if line.strip()]
        whole = {(e["shape"], e["dtype"]) for e in report["engine"]}
        rows = [r for r in rows if (r[0], r[1]) not in whole]  # a later run's whole record stands for the printed line
        report["engine_printed"] = [{"shape": shape, "dtype": dtype, "verdict": json.loads(body)} for shape, dtype, body in rows]
        for name, key in (("engine_logits_within_tolerance", "logits_within_tolerance"), ("greedy_agrees", "greedy_agrees")):
            report["verdicts"][name] = report["verdicts"][name] and all(r["verdict"][key] for r in report["engine_printed"])
    if untied is not None:
        report["untied_diagnosis"] = json.loads((untied / UNTIED).read_text())
    write_result(RESULT, {**report, "trainer_commit": facts["commit"], "trainer_files": list(TRAINER_FILES)}, facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--dtypes", default=",".join(TOLERANCE))
    d = sub.add_parser("untied", help="the engine check with each shape's logits projection untied (a diagnosis)")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--shapes", required=True)
    d.add_argument("--dtypes", default="float32")
    c = sub.add_parser("collect")
    c.add_argument("folder", type=Path)
    c.add_argument("more", type=Path, nargs="*", help="runs of further shapes at the same trainer files")
    c.add_argument("--untied", type=Path, default=None, help="a folder of `untied` runs: kept as a diagnosis, no verdict")
    args = parser.parse_args()
    if args.command == "run":
        block_torch()
        report = run(args.out, args.shapes.split(","), args.dtypes.split(","))
        sys.exit(0 if all(report["verdicts"].values()) else 1)  # the file is written either way
    elif args.command == "untied":
        block_torch()
        args.out.mkdir(parents=True, exist_ok=True)
        unpack_inputs()
        checks = [engine_check(shape, dtype, untied=True) for shape in args.shapes.split(",") for dtype in args.dtypes.split(",")]
        (args.out / UNTIED).write_text(json.dumps(checks, indent=1) + "\n")
    else:
        collect(args.folder, args.more, args.untied)


if __name__ == "__main__":
    main()
