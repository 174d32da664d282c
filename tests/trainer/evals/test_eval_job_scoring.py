"""An eval job's scoring (trainer/evals/scoring.py) against values worked out by hand: each reward function's
score per completion (a failing call or a NaN scores None, counted incorrect), the majority answer with its
tie rule, and the four scores per row (pass@1, sampled, pass@k, maj@k) and over rows (summarize), whose 0/1 scores'
intervals are checked against scipy's Wilson interval."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from trainer.contract.run.eval_report import FunctionOutcome, RowOutcome, summarize
from trainer.evals.scoring import call_reward, extract_answer, majority_index, score_row


def contains_seven(prompts, completions, tmvp_config, answer=None, **kwargs):
    return [1.0 if "7" in c else 0.0 for c in completions]


def explodes(prompts, completions, tmvp_config, **kwargs):
    raise RuntimeError("user bug")


def nan_on_b(prompts, completions, tmvp_config, **kwargs):
    return [math.nan if "b" in c else 0.5 for c in completions]


@pytest.mark.parametrize(
    ("text", "extractor", "expected"),
    [
        ("The answer is 1,234.50 not 7", "first-number", "1234.5"),
        ("The answer is 1,234.50 not 7", "last-number", "7"),
        ("85.0 apples", "first-number", "85"),
        ("no digits here", "last-number", None),
        ("-0 or -12", "first-number", "0"),
        ("-0 or -12", "last-number", "-12"),
    ],
)
def test_answers_are_read_as_normalised_numbers(text, extractor, expected):
    assert extract_answer(text, extractor) == expected


def test_majority_is_the_most_frequent_answer_and_a_tie_goes_to_the_one_given_first():
    assert majority_index(["3", "4", "4", "3", "4"]) == 1  # "4" three times, first given at 1
    assert majority_index(["3", "4", "4", "3"]) == 0  # 2-2 tie: "3" came first
    assert majority_index([None, "5", None]) == 0  # no number is an answer too


def test_a_failing_or_malformed_reward_scores_none():
    assert call_reward(contains_seven, "p", "q", ["7", "7"], ["7", "8"]) == [1.0, 0.0]
    assert call_reward(explodes, "p", "q", ["7", "7"], ["7", "8"]) == [None, None]
    assert call_reward(nan_on_b, "p", "q", ["7", "7"], ["a", "b"]) == [0.5, None]
    assert call_reward(lambda **kw: [1.0], "p", "q", ["7", "7"], ["a", "b"]) == [None, None]  # one score for two


def test_one_row_scored_by_hand():
    # greedy "7" right; samples: "6", "7", "6", "x7" -> correct [F, T, F, T]; first numbers 6, 7, 6, 7: a 2-2 tie
    # goes to 6 (given first), whose first sample is wrong, so maj@k = 0.
    row = score_row(
        {"seven": contains_seven, "boom": explodes},
        prompt="p",
        question="q",
        answers=["7", "7"],
        greedy="7",
        samples=["6", "7", "6", "x7"],
        extractor="first-number",
    )
    seven = row.functions["seven"]
    assert seven.greedy == 1.0 and seven.samples == [0.0, 1.0, 0.0, 1.0] and seven.majority == 0
    assert [seven.score(s) for s in ("pass@1", "sampled", "pass@k", "maj@k")] == [1.0, 0.5, 1.0, 0.0]
    boom = row.functions["boom"]
    assert boom.greedy is None and boom.samples == [None] * 4 and boom.majority == 0
    assert [boom.score(s) for s in ("pass@1", "sampled", "pass@k", "maj@k")] == [0.0, 0.0, 0.0, 0.0]
    assert row.unscored == 5  # the failing function's five completions


def test_majority_correctness_is_the_functions_verdict_on_the_majority_answer():
    # Last numbers 7, 7, 3: the majority 7's first sample ("a 7") is right.
    row = score_row(
        {"seven": contains_seven},
        prompt="p",
        question="q",
        answers=["7", "7"],
        greedy="0",
        samples=["a 7", "b 7", "3"],
        extractor="last-number",
    )
    assert row.functions["seven"].majority == 1
    assert row.functions["seven"].score("pass@1") == 0.0


def test_scores_over_rows():
    def outcome(index, greedy, samples):
        row = score_row(
            {"seven": contains_seven},
            prompt="p",
            question=f"q{index}",
            answers=["7", "7"],
            greedy=greedy,
            samples=samples,
            extractor="last-number",
        )
        return RowOutcome(id=f"{index}", index=index, question="q", answers=["7"], greedy=greedy, samples=samples, functions=row.functions)

    rows = [
        outcome(0, "7", ["7", "7", "1", "7"]),  # pass@1 1, sampled 3/4, pass@k 1, maj 1
        outcome(1, "1", ["1", "7", "2", "3"]),  # 0, 1/4, 1, maj: 4-way tie -> "1" wrong -> 0
        outcome(2, "2", ["2", "2", "2", "2"]),  # 0, 0, 0, 0
    ]
    scores = summarize(rows, "seven")
    assert scores.pass_at_1.value == pytest.approx(1 / 3)
    assert scores.sampled.value == pytest.approx((0.75 + 0.25 + 0) / 3)
    assert scores.pass_at_k.value == pytest.approx(2 / 3)
    assert scores.maj_at_k.value == pytest.approx(1 / 3)


def _wilson_95_by_scipy(successes: int, n: int) -> tuple[float, float]:
    found = stats.binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    return found.low, found.high


@pytest.mark.parametrize("n", [1, 2, 5, 13, 40])
def test_an_eval_jobs_binary_scores_carry_scipys_wilson_interval(n):
    """pass@1, pass@k and maj@k over n rows (summarize) for counts from 0 to n, each score's count different: each
    interval is scipy's 95% Wilson interval of that count (the sampled accuracy's is a bootstrap: not checked here)."""
    for k in sorted({0, 1, n // 2, n - 1, n}):
        counts = {"pass@1": k, "pass@k": n - k, "maj@k": min(n, k + 1)}
        rows = [
            RowOutcome(
                id=f"{i}",
                index=i,
                question="q",
                answers=["7"],
                greedy="g",
                samples=["s", "s"],
                functions={
                    "f": FunctionOutcome(
                        greedy=float(i < counts["pass@1"]),
                        samples=[float(i < counts["pass@k"]), 0.0],
                        majority=int(i < counts["maj@k"]),
                    )
                },
            )
            for i in range(n)
        ]
        scores = summarize(rows, "f")
        for name, count in counts.items():
            estimate = scores.get(name)
            assert estimate.method == "wilson" and estimate.value == pytest.approx(count / n), (name, k, n)
            assert estimate.ci95 == pytest.approx(_wilson_95_by_scipy(count, n), abs=1e-9), (name, count, n)
