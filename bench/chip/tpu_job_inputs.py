"""What bench/chip/tpu_job.py's chip calls carry and submit, per task: the job files `prepare` writes here (bench/.tpu-job/,
ignored, carried to the chip's machine) and the job spec each (arm, seed) gets there.

- `arith`: fold A of bench/learning/arith_folds.py to train, the built-in suite arith-b to evaluate
  (bench/preregistration/tpu_learning_arith.json).
- `gsm8k`: GSM-symbolic rows of reasoning-gym to train; a file suite of the 100 real GSM8K test rows rljob ships and
  200 GSM-symbolic rows disjoint from training to evaluate (bench/preregistration/tpu_learning_gsm8k.json). Its
  control's reward rate is the base model's, read from the task's first chip call: until that call is collected,
  `prepare` writes no control reward and a control job cannot be made.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
INPUTS = REPO / "bench" / ".tpu-job"
RESULTS = REPO / "bench" / "results"
PREREGISTRATIONS = REPO / "bench" / "preregistration"
# The learning seeds bench's GRPO settings (bench/preregistration/learning_seeds.json), which learned on CPU.
GRPO = {
    "num_batches": 40,
    "batch_size": 2,
    "num_generations": 8,
    "learning_rate": 3e-06,
    "beta": 0.04,
    "temperature": 0.7,
    "top_k": 50,
    "max_prefill_predict_length": 80,
    "max_target_length": 112,
    "kv_cache_buffer": 8,
    "num_test_batches": 0,
    "checkpoint_period": 20,
    "kl_direction": "policy_to_reference",
}
# GSM8K's questions need the prompt room of train_rl's GSM8K runs and room to reason: 256 prompt and 256 new tokens.
GSM8K_GRPO = {**GRPO, "max_prefill_predict_length": 256, "max_target_length": 512}
GSM8K_TRAIN_SEED, GSM8K_TRAIN_ROWS = 20261130, 2000  # make-data gsm8k's defaults
GSM8K_SUITE_SEED, GSM8K_SUITE_SYMBOLIC_ROWS = 20261206, 200
TASKS = {
    "arith": {"registration": "tpu_learning_arith.json", "result": "tpu_job.json", "records": "tpu_job-call-"},
    "gsm8k": {"registration": "tpu_learning_gsm8k.json", "result": "tpu_job_gsm8k.json", "records": "tpu_job_gsm8k-call-"},
}
REWARDS = {
    "arith": {"trained": "arith_correct", "control": "arith_random_control"},
    "gsm8k": {"trained": "gsm8k_final_number", "control": "arith_random_control"},
}


def result_path(task: str) -> Path:
    return RESULTS / TASKS[task]["result"]


def registration_path(task: str) -> Path:
    return PREREGISTRATIONS / TASKS[task]["registration"]


def rows_hash(rows: list[dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def gsm8k_rows() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, suite): the registered GSM-symbolic training rows, and the 100 real test rows then 200 GSM-symbolic
    rows of another seed whose questions appear in neither (reasoning-gym's generators share GSM8K's shapes)."""
    from trainer.evals.gsm8k_test_rows import gsm8k_eval_rows
    from trainer.offline.gsm8k_rows import gsm_symbolic_train_rows

    real = gsm8k_eval_rows()
    train = gsm_symbolic_train_rows(GSM8K_TRAIN_ROWS, seed=GSM8K_TRAIN_SEED, exclude=real)
    symbolic = gsm_symbolic_train_rows(GSM8K_SUITE_SYMBOLIC_ROWS, seed=GSM8K_SUITE_SEED, exclude=real + train)
    return train, real + symbolic


def _base_rate(task: str) -> float | None:
    """The base model's sampled accuracy on the task's suite, as the task's first chip call measured it."""
    found = result_path(task)
    if not found.exists():
        return None
    scores = (json.loads(found.read_text()).get("base") or {}).get("scores") or {}
    return scores["sampled"]["value"] if "sampled" in scores else None


def _prepare_arith() -> dict[str, Any]:
    from bench.learning.arith_folds import write_folds

    registered = json.loads((PREREGISTRATIONS / "learning_folds.json").read_text())
    folds = write_folds(INPUTS / "folds", registered["base"]["sampled_strict_rate"])
    for fold, facts in folds.items():
        if facts["train_hash"] != registered["fold_hashes"][fold]:
            raise SystemExit(f"fold {fold}'s rows differ from the registered ones ({facts['train_hash']})")
    return {"train_hash": folds["A"]["train_hash"]}


def _prepare_gsm8k() -> dict[str, Any]:
    from bench.learning.arith_folds import control_reward_text
    from trainer.offline.tiny import write_rows

    registered = json.loads(registration_path("gsm8k").read_text())["hashes"]
    train, suite = gsm8k_rows()
    facts: dict[str, Any] = {"train_hash": rows_hash(train), "suite_hash": rows_hash(suite), "suite_rows": len(suite)}
    for key in ("train_hash", "suite_hash"):
        if facts[key] != registered[key]:
            raise SystemExit(f"the gsm8k {key} {facts[key]} is not the registered {registered[key]}: the rows changed")
    out = INPUTS / "gsm8k"
    out.mkdir(parents=True)
    write_rows(train, out / "train")
    (out / "suite.jsonl").write_text("".join(json.dumps(row) + "\n" for row in suite))
    shutil.copyfile(REPO / "trainer" / "evals" / "reward_gsm8k.py", out / "gsm8k_final_number.py")
    rate = _base_rate("gsm8k")
    if rate is not None:
        (out / "arith_random_control.py").write_text(control_reward_text(rate))
    facts["control_rate"] = rate
    return facts


def prepare(task: str) -> None:
    """The task's job files and the commit they belong to, under bench/.tpu-job/ (carry it to the chip)."""
    shutil.rmtree(INPUTS / ("folds" if task == "arith" else task), ignore_errors=True)
    INPUTS.mkdir(parents=True, exist_ok=True)
    facts = _prepare_arith() if task == "arith" else _prepare_gsm8k()
    commit = commit_facts()
    (INPUTS / "COMMIT.json").write_text(json.dumps(commit))
    (INPUTS / f"{task}.json").write_text(json.dumps(facts))
    size = sum(f.stat().st_size for f in INPUTS.rglob("*") if f.is_file()) / 1024
    print(f"wrote {INPUTS} for {task} ({size:.0f} KiB) at {commit['commit'][:10]}: {json.dumps(facts)}")


def commit_facts() -> dict[str, Any]:
    """The commit and uncommitted changes here: the chip's machine gets the working tree without .git."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return {"commit": head, "uncommitted": changed.splitlines()}


def _smoke(spec: dict[str, Any], work: Path, task: str, arm: str) -> dict[str, Any]:
    """The same job on this machine's CPU: two steps and a four-row suite, to try the flow."""
    rows = work / "smoke-suite.jsonl"
    rows.write_text("".join(json.dumps({"question": f"What is {a} * 7?", "answer": str(a * 7)}) + "\n" for a in range(4)))
    rewards = spec["grpo"]["rewards"]
    suite = {"name": "smoke", "data": str(rows), "rewards_path": rewards["functions_path"], "rewards": rewards["functions"]}
    spec["hardware"] = {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax"}
    spec["eval"] = {**spec["eval"], "accelerator": "cpu", "suite": {**suite, "sampling": {"samples": 2, "max_new_tokens": 16}}}
    spec["grpo"] = {**spec["grpo"], "num_batches": 2, "checkpoint_period": 2}
    if task == "gsm8k":  # CPU minutes: 32 new tokens instead of the chip's 256 (every prompt needs the 256 slots)
        spec["grpo"] |= {"max_prefill_predict_length": 256, "max_target_length": 288}
    return spec


def job_spec(work: Path, task: str, arm: str, seed: int, smoke: bool = False, logits_dtype: str | None = None) -> dict[str, Any]:
    """The job the registration names for (task, arm, seed), its eval jobs attached on the chip.

    `logits_dtype` (issue 66 §2 on a real model): the same job with the logits' projection in that precision
    (`model.logits_dtype`), named apart and without eval jobs: it measures the sampler-trainer agreement step by step
    against the registered job of the same seed, which trained on the same prompts in the same order. Not a registered
    run: the learning results never collect it."""
    reward = REWARDS[task][arm]
    if task == "arith":
        inputs = INPUTS / "folds" / "A"
        dataset = {"train_files": [str(inputs / "train.parquet")], "eval_files": [str(inputs / "eval.parquet")]}
        dataset["prompt_template"] = str(inputs / "arith-one-shot.json")
        suite: dict[str, Any] = {"name": "arith-b"}
        grpo = GRPO
    else:
        inputs = INPUTS / "gsm8k"
        # train_rl's default GSM8K template (no prompt_template), as the suite's; eval_files unused (no test batches)
        dataset = {"train_files": [str(inputs / "train.parquet")], "eval_files": [str(inputs / "train.parquet")]}
        scorer = str(inputs / "gsm8k_final_number.py")
        suite = {"name": "gsm8k-300", "data": str(inputs / "suite.jsonl"), "rewards_path": scorer}
        suite |= {"rewards": ["gsm8k_final_number"], "answer": "last-number"}
        grpo = GSM8K_GRPO
    functions_path = inputs / f"{reward}.py"
    if not functions_path.exists():
        raise SystemExit(
            f"{functions_path} is missing: the {task} control's rate is the base model's "
            "(collect a call run with --base, then prepare again)"
        )
    spec = {
        "name": f"tpu-{task}-{arm}-s{seed}",
        "model": {"source": str(work / "smollm2"), "dtype": "float32"},
        "dataset": dataset,
        "grpo": {**grpo, "rewards": {"functions_path": str(functions_path), "functions": [reward]}},
        "hardware": {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"},
        "eval": {"suite": suite, "accelerator": "v5e-1", "every_n_checkpoints": 1000, "base": True, "export": True},
        "seed": seed,
        "output": str(work / "runs"),
    }
    spec = _smoke(spec, work, task, arm) if smoke else spec
    if logits_dtype is not None:
        spec["name"] += f"-logits-{logits_dtype}"
        spec["model"]["logits_dtype"] = logits_dtype
        del spec["eval"]
    return spec
