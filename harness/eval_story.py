"""Three evaluations of one job on 300 eval rows, as the trainer reports them in `eval` events
(trainer/contract/run/evaluation.py's EvalSummary): `before` (step 0), `step-10` and `after` (step 20).

The per-row outcomes are made up, with known flips, so what the page must show is known exactly:
before 102/300 right; at step 10, 38 rows improved and 5 regressed (135/300); after, 60 improved and
9 regressed (153/300). The counts and the paired interval are the trainer's own code's
(`paired_difference`), and the 95% Wilson intervals are the service's, as in a real run.
Used by the browser tests and by bench/control_plane/eval_panel_screenshot.py.
"""

from __future__ import annotations

from trainer.contract.run.evaluation import EvalSummary, paired_difference, step_label

N_ROWS = 300
TOTAL_STEPS = 20


def _outcomes(right: range | list[int]) -> dict[str, float]:
    chosen = set(right)
    return {f"row-{i:03d}": float(i in chosen) for i in range(N_ROWS)}


BEFORE_ROWS = _outcomes(range(102))
# Rows 0-4 (right before) go wrong, rows 102-139 (wrong before) go right.
STEP_10_ROWS = _outcomes([*range(5, 102), *range(102, 140)])
AFTER_ROWS = _outcomes([*range(9, 102), *range(102, 162)])


def _summary(label: str, step: int, rows: dict[str, float]) -> EvalSummary:
    correct = sum(rows.values())
    return EvalSummary(
        label=label,
        step=step,
        n=len(rows),
        correct=correct,
        format_correct=len(rows) - 27,
        partial_correct=correct + 20,
        mean_reward=correct / len(rows) * 3.0,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file=f"{label}.jsonl",
        vs_before=None if label == "before" else paired_difference(BEFORE_ROWS, rows),
    )


def eval_summaries() -> list[EvalSummary]:
    """before, step-10, after: in the order a run reports them."""
    return [
        _summary("before", 0, BEFORE_ROWS),
        _summary(step_label(10), 10, STEP_10_ROWS),
        _summary("after", TOTAL_STEPS, AFTER_ROWS),
    ]


# What the job page must say, worked out once by hand from the outcomes above: Wilson 95% intervals
# of 102/300 = [28.9%, 39.5%] and 153/300 = [45.4%, 56.6%]; Newcombe's paired interval of +17 points
# (60 up, 9 down) = [11.9, 22.0].
HEADLINE_BEFORE_ONLY = "34% [29–40] before training, n=300"
HEADLINE_AT_STEP_10 = "34% [29–40] → 45% [39–51] at step 10, n=300"
HEADLINE = "34% [29–40] → 51% [45–57], n=300"
DIFFERENCE = "+17 points [12, 22] (60 improved, 9 regressed)"
