"""What an evaluation row's outcome is: MaxText's score for a job on MaxText's GSM8K rewards, and the job's own
reward functions for a job that brings its own (trainer/contract/run/evaluation.py), through the recorder train_rl runs
with (trainer/maxtext_entry/eval_recorder.py); the real run's side is in tests/trainer/test_slow_pipeline.py."""

from __future__ import annotations

import pytest

from trainer.contract import JobSpec
from trainer.contract.run.evaluation import AFTER, BEFORE, EvalRow, rewarded_fraction
from trainer.maxtext_entry.eval_recorder import EvalRecorder
from trainer.stages.train import eval_scoring

QUESTIONS = ["What is 3 x 4?", "What is 7 - 5?", "What is 2 + 2?"]
# MaxText's score: the answer inside <answer> tags, which an arithmetic job's model never writes: 0 for every row.
MAXTEXT_SCORE = (0.0, 0.0, 0.0)


def _evaluate(recorder: EvalRecorder, label: str, completions: list[list[str]], answers: list[str]):
    """One evaluation as MaxText's evaluate() drives the recorder: per row, score_responses then each reward."""
    recorder.rows = []
    for question, row, answer in zip(QUESTIONS, completions, answers, strict=True):
        recorder.add_row(question, row, [answer], MAXTEXT_SCORE)
        recorder.add_reward("exact_number", [1.0 if c.strip() == answer else 0.0 for c in row])
        recorder.add_reward("brevity", [0.0 if len(c) < 40 else -0.5 for c in row])
    corr = sum(MAXTEXT_SCORE[0] for _ in QUESTIONS)
    return recorder.finish(label, 0 if label == BEFORE else 5, [(corr, len(QUESTIONS), 0.0, 0.0, 0.0, 0.3)], None, 2)


@pytest.mark.parametrize("scoring", ["rewards", "maxtext"])
def test_a_job_with_its_own_rewards_is_scored_by_them_and_maxtexts_score_is_kept(scoring: str) -> None:
    recorder = EvalRecorder(None, scoring)  # type: ignore[arg-type]
    answers = ["12", "2", "4"]
    before = _evaluate(recorder, BEFORE, [["12", "11"], ["3", "4"], ["5", "5"]], answers)
    after = _evaluate(recorder, AFTER, [["12", "12"], ["2", "3"], ["4", "4"]], answers)
    if scoring == "maxtext":
        # The default scoring as before: MaxText's tags decide, so an arithmetic job reads 0 before and after.
        assert (before.correct, after.correct, after.scored_by, after.maxtext_correct) == (0.0, 0.0, "maxtext", None)
        assert after.vs_before is not None and after.vs_before.difference == 0.0
        return
    # Rows: the share of completions whose total reward is above 0 (1/2, 0, 0 before; 1, 1/2, 1 after).
    assert (before.correct, after.correct) == (0.5, 2.5)
    assert after.scored_by == "rewards" and after.maxtext_correct == 0.0  # MaxText's own score, kept beside
    assert after.vs_before is not None and after.vs_before.n == 3
    assert after.vs_before.difference == pytest.approx((2.5 - 0.5) / 3) and after.vs_before.method == "paired-t"


def test_a_completion_is_rewarded_only_when_every_function_scored_it_and_the_sum_is_above_zero() -> None:
    assert rewarded_fraction({}) is None
    assert rewarded_fraction({"a": [1.0, 0.0, 0.5, 1.0]}) == 0.75
    assert rewarded_fraction({"a": [1.0, 1.0], "b": [-1.0, -0.5]}) == 0.5  # 0 and 0.5: only the second is above 0
    assert rewarded_fraction({"a": [1.0, None], "b": [0.0, 1.0]}) == 0.5  # None: a NaN score, not rewarded
    assert rewarded_fraction({"a": [1.0, 1.0], "b": [1.0]}) == 0.5  # b scored one completion only


def test_a_row_written_before_rewards_scored_rows_reads_as_not_rewarded() -> None:
    row = EvalRow(id="x", index=0, question="q", answers=["1"], completions=["1"], correct=1.0, partial=1.0, format=1.0)
    assert row.rewarded is None and row.outcome("rewards") == 0.0 and row.outcome("maxtext") == 1.0


def test_the_train_command_asks_for_reward_scoring_exactly_when_the_spec_has_reward_functions(tiny_spec_dict) -> None:
    own = JobSpec.model_validate(tiny_spec_dict)
    assert own.grpo.rewards.functions_path and eval_scoring(own) == "rewards"
    gsm8k = JobSpec.model_validate({**tiny_spec_dict, "grpo": {**tiny_spec_dict["grpo"], "rewards": {}}})
    assert eval_scoring(gsm8k) == "maxtext"
