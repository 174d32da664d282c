"""How fast does the jax rollout engine sample on CPU, against Hugging Face and the memory-bandwidth bound?

One process, one model (SmolLM2-135M-Instruct, dequantised Q4_1, converted to MaxText by rljob's own
convert stage), one GSM8K prompt in train_rl's template, repeated 8 times as GRPO repeats it
(num_generations), 160 new tokens each, sampled as examples/smollm2-gsm8k-cpu.yaml samples (temperature
1.0, top-k 50, top-p 1.0), fp32 weights and compute. Every completion runs to 160 tokens (no stop token)
so each engine does the same work. Measured, in this order and under the same load:

- `shipped`: the engine as it was at SHIPPED_COMMIT (its two modules read from git into a temporary
  package), through the same Tunix sampler and rollout config train_rl builds;
- `<commit>` (any, e.g. each change's): the engine at that commit, the same way;
- `current`: the engine in this checkout;
- `hf`: transformers `generate` (KV cache, torch's own threads) on the same weights, 8 sequences;
- the bound: parameter bytes plus the KV cache's bytes per decode step (the issue's definition: every
  slot of the 424-slot cache, 8 sequences) over the machine's measured read bandwidth.

tokens/s = 8 x 160 / the wall time of one `generate` call (prefill included), the median of REPEATS
calls after a compiling call. Decode ms/step comes from two lengths: (t(160) - t(SHORT)) / (160 - SHORT).
The engines are interleaved: after every call has compiled, each of REPEATS rounds calls every engine in turn
(the order reversed on odd rounds), so load from other work on the cores lands on all of them alike; each
call's wall and process CPU seconds are kept, and cpu_s_per_wall_s is their ratio over an engine's calls.

    flock /tmp/rljob-bench.lock .venv/bin/python bench/rollout/rollout_speed.py [--engines shipped,current,hf]
    ... --engines current,hf --neighbours 1 --out bench/results/rollout_speed_shared.json   (the cores shared)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.rollout import rollout_engine_files  # noqa: E402  (after the path and environment above)

RESULT_FILE = REPO / "bench" / "results" / "rollout_speed.json"
SHIPPED_COMMIT = "30a5fc998f292095b21bbbb7bae02c44881d04ba"  # the engine before issue 21 part 2
GENERATIONS, NEW_TOKENS, SHORT_TOKENS = 8, 160, 32
PROMPT_SLOTS, KV_CACHE_BUFFER = 256, 8  # examples/smollm2-gsm8k-cpu.yaml: max_prefill 256, target 416
# bench/learning/learning.py's jobs (examples/smollm2-arith-cpu.yaml): 128 prompt slots, 32 new tokens, 8 generations
LEARNING_SLOTS, LEARNING_TOKENS = 128, 32
LEARNING_RESULT = REPO / "bench" / "results" / "learning-lr3e-06.json"  # its run with these lengths
TEMPERATURE, TOP_K, TOP_P, SEED = 1.0, 50, 1.0, 0
REPEATS = 3
QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)  # GSM8K train row 0


def prepare(work: Path) -> tuple[Path, str, Any]:
    """The model directory, its converted MaxText items and rljob's MaxTextModel, built once per work dir."""
    from trainer.contract import JobSpec, RunLayout
    from trainer.runner import run_stage_command
    from trainer.sources import resolve_model
    from trainer.stages.convert import build_convert_command

    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(model_dir)], cwd=REPO, check=True, timeout=900
        )
    spec = JobSpec.model_validate(
        {
            "name": "rollout-speed",
            "model": {"source": str(model_dir), "dtype": "float32"},
            "output": str(work / "runs"),
            "hardware": {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax"},
        }
    )
    layout = RunLayout(spec.output, "rl-rolloutspeed1")
    model = resolve_model(spec)
    items = f"{layout.converted_dir}/0/items"
    if not Path(items).exists():
        run_stage_command(build_convert_command(spec, layout, model), work / "convert.log")
    return model_dir, items, model


def load_maxtext(items: str, model: Any, work: Path) -> tuple[Any, Any]:
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils

    from trainer.stages.maxtext_paths import base_config

    config = pyconfig.initialize(
        [
            "",
            base_config(),
            f"model_name={model.name}",
            f"load_parameters_path={items}",
            "scan_layers=true",
            "weight_dtype=float32",
            "dtype=float32",
            "attention=dot_product",
            "skip_jax_distributed_system=true",
            "enable_checkpointing=false",
            "per_device_batch_size=1",
            "run_name=rollout-speed",
            f"max_target_length={PROMPT_SLOTS + NEW_TOKENS}",
            f"max_prefill_predict_length={PROMPT_SLOTS}",
            f"base_output_directory={work}/maxtext-out",
            *model.args(),
        ]
    )
    return model_creation_utils.from_pretrained(config)


def prompt_text() -> str:
    """train_rl's GSM8K prompt (maxtext's gsm8k_rl template, rl.yml's reasoning and answer tags)."""
    template_file = Path(importlib.import_module("maxtext").__file__).parent / "examples/chat_templates/gsm8k_rl.json"
    template = json.loads(template_file.read_text())
    system = template["SYSTEM_PROMPT"].format(
        reasoning_start_token="<reasoning>",
        reasoning_end_token="</reasoning>",
        solution_start_token="<answer>",
        solution_end_token="</answer>",
    )
    return str(template["TEMPLATE"].format(system_prompt=system, question=QUESTION))


def import_engine(commit: str) -> Any:
    """The rollout module as it was at `commit`, imported from a temporary package (its own cached_llama and the
    other sibling modules it imports: bench/rollout/rollout_engine_files.py)."""
    name = f"engine_{commit[:12]}"
    pkg = Path(tempfile.mkdtemp(prefix="rljob-engine-")) / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    read = rollout_engine_files.read_at(commit)
    package = rollout_engine_files.package_at(commit)
    for rel in rollout_engine_files.engine_files(commit):
        target = pkg / Path(rel).relative_to(package)  # native/ sources keep their folder
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(read(rel) or "")
    sys.path.insert(0, str(pkg.parent))
    engine = importlib.import_module(f"{name}.jax_rollout")
    kernel = sys.modules.get(f"{name}.few_rows_matmul")
    if kernel is not None and hasattr(kernel, "library"):
        # An engine whose kernel is built at setup (issue 54 on) only looks it up at use: build this copy's, or its
        # decode would fall back to XLA's dot and its figures would not be the engine's.
        kernel.build()
    return engine


def rollout_config(new_tokens: int, slots: int = PROMPT_SLOTS, most_tokens: int = NEW_TOKENS) -> Any:
    from tunix.rl.rollout import base_rollout

    return base_rollout.RolloutConfig(
        max_tokens_to_generate=new_tokens,
        max_prompt_length=slots,
        kv_cache_size=slots + most_tokens + KV_CACHE_BUFFER,
        temperature=TEMPERATURE,
        top_p=TOP_P,
        top_k=TOP_K,
        seed=SEED,
        eos_tokens=[-1],  # no token is -1: every completion runs to its length
    )


def timed(call: Any) -> tuple[float, float]:
    """One call's wall seconds and the process's CPU seconds over it."""
    cpu, start = sum(os.times()[:2]), time.perf_counter()
    call()
    return time.perf_counter() - start, sum(os.times()[:2]) - cpu


def jax_calls(rollout_cls: Any, maxtext_model: Any, mesh: Any, tokenizer: Any, prompt: str, out: dict[str, Any]) -> dict[str, Any]:
    """One engine's calls by length (and the learning bench's shape); the long call keeps a sample in `out`."""
    rollout = rollout_cls(SimpleNamespace(base=maxtext_model), tokenizer, mesh, rollout_config(NEW_TOKENS))
    learning = rollout_config(LEARNING_TOKENS, LEARNING_SLOTS, LEARNING_TOKENS)
    learning_rollout = rollout_cls(SimpleNamespace(base=maxtext_model), tokenizer, mesh, learning)
    prompts = [prompt] * GENERATIONS

    def call(tokens: int) -> None:
        result = rollout.generate(prompts, rollout_config(tokens))
        lengths = [len(t) for t in result.tokens]
        assert lengths == [tokens] * GENERATIONS, lengths
        if tokens == NEW_TOKENS:
            out["sample_text"] = result.text[0][:300]

    return {
        str(NEW_TOKENS): lambda: call(NEW_TOKENS),
        str(SHORT_TOKENS): lambda: call(SHORT_TOKENS),
        "learning": lambda: learning_rollout.generate(prompts, learning),
    }


def hf_calls(model_dir: Path, prompt: str, out: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer(prompt)["input_ids"]] * GENERATIONS)
    out["torch_threads"] = torch.get_num_threads()
    torch.manual_seed(SEED)

    def call(n: int) -> Any:
        with torch.inference_mode():
            return model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=TEMPERATURE,
                top_k=TOP_K,
                top_p=TOP_P,
                max_new_tokens=n,
                min_new_tokens=n,
                pad_token_id=tokenizer.eos_token_id,
            )

    return {str(NEW_TOKENS): lambda: call(NEW_TOKENS), str(SHORT_TOKENS): lambda: call(SHORT_TOKENS)}


def run_interleaved(calls: dict[str, dict[str, Any]], out: dict[str, dict[str, Any]], repeats: int) -> None:
    """Every call once to compile, then `repeats` rounds, each calling every engine in turn (the order reversed
    on odd rounds), so a neighbour's load lands on all engines alike rather than on whichever ran then."""
    for name, by_key in calls.items():
        for key, call in by_key.items():
            out[name][key] = {"first_call_s": round(timed(call)[0], 3), "times_s": [], "cpu_s": []}
            print(name, key, "compiled", out[name][key]["first_call_s"], flush=True)
    for round_ in range(repeats):
        for name in list(calls) if round_ % 2 == 0 else list(calls)[::-1]:
            for key, call in calls[name].items():
                wall, cpu = timed(call)
                out[name][key]["times_s"].append(round(wall, 4))
                out[name][key]["cpu_s"].append(round(cpu, 3))
            print(name, round_, {k: out[name][k]["times_s"][-1] for k in calls[name]}, flush=True)
    for name, by_key in calls.items():
        e = out[name]
        for key in by_key:
            e[key]["cpu_s_per_wall_s"] = round(sum(e[key]["cpu_s"]) / sum(e[key]["times_s"]), 2)
        long_s, short_s = (statistics.median(e[str(n)]["times_s"]) for n in (NEW_TOKENS, SHORT_TOKENS))
        e["tokens_per_s"] = round(GENERATIONS * NEW_TOKENS / long_s, 2)
        e["decode_ms_per_step"] = round((long_s - short_s) / (NEW_TOKENS - SHORT_TOKENS) * 1000, 2)
        if "learning" in e:
            e["learning_shape_s"] = statistics.median(e.pop("learning")["times_s"])
            e["prefill_and_overhead_s"] = round(short_s - SHORT_TOKENS * e["decode_ms_per_step"] / 1000, 3)
        print(name, json.dumps(e), flush=True)


@contextlib.contextmanager
def busy_neighbours(count: int) -> Iterator[None]:
    """`count` processes spinning on the cores meanwhile: other work sharing the machine, as when two jobs or a test
    run share it, landing on every engine alike (the rounds interleave them)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def read_bandwidth_gb_s() -> dict[str, float]:
    """Best of numpy (one core) and XLA (its own threads) summing a 512 MiB fp32 array, 5 passes each."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    host = np.ones(128 * 2**20, np.float32)
    dev = jnp.asarray(host)
    total = jax.jit(jnp.sum)
    total(dev).block_until_ready()
    best = {"numpy": 0.0, "xla": 0.0}
    for _ in range(5):
        start = time.perf_counter()
        host.sum()
        best["numpy"] = max(best["numpy"], host.nbytes / (time.perf_counter() - start) / 1e9)
        start = time.perf_counter()
        total(dev).block_until_ready()
        best["xla"] = max(best["xla"], host.nbytes / (time.perf_counter() - start) / 1e9)
    return {k: round(v, 2) for k, v in best.items()}


def model_bytes(maxtext_model: Any, cache_slots: int) -> dict[str, int]:
    import jax
    from flax import nnx

    params = nnx.state(maxtext_model, nnx.Param)
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    c = maxtext_model.config
    kv_bytes = 2 * c.num_decoder_layers * GENERATIONS * cache_slots * c.num_kv_heads * c.head_dim * 4
    return {"param_bytes": int(param_bytes), "kv_bytes": int(kv_bytes)}


def git_commit(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", ref], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def machine() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "trainer/maxtext_entry", "bench/rollout/rollout_speed.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": commit,
        "engine_files_modified": bool(dirty),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--engines", default="shipped,current,hf", help="comma-separated: shipped, current, hf or a git commit; NAME=LABEL names a row"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "rljob-rollout-speed")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--out", type=Path, default=RESULT_FILE)
    parser.add_argument(
        "--neighbours", type=int, default=0, help="busy-loop processes sharing the cores during the measured rounds (not the bound's read)"
    )
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    args.work.mkdir(parents=True, exist_ok=True)
    model_dir, items, model = prepare(args.work)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = prompt_text()
    prompt_tokens = len(tokenizer(prompt)["input_ids"])
    result: dict[str, Any] = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (dequantised Q4_1), fp32",
        "generations": GENERATIONS,
        "new_tokens": NEW_TOKENS,
        "prompt_tokens": prompt_tokens,
        "prompt_slots": PROMPT_SLOTS,
        "cache_slots": PROMPT_SLOTS + NEW_TOKENS + KV_CACHE_BUFFER,
        "sampling": {"temperature": TEMPERATURE, "top_k": TOP_K, "top_p": TOP_P},
        "shipped_commit": SHIPPED_COMMIT,
        "engines": {},
    }
    maxtext_model, mesh = load_maxtext(items, model, args.work)
    calls: dict[str, dict[str, Any]] = {}
    for spec in engines:
        name, _, label = spec.partition("=")
        measured: dict[str, Any] = result["engines"].setdefault(name, {})
        if name == "hf":
            calls[name] = hf_calls(model_dir, prompt, measured)
            continue
        if name == "current":
            module = importlib.import_module("trainer.rollout.jax_rollout")
        else:
            module = import_engine(SHIPPED_COMMIT if name == "shipped" else name)
        calls[name] = jax_calls(module.JaxMaxTextRollout, maxtext_model, mesh, tokenizer, prompt, measured)
        measured["label"] = label or name
        measured["commit"] = result["machine"]["commit"] if name == "current" else git_commit(SHIPPED_COMMIT if name == "shipped" else name)
    result["neighbours"] = args.neighbours
    with busy_neighbours(args.neighbours):
        run_interleaved(calls, result["engines"], args.repeats)
    sizes = model_bytes(maxtext_model, result["cache_slots"])
    bandwidth = read_bandwidth_gb_s()
    step_bytes = sizes["param_bytes"] + sizes["kv_bytes"]
    bound_step_s = step_bytes / (max(bandwidth.values()) * 1e9)
    result["bound"] = {
        **sizes,
        "read_gb_s": bandwidth,
        "decode_ms_per_step": round(bound_step_s * 1000, 2),
        "tokens_per_s": round(GENERATIONS / bound_step_s, 2),
    }
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    engines_out = result["engines"]
    if "current" in engines_out:
        result["rljob_tokens_per_s"] = engines_out["current"]["tokens_per_s"]
    if "hf" in engines_out:
        result["hf_tokens_per_s"] = engines_out["hf"]["tokens_per_s"]
    result["bound_tokens_per_s"] = result["bound"]["tokens_per_s"]
    learning = json.loads(LEARNING_RESULT.read_text())["arms"]["trained"]
    result["learning_bench"] = {
        "result_file": LEARNING_RESULT.name,
        "steps": len(learning["train"]),
        "train_seconds": round(learning["train_seconds"], 1),
        "slots": LEARNING_SLOTS,
        "new_tokens": LEARNING_TOKENS,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "engines"}, indent=1))


if __name__ == "__main__":
    main()
