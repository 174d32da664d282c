"""A job's evaluations as the API shows them: each with its 95% interval, and the change from `before`.

The trainer reports one EvalSummary per evaluation train_rl ran (trainer/contract/run/evaluation.py:
`before`, `step-N`, `after`, with counts and, for all but `before`, the paired change over the same
rows). The record keeps them (`JobRecord.report.eval_points`, one per label, oldest first, at most
MAX_EVAL_POINTS); this module turns them into `JobPublic.train_evals` and says why there is none.
"""

from __future__ import annotations

from typing import Any

from service.domain.records.job_eval_models import EvalDifference, EvalPoint, JobEval
from service.domain.records.phases import JobPhase
from trainer.contract import JobSpec
from trainer.contract.run.evaluation import (
    AFTER,
    BEFORE,
    EvalSummary,
    label_step,
    wilson_interval,
)

MAX_EVAL_POINTS = 200  # an eval every step of a long run keeps its newest points; before and after always stay


def push_eval(points: list[EvalSummary], summary: EvalSummary) -> list[EvalSummary]:
    """The points with `summary` in (replacing its label: a resumed trainer may evaluate again), oldest first."""
    kept = sorted([p for p in points if p.label != summary.label] + [summary], key=eval_order)
    while len(kept) > MAX_EVAL_POINTS:
        kept.pop(next(i for i, p in enumerate(kept) if p.label not in (BEFORE, AFTER)))
    return kept


def eval_order(summary: EvalSummary) -> tuple[int, int]:
    """before, then step-N by N, then after."""
    label = summary.label
    if label == BEFORE:
        return (0, 0)
    if label == AFTER:
        return (2, 0)
    return (1, label_step(label) or 0)


def latest_comparison(summaries: list[EvalSummary]) -> EvalSummary | None:
    """The evaluation whose change from `before` says most: `after`, else the newest step-N that has one."""
    compared = [s for s in summaries if s.vs_before is not None]
    return compared[-1] if compared else None


def public_point(summary: EvalSummary) -> EvalPoint:
    n = summary.n
    return EvalPoint(
        label=summary.label,
        step=summary.step,
        n=n,
        accuracy=summary.correct / n if n else None,
        scored_by=summary.scored_by,
        maxtext_accuracy=summary.maxtext_correct / n if n and summary.maxtext_correct is not None else None,
        ci95=wilson_interval(summary.correct, n),
        format_accuracy=summary.format_correct / n if n else None,
        partial_accuracy=summary.partial_correct / n if n else None,
        mean_reward=summary.mean_reward,
        samples_per_row=summary.samples_per_row,
        sampling=summary.sampling,
    )


def job_eval(summaries: list[EvalSummary], *, spec: JobSpec, phase: JobPhase) -> JobEval:
    if not summaries:
        return JobEval(status="none", reason=_why_none(spec, phase), points=[], before=None, after=None, difference=None)
    public = [public_point(s) for s in summaries]
    by_label = {p.label: p for p in public}
    compared = latest_comparison(summaries)
    difference = None
    if compared is not None and compared.vs_before is not None:
        difference = EvalDifference(of=compared.label, **compared.vs_before.model_dump())
    return JobEval(
        status="available", reason=None, points=public, before=by_label.get(BEFORE), after=by_label.get(AFTER), difference=difference
    )


def _why_none(spec: JobSpec, phase: JobPhase) -> str:
    if not spec.grpo.num_test_batches:
        return (
            "grpo.num_test_batches is 0, so train_rl runs no evaluation; set it above 0 (with dataset.eval_files "
            "for file data) to evaluate the policy before and after training"
        )
    if phase.is_terminal():
        return "the job ended before an evaluation finished (train_rl evaluates before its first step and after its last)"
    return "no evaluation has finished yet: train_rl evaluates before its first train step and after its last"


def eval_event_data(summary: EvalSummary) -> dict[str, Any]:
    """What an `eval` entry of the job's event log (and SSE) carries besides step and metrics."""
    return {
        "point": public_point(summary).model_dump(mode="json"),
        "difference": summary.vs_before.model_dump(mode="json") if summary.vs_before else None,
    }
