"""Two eval jobs compared: the paired difference of their scores, and what a point of it cost.

Both must have SUCCEEDED with a report, on one suite (scope and name) at one version: a different content (one row
changed) is a different version, and such evaluations are refused with a message naming both versions and hashes.
Their outcomes files are read through the RunFiles port (bounded, no links: the jobs wrote them) and paired by row
id in trainer/contract/eval_report.compare_outcomes (paired bootstrap 95% CI, exact McNemar p).

Cost per point: when eval a evaluated a training job's trained weights (its checkpoint names the job and is not
its base), that job's cost divided by the points a gained over b, for pass@1 and sampled accuracy; its interval is
the cost over each bound of the difference's interval, given only when the whole interval is a gain.

A comparison of two finished evals never changes, so each is kept in memory once computed (COMPARISONS_KEPT): its
bootstrap is pure Python (0.1 to 0.2 s for GSM8K's 1319 rows, drawn per distinct score value: eval_report.py), and
reading two outcomes files of thousands of rows is the larger part.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from service.domain.records.errors import EvalsNotComparable, RunFilesUnavailable
from service.domain.records.eval_models import CostPerPoint, EvalComparisonPublic, EvalSide, EvalSuitePublic
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import RunFiles
from service.domain.records.usage_models import JobUsage
from trainer.contract.run.eval_report import Comparison, NotComparable, RowOutcome, Score, compare_outcomes

from .suite_versions import suite_public

COST_SCORES: tuple[Score, ...] = ("pass@1", "sampled")
COMPARISONS_KEPT = 64


def _finished_report(record: JobRecord) -> None:
    if not record.spec.is_eval:
        raise EvalsNotComparable(f"{record.id} is not an eval job")
    if record.phase is not JobPhase.SUCCEEDED or record.report.eval_report is None:
        raise EvalsNotComparable(f"eval {record.id} is {record.phase.value} without a report; compare once both evals have SUCCEEDED")


def _version_text(suite: EvalSuitePublic) -> str:
    version = f"v{suite.version}" if suite.version is not None else "unversioned"
    return f"{version} (hash {suite.content_hash})"


def check_comparable(a: JobRecord, b: JobRecord) -> EvalSuitePublic:
    """The suite version both ran; EvalsNotComparable saying why not."""
    _finished_report(a)
    _finished_report(b)
    suite_a, suite_b = suite_public(a), suite_public(b)
    if (suite_a.scope, suite_a.name) != (suite_b.scope, suite_b.name):
        raise EvalsNotComparable(
            f"{a.id} ran suite {suite_a.name} ({suite_a.scope}) and {b.id} suite {suite_b.name} ({suite_b.scope}): "
            "different suites cannot be compared"
        )
    if suite_a.version is None or suite_a.version != suite_b.version or suite_a.content_hash != suite_b.content_hash:
        raise EvalsNotComparable(
            f"{suite_a.name} {_version_text(suite_a)} vs {_version_text(suite_b)}: different suite versions cannot be compared; "
            "evaluate both on one version"
        )
    return suite_a


def _outcomes(run_files: RunFiles | None, record: JobRecord) -> list[RowOutcome]:
    if run_files is None:
        raise RunFilesUnavailable("this service reads no run directories, so evals cannot be compared")
    rows = run_files.read_eval_outcomes(record)
    if rows is None:
        raise EvalsNotComparable(f"eval {record.id} has no outcomes file ({record.layout.eval_outcomes})")
    return rows


def cost_per_point(comparison: Comparison, training: JobRecord, cost_usd: float) -> list[CostPerPoint]:
    found = []
    for score in COST_SCORES:
        difference = comparison.get(score)
        points = difference.difference * 100
        low, high = difference.ci95[0] * 100, difference.ci95[1] * 100
        per_point = cost_usd / points if points > 0 else None
        interval = (cost_usd / high, cost_usd / low) if low > 0 else None
        if interval is not None and per_point is not None:
            verdict = f"${per_point:,.2f} per point of {score} [${interval[0]:,.2f}, ${interval[1]:,.2f}] 95% CI"
        elif points <= 0:
            verdict = f"no gain established: {score} changed by {points:+.1f} points [{low:+.1f}, {high:+.1f}] 95% CI"
        else:
            verdict = f"no gain established: {score} +{points:.1f} points, but its 95% CI [{low:+.1f}, {high:+.1f}] does not exclude 0"
        found.append(
            CostPerPoint(
                score=score,
                training_job_id=training.id,
                training_cost_usd=cost_usd,
                points=points,
                ci95_points=(low, high),
                usd_per_point=per_point,
                ci95_usd_per_point=interval,
                verdict=verdict,
            )
        )
    return found


class _Kept:
    """Comparisons of finished evals, newest last, at most COMPARISONS_KEPT."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str, str], Comparison] = OrderedDict()

    def get(self, key: tuple[str, str, str], compute: Callable[[], Comparison]) -> Comparison:
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        comparison = compute()  # outside the lock: another pair's request does not wait for this one
        with self._lock:
            self._kept[key] = comparison
            while len(self._kept) > COMPARISONS_KEPT:
                self._kept.popitem(last=False)
        return comparison


_KEPT = _Kept()


def _side(record: JobRecord, usage: JobUsage) -> EvalSide:
    report = record.report.eval_report
    task = record.spec.evaluation
    if report is None or task is None:
        raise EvalsNotComparable(f"eval {record.id} has no report")
    return EvalSide(
        eval_id=record.id,
        name=record.name,
        checkpoint=task.checkpoint,
        model_source=report.model_source,
        chip_hours=usage.billed_chip_hours,
        cost_usd=usage.cost_usd,
        engine=report.engine,
    )


def _primary(record: JobRecord) -> str:
    return record.report.eval_report.primary if record.report.eval_report else ""


def compare_evals(
    run_files: RunFiles | None,
    a: JobRecord,
    b: JobRecord,
    function: str | None = None,
    *,
    usage_of: Callable[[JobRecord], JobUsage],
    training: JobRecord | None = None,
) -> EvalComparisonPublic:
    """Eval a against eval b on `function` (default: a's primary reward function). `usage_of` gives a job's usage
    as the API shows it; `training` is the job whose weights a evaluated (a.spec.evaluation.checkpoint.job_id),
    when the caller can see it: its cost per point is then included. EvalsNotComparable (409) says why two
    evals cannot be compared; RunFileRefused (409) and RunFilesUnavailable (503) come from reading outcomes."""
    suite = check_comparable(a, b)
    function = function or _primary(a)
    for record in (a, b):
        scored = record.report.eval_report.functions if record.report.eval_report else {}
        if function not in scored:
            have = ", ".join(sorted(scored)) or "none"
            raise EvalsNotComparable(f"eval {record.id} has no scores for reward function {function!r} (it has: {have})")

    def compute() -> Comparison:
        try:
            return compare_outcomes(_outcomes(run_files, a), _outcomes(run_files, b), function)
        except NotComparable as e:
            raise EvalsNotComparable(f"{a.id} vs {b.id}: {e}") from None

    comparison = _KEPT.get((a.id, b.id, function), compute)
    found = EvalComparisonPublic(a=_side(a, usage_of(a)), b=_side(b, usage_of(b)), suite=suite, comparison=comparison, cost_per_point=[])
    checkpoint = a.spec.evaluation.checkpoint if a.spec.evaluation else None
    if checkpoint is None or checkpoint.job_id is None or checkpoint.label == "base":
        found.cost_note = f"{a.id} did not evaluate a training job's trained weights: no training cost to divide"
    elif training is None or training.id != checkpoint.job_id:
        found.cost_note = f"training job {checkpoint.job_id} is not visible to you: its cost is not shown"
    elif (cost := usage_of(training).cost_usd) is None:
        found.cost_note = f"training job {training.id} has no price for its hardware: no cost per point"
    else:
        found.cost_per_point = cost_per_point(comparison, training, cost)
    return found
