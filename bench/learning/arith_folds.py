"""The two-fold arithmetic task of the pre-registered learning bench (bench/learning/learning_folds.py).

All 300 one-digit questions "What is a op b?" with a, b in 0..9 and op in +, - and *, split into two
folds by fact: a question and its mirror (a op b and b op a) are one fact and always share a fold, so a
model trained on one fold never saw the other fold's facts in either order. Facts are dealt in the order
of a SHA-256 of their key and the seed, each to the fold that holds fewer rows of its operator (ties
to fold A), so each fold has 50 rows of each operator and 150 in all.

Each fold's directory holds what a job trained on that fold names: `train.parquet` (the fold's rows),
`eval.parquet` (the other fold's rows, for in-job evaluation), the one-shot template and the reward
files, as `make-data arith` lays them out. The control reward's RATE is set to the base model's
measured rate (the bench measures it before anything trains).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from trainer.evals.arith_questions import FOLD_SEED, FOLDS, fact_key, fold_rows  # noqa: F401 - fact_key: the bench's tests read it here
from trainer.offline.arith_rows import EXAMPLES, JOB_FILES

RATE_LINE = re.compile(r"^RATE = [0-9.]+.*$", re.MULTILINE)


def fold_hash(rows: list[dict[str, str]]) -> str:
    return hashlib.sha256("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()).hexdigest()[:16]


def control_reward_text(rate: float) -> str:
    source = (EXAMPLES / "rewards" / "arith_random_control.py").read_text()
    text, replaced = RATE_LINE.subn(f"RATE = {rate!r}  # the base model's sampled rate on this bench's rows", source)
    if replaced != 1:
        raise RuntimeError("examples/rewards/arith_random_control.py has no single `RATE = ...` line to set")
    return text


def write_folds(out: Path, control_rate: float, seed: int = FOLD_SEED) -> dict[str, dict[str, str]]:
    """Each fold's job directory under out/<fold>; returns per fold the files and their hashes."""
    from trainer.offline.tiny import write_rows

    folds = fold_rows(seed)
    written = {}
    for fold, other in zip(FOLDS, reversed(FOLDS), strict=True):
        d = out / fold
        d.mkdir(parents=True, exist_ok=True)
        for name in JOB_FILES:
            shutil.copyfile(EXAMPLES / name, d / Path(name).name)
        (d / "arith_random_control.py").write_text(control_reward_text(control_rate))
        write_rows(folds[fold], d / "train")
        write_rows(folds[other], d / "eval")
        written[fold] = {
            "dir": str(d),
            "train_rows": str(len(folds[fold])),
            "train_hash": fold_hash(folds[fold]),
            "control_reward_sha256": hashlib.sha256((d / "arith_random_control.py").read_bytes()).hexdigest()[:16],
        }
    return written
