"""How `rljob status` writes a job's evaluations (service/cli/output.py), over JobPublic.eval bodies
made here: before -> after (or the newest step) with 95% intervals and n, the paired change, or
why there is none. The dashboard writes the same numbers (tests/dashboard/unit/eval.test.mjs)."""

from __future__ import annotations

from typing import Any

import pytest

from service.cli.output import eval_difference_text, eval_text, print_job, whole_percent


def _point(label: str, step: int, accuracy: float, ci95: tuple[float, float], n: int = 300) -> dict[str, Any]:
    return {"label": label, "step": step, "n": n, "accuracy": accuracy, "ci95": list(ci95), "format_accuracy": 0.9,
            "partial_accuracy": 0.4, "mean_reward": accuracy, "samples_per_row": 1, "sampling": "greedy, pass"}  # fmt: skip


BEFORE = _point("before", 0, 0.34, (0.29, 0.39))
STEP_10 = _point("step-10", 10, 0.45, (0.394, 0.506))
AFTER = _point("after", 20, 0.51, (0.45, 0.57))
DIFF = {"of": "after", "difference": 0.17, "ci95": [0.11, 0.23], "n": 300, "improved": 60, "regressed": 9,
        "method": "newcombe-paired-wilson"}  # fmt: skip


def _job(**evaluation: Any) -> dict[str, Any]:
    base = {"status": "available", "reason": None, "points": [BEFORE, STEP_10, AFTER], "before": BEFORE,
            "after": AFTER, "difference": DIFF}  # fmt: skip
    return {"eval": {**base, **evaluation}}


def test_before_to_after_with_intervals_and_n() -> None:
    assert eval_text(_job()) == "34% [29-39] -> 51% [45-57], n=300"
    assert eval_difference_text(_job()) == "+17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows"


def test_while_running_before_is_compared_with_the_newest_step() -> None:
    step_5 = _point("step-5", 5, 0.4, (0.35, 0.46))
    job = _job(points=[BEFORE, step_5, STEP_10], after=None,
               difference={**DIFF, "of": "step-10", "difference": -0.03, "ci95": [-0.08, 0.021]})  # fmt: skip
    assert eval_text(job) == "34% [29-39] -> 45% [39-51] at step 10, n=300"  # 0.394, 0.506: half up
    assert eval_difference_text(job) == "-3 points [-8, 2] (60 improved, 9 regressed), step 10 - before over 300 rows"
    assert eval_text(_job(after={**AFTER, "n": 280})) == "34% [29-39] -> 51% [45-57], n=300 -> 280"


def test_a_single_evaluation_says_when_it_ran() -> None:
    only_before = _job(points=[BEFORE], after=None, difference=None)
    assert eval_text(only_before) == "34% [29-39] before training, n=300"
    assert eval_difference_text(only_before) is None
    assert eval_text(_job(points=[STEP_10], before=None, after=None)) == "45% [39-51] at step 10, n=300"


def test_no_evaluation_prints_a_dash_and_the_reason() -> None:
    reason = "grpo.num_test_batches is 0, so train_rl runs no evaluation"
    none: dict[str, Any] = {"eval": {"status": "none", "reason": reason, "points": [], "before": None, "after": None, "difference": None}}
    assert eval_text(none) == f"- ({reason})"
    assert eval_difference_text(none) is None
    assert eval_text({}) == "-"  # a service older than JobPublic.eval


@pytest.mark.parametrize(("fraction", "percent"), [(0.125, 13), (0.625, 63), (0.285, 28), (0.0, 0), (1.0, 100), (-0.025, -2)])
def test_whole_percents_round_half_up_as_the_dashboard_does(fraction: float, percent: int) -> None:
    # 12.5 and 62.5 are exact in binary: half up gives 13 and 63 (Math.round), where round() gives 12 and
    # 62; 0.285 * 100 is 28.4999..., 28 in both.
    assert whole_percent(fraction) == percent


def test_the_status_table_has_the_eval_rows_and_keeps_the_reason_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    job = {"id": "rl-abcdefghijkl", "name": "n", "team": "t", "phase": "RUNNING", "message": "", "run_uri": "/runs/x",
           "metrics": {}, **_job()}  # fmt: skip
    print_job(job)
    text = " ".join(capsys.readouterr().out.split())
    assert "eval 34% [29-39] -> 51% [45-57], n=300" in text
    assert "eval change +17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows" in text

    job["eval"] = {"status": "none", "reason": "[red]set grpo.num_test_batches[/red]", "points": [], "before": None,
                   "after": None, "difference": None}  # fmt: skip
    print_job(job)
    text = " ".join(capsys.readouterr().out.split())
    assert "eval - ([red]set grpo.num_test_batches[/red])" in text  # printed as written, not as rich markup
    assert "eval change" not in text
