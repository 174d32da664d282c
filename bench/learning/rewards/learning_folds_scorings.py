"""The learning bench's three scorings as the reward functions of its eval suites (bench/learning/learning_folds_evals.py).

One eval job calls all three on every completion (trainer/evals/scoring.py), the way train_rl calls a reward:
fn(prompts=, completions=, tmvp_config=, answer=, ...), each `answer` entry a JSON list of acceptable answers
(["56", "56"] for "7 * 8 = 56\\n#### 56"). A completion scores 1.0 or 0.0:

- `arith_correct` (strict): its FIRST number is the answer. The logic of examples/rewards/arith_correct.py, the
  reward the trained arm trains with, copied here so that this file alone is the suite's reward file: the
  suite's content hash covers these bytes, and a change to either copy shows as a failing test
  (tests/bench/learning/test_learning_folds_evals.py scores every completion the bench recorded with both);
- `arith_lenient`: any integer in it is the answer;
- `arith_format`: it starts with "The answer is", as the one-shot template asks.

These are bench/learning/learning_folds.py's `score()`, one function per scoring.
"""

import json
import re
from decimal import Decimal, InvalidOperation

# Thousands groups only in threes, so "85,86" reads as 85 (a list), "1,234" as 1234.
FIRST_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")
ANY_INTEGER = re.compile(r"-?[0-9]+")
FORMAT_PREFIX = "The answer is"


def _answers(completions, answer):
    # MaxText's batches hold numpy arrays (one JSON string per completion), not lists.
    return [None] * len(completions) if answer is None else list(answer)


def _gold(acceptable):
    try:
        return Decimal(acceptable.replace(",", "").strip())
    except InvalidOperation:
        return None


def arith_correct(prompts, completions, tmvp_config, answer=None, **kwargs):
    """1.0 when the first number in the completion equals an acceptable answer."""
    scores = []
    for completion, acceptable in zip(completions, _answers(completions, answer), strict=True):
        golds = {_gold(g) for g in json.loads(acceptable)} - {None} if acceptable else set()
        found = FIRST_NUMBER.search(completion)
        guess = Decimal(found.group().replace(",", "")) if found else None
        scores.append(1.0 if guess is not None and guess in golds else 0.0)
    return scores


def arith_lenient(prompts, completions, tmvp_config, answer=None, **kwargs):
    """1.0 when any integer in the completion equals an acceptable answer."""
    scores = []
    for completion, acceptable in zip(completions, _answers(completions, answer), strict=True):
        golds = {int(g) for g in json.loads(acceptable)} if acceptable else set()
        scores.append(1.0 if any(int(n) in golds for n in ANY_INTEGER.findall(completion)) else 0.0)
    return scores


def arith_format(prompts, completions, tmvp_config, answer=None, **kwargs):
    """1.0 when the completion starts with the template's answer line, "The answer is"."""
    return [1.0 if completion.lstrip().startswith(FORMAT_PREFIX) else 0.0 for completion in completions]
