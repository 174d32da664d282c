"""The learning bench's peer arm: the same GRPO setting through TRL's GRPOTrainer on CPU.

A peer nobody here wrote: if TRL learns on a setting where rljob does not, the gap is ours. Everything
a GRPO update depends on is set to what an rljob job of the same spec runs (MaxText 0.2.5's rl.yml and
utils_rl.get_optimizer, read from the installed package):

- prompts: the exact text train_rl feeds the model (utils_rl.process_data with the spec's template),
  given to TRL as plain text, so TRL adds nothing (no chat template, no special tokens);
- rewards: the same reward file and function, called with the same `answer` JSON list;
- per step `batch_size` prompts x `num_generations` completions, one update per generation batch
  (TRL: per_device_train_batch_size = both multiplied, steps_per_generation 1, num_iterations 1);
- sampling: temperature, top-k and top-p of the spec, at most max_target_length -
  max_prefill_predict_length new tokens;
- objective: PPO-clipped ratio with epsilon (and epsilon_high), advantages normalised per group,
  KL to the frozen reference with weight beta through k3 (TRL's only estimator; rljob's default),
  sequence-mean-token-mean aggregation (TRL's loss_type "grpo");
- optimiser: AdamW b1 0.9, b2 0.99, eps 1e-8, weight decay 0.1, global-norm clip 0.1, learning rate
  warmed up linearly over warmup_steps_fraction of the run from 0, then cosine to 0.

    python bench/learning/peer_trl.py --model DIR --train ROWS.jsonl --template T.json --rewards FILE --function NAME
        --spec-json '{...grpo...}' --out DIR

Writes DIR/export (a Hugging Face model directory) and DIR/metrics.json (TRL's per-step log).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning.arith_difficulty import train_rl_rows  # noqa: E402


def load_reward(path: Path, name: str, seen: list[list[str]] | None = None):
    """The reward file's function as TRL calls it; each call's distinct prompts, in order, appended to `seen` (one call
    per generation batch: what each step trained on)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name)

    def reward(prompts, completions, answer, **_kwargs):
        if seen is not None:
            seen.append(list(dict.fromkeys(prompts)))
        return fn(prompts=prompts, completions=completions, tmvp_config=None, answer=answer)

    reward.__name__ = name
    return reward


def trl_config(grpo: dict, steps: int, out: Path, seed: int, shuffle: bool = True):
    from trl import GRPOConfig

    # TRL 1.16 has one KL estimator (k3) and loss_type "grpo" is sequence-mean-token-mean: refuse a setting it cannot match.
    if grpo["kl_estimator"] != "k3" or grpo["loss_agg_mode"] != "sequence-mean-token-mean":
        raise SystemExit(f"TRL runs k3 and sequence-mean-token-mean only, not {grpo['kl_estimator']} / {grpo['loss_agg_mode']}")
    new_tokens = grpo["max_target_length"] - grpo["max_prefill_predict_length"]
    return GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=True,
        bf16=False,
        seed=seed,
        # False: the rows in the file's order, each step the next batch_size of them (a stream shared with rljob's:
        # bench/learning/shared_stream.py); True: TRL's RepeatSampler shuffles them by the seed
        shuffle_dataset=shuffle,
        report_to="none",
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        per_device_train_batch_size=grpo["batch_size"] * grpo["num_generations"],
        num_generations=grpo["num_generations"],
        steps_per_generation=1,
        num_iterations=1,
        gradient_accumulation_steps=1,
        max_completion_length=new_tokens,
        temperature=grpo["temperature"],
        top_k=grpo["top_k"],
        top_p=grpo["top_p"],
        beta=grpo["beta"],
        epsilon=grpo["epsilon"],
        epsilon_high=grpo.get("epsilon_high") or grpo["epsilon"],
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=grpo["learning_rate"],
        lr_scheduler_type="cosine",
        warmup_steps=int(grpo["warmup_steps_fraction"] * steps),
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.99,
        adam_epsilon=1e-8,
        weight_decay=0.1,
        max_grad_norm=0.1,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--train", required=True, help="rows as JSON lines (question, answer)")
    parser.add_argument("--template", required=True)
    parser.add_argument("--rewards", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--spec-json", required=True, help="the arm's grpo settings as JSON")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-shuffle", action="store_true", help="train on the rows in the file's order (a shared stream)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    grpo = json.loads(args.spec_json)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    rows = [json.loads(line) for line in Path(args.train).read_text().splitlines()]
    processed = train_rl_rows(rows, tokenizer, Path(args.template))
    data = Dataset.from_list([{"prompt": r["prompts"], "answer": r["answer"]} for r in processed])
    seen: list[list[str]] = []
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=trl_config(grpo, args.steps, out, args.seed, shuffle=not args.no_shuffle),
        train_dataset=data,
        reward_funcs=[load_reward(Path(args.rewards), args.function, seen)],
    )
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    trainer.save_model(str(out / "export"))
    tokenizer.save_pretrained(str(out / "export"))
    (out / "metrics.json").write_text(
        json.dumps(
            {"train_seconds": round(seconds, 1), "steps": args.steps, "step_prompts": seen, "log": trainer.state.log_history}, indent=1
        )
        + "\n"
    )
    print(json.dumps({"export": str(out / "export"), "train_seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
