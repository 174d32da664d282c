"""`make-data arith`: integer arithmetic questions a 135M model can learn from, offline.

"What is 47 + 38?" with the answer in GSM8K's format ("47 + 38 = 85\\n#### 85"), so MaxText's own
loader applies unchanged: for the default dataset name `openai/gsm8k`, utils_rl.process_data keeps the
text after `####` (extract_hash_answer) and hands the reward functions the JSON list `["85", "85"]`.

Three splits: `train`, `dev` (for choosing settings; never tune on eval) and `eval`. Each split has its
own seed, derived from `--seed` and the split's name, and no two rows anywhere share an operand tuple
(so "3 + 4" in train and "3 * 4" in eval cannot both occur: eval never repeats a training pair under
another operator). Every row carries `id`: trainer.contract.run.evaluation.row_id of its question, the
same id train_rl's evaluation records carry, so data rows and eval outcomes join on it.

The job's other inputs are copied beside the rows from the checkout's examples/ (their source):
the one-shot prompt template and the two reward files (correctness and the random control), so one
directory, local or uploaded to gs://, holds everything examples/smollm2-arith-cpu.yaml names.

Difficulty knobs: digits per operand (exactly N digits; 1 digit means 0-9), operands per question and
the operators drawn from. The defaults are the difficulty bench/learning/arith_difficulty.py chose for
SmolLM2-135M (bench/results/arith_difficulty.json): the one whose sampled pass@1 lies in [0.2, 0.6],
so most groups of 8 completions are mixed and GRPO's advantages are not all zero.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainer.evals.arith_questions import arith_row

OPERATORS = "+-*"
# bench/results/arith_difficulty.json chose one-digit products: SmolLM2-135M's pass@1 is 0.21 at temperature
# 0.7 there, and 0.01 or less for every two- or three-digit setting measured. One-digit pairs are only 100 operand tuples, so
# the default splits share them out: eval gets the most (40) for a paired before/after comparison.
DEFAULT_DIGITS = 1
DEFAULT_OPERANDS = 2
DEFAULT_OPERATORS = "*"
DEFAULT_SEED = 20261201
DEFAULT_TRAIN_ROWS = 50
DEFAULT_DEV_ROWS = 10
DEFAULT_EVAL_ROWS = 40
MAX_DIGITS = 9
MAX_OPERANDS = 5
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOB_FILES = ("templates/arith-one-shot.json", "rewards/arith_correct.py", "rewards/arith_random_control.py")
# Eval is drawn first, then dev, then train: eval's rows depend only on the seed, the knobs and its own
# size, so asking for more training rows never changes what the model is evaluated on.
SPLIT_ORDER = ("eval", "dev", "train")


class ArithKnobError(ValueError):
    """A difficulty knob or row count make-data cannot honour; the message says which and why."""


class ArithFilesMissing(Exception):
    """The template or reward files to copy are not where a checkout keeps them."""


@dataclass(frozen=True)
class Difficulty:
    digits: int = DEFAULT_DIGITS
    operands: int = DEFAULT_OPERANDS
    operators: str = DEFAULT_OPERATORS

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= MAX_DIGITS:
            raise ArithKnobError(f"--digits must be between 1 and {MAX_DIGITS} (got {self.digits})")
        if not 2 <= self.operands <= MAX_OPERANDS:
            raise ArithKnobError(f"--operands must be between 2 and {MAX_OPERANDS} (got {self.operands})")
        bad = sorted(set(self.operators) - set(OPERATORS))
        if not self.operators or bad or len(set(self.operators)) != len(self.operators):
            raise ArithKnobError(
                f"--operators must be one or more of {' '.join(OPERATORS)}, each at most once, e.g. '+-' (got {self.operators!r})"
            )

    @property
    def low(self) -> int:
        return 0 if self.digits == 1 else int(10 ** (self.digits - 1))

    @property
    def high(self) -> int:
        return int(10**self.digits) - 1

    @property
    def tuples(self) -> int:
        """How many distinct operand tuples exist: the most rows all splits together can hold."""
        return int((self.high - self.low + 1) ** self.operands)


def _operand_tuple(index: int, difficulty: Difficulty) -> tuple[int, ...]:
    base = difficulty.high - difficulty.low + 1
    numbers = []
    for _ in range(difficulty.operands):
        index, digit = divmod(index, base)
        numbers.append(difficulty.low + digit)
    return tuple(numbers)


def split_seed(seed: int, split: str) -> str:
    # random.Random hashes a str seed with SHA-512: the same rows on every machine and Python run.
    return f"{seed}:{split}"


def arith_split(count: int, *, seed: int, split: str, difficulty: Difficulty, taken: set[tuple[int, ...]]) -> list[dict[str, str]]:
    """`count` rows whose operand tuples are distinct and not in `taken` (which gains them)."""
    rng = random.Random(split_seed(seed, split))
    # Sampling count + len(taken) distinct indices leaves at least `count` outside `taken`, so one
    # bounded draw always suffices (no retry loop), however close the request is to the space's size.
    indices = rng.sample(range(difficulty.tuples), min(difficulty.tuples, count + len(taken)))
    chosen = [t for t in (_operand_tuple(i, difficulty) for i in indices) if t not in taken][:count]
    taken.update(chosen)
    return [arith_row(t, tuple(rng.choice(difficulty.operators) for _ in t[1:])) for t in chosen]


def arith_splits(sizes: dict[str, int], *, seed: int, difficulty: Difficulty) -> dict[str, list[dict[str, str]]]:
    for split, count in sizes.items():
        if split not in SPLIT_ORDER:
            raise ArithKnobError(f"unknown split {split!r}: one of {', '.join(SPLIT_ORDER)}")
        if count < 1:
            raise ArithKnobError(f"--{split}-rows must be at least 1 (got {count})")
    total = sum(sizes.values())
    if total > difficulty.tuples:
        raise ArithKnobError(
            f"{difficulty.operands} operands of {difficulty.digits} digit(s) make only {difficulty.tuples} distinct "
            f"operand tuples, fewer than the {total} rows asked for: raise --digits or --operands, or ask for fewer rows"
        )
    taken: set[tuple[int, ...]] = set()
    return {
        split: arith_split(sizes[split], seed=seed, split=split, difficulty=difficulty, taken=taken)
        for split in SPLIT_ORDER
        if split in sizes
    }


def make_arith(
    out: Path,
    *,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    dev_rows: int = DEFAULT_DEV_ROWS,
    eval_rows: int = DEFAULT_EVAL_ROWS,
    seed: int = DEFAULT_SEED,
    digits: int = DEFAULT_DIGITS,
    operands: int = DEFAULT_OPERANDS,
    operators: str = DEFAULT_OPERATORS,
) -> dict[str, str]:
    from trainer.offline.tiny import write_rows

    difficulty = Difficulty(digits, operands, operators)
    splits = arith_splits({"train": train_rows, "dev": dev_rows, "eval": eval_rows}, seed=seed, difficulty=difficulty)
    missing = [name for name in JOB_FILES if not (EXAMPLES / name).is_file()]
    if missing:
        raise ArithFilesMissing(f"{', '.join(missing)} not found under {EXAMPLES}: run make-data arith from an rljob checkout")
    out.mkdir(parents=True, exist_ok=True)
    for name in JOB_FILES:
        shutil.copyfile(EXAMPLES / name, out / Path(name).name)
    summary = {"seed": str(seed), "digits": str(difficulty.digits), "operands": str(difficulty.operands), "operators": difficulty.operators}
    for split, rows in splits.items():
        write_rows(rows, out / split)
        summary[split] = str(out / f"{split}.parquet")
        summary[f"{split}_rows"] = str(len(rows))
    return summary
