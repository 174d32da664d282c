"""Integer arithmetic questions in GSM8K's format, and the two folds of the learning bench's one-digit task.

Shared by `make-data arith` (trainer/offline/arith_rows.py), the learning bench (bench/learning/arith_folds.py) and the
built-in `arith`, `arith-a` and `arith-b` suites: one definition, so the suites hold exactly the bench's rows.
"""

from __future__ import annotations

import hashlib

from trainer.contract.run.evaluation import row_id

OPERATORS = "+-*"
FOLDS = ("A", "B")
FOLD_SEED = 20261204


def evaluate(numbers: tuple[int, ...], operators: tuple[str, ...]) -> int:
    """The value with the usual precedence (* before + and -), as the question reads."""
    terms = [numbers[0]]
    signs = [1]
    for op, n in zip(operators, numbers[1:], strict=True):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(n)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms, strict=True))


def arith_row(numbers: tuple[int, ...], operators: tuple[str, ...]) -> dict[str, str]:
    expression = " ".join([str(numbers[0])] + [f"{op} {n}" for op, n in zip(operators, numbers[1:], strict=True)])
    value = evaluate(numbers, operators)
    question = f"What is {expression}?"
    return {"id": row_id(question), "question": question, "answer": f"{expression} = {value}\n#### {value}"}


def fact_key(a: int, op: str, b: int) -> str:
    """A question and its mirror (a op b, b op a) are one fact."""
    return f"{min(a, b)}{op}{max(a, b)}"


def fold_rows(seed: int = FOLD_SEED) -> dict[str, list[dict[str, str]]]:
    """All 300 one-digit questions split into folds A and B by fact: facts dealt in the order of a SHA-256 of
    their key and the seed, each to the fold holding fewer rows of its operator (ties to A), so each fold has
    50 rows of each operator."""
    facts: dict[str, list[tuple[int, str, int]]] = {}
    for op in OPERATORS:
        for a in range(10):
            for b in range(10):
                facts.setdefault(fact_key(a, op, b), []).append((a, op, b))
    order = sorted(facts, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    folds: dict[str, list[dict[str, str]]] = {f: [] for f in FOLDS}
    count = {(f, op): 0 for f in FOLDS for op in OPERATORS}
    for key in order:
        op = facts[key][0][1]
        fold = min(FOLDS, key=lambda f: (count[(f, op)], f))
        for a, _, b in facts[key]:
            folds[fold].append(arith_row((a, b), (op,)))
        count[(fold, op)] += len(facts[key])
    return folds
