"""A job's evaluations: the statistics (against scipy and by simulated coverage), the fold of EvalResult
events into the record (stored, surviving a reopen, logged for SSE), and JobPublic.train_evals with its reasons."""

from __future__ import annotations

import math
import random
from pathlib import Path
from statistics import NormalDist

import pytest
from scipy import stats

from service.adapters.store import SqlJobStore
from service.domain.evals.job_eval import MAX_EVAL_POINTS, job_eval, public_point, push_eval
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.views import to_public
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec, spec_body
from trainer.contract import SIGNAL_METRIC, EvalResult, JobSpec, TrainStep
from trainer.contract.run.evaluation import EvalSummary, paired_difference, wilson_interval

TEAM_A = Caller(team="team-a", token_id="tok_a")


@pytest.mark.parametrize(("k", "n"), [(0, 2), (1, 2), (0, 10), (5, 10), (34, 100), (151, 300), (300, 300)])
def test_wilson_interval_matches_scipy(k: int, n: int) -> None:
    expected = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((expected.low, expected.high), abs=1e-9)


# (successes, n): every count of small n, and the edges and middle of large ones (1319: GSM8K's test split).
WILSON_GRID = [(k, n) for n in (1, 2, 3, 5, 8) for k in range(n + 1)] + [
    (k, n) for n in (20, 100, 300, 1319) for k in sorted({0, 1, 2, n // 3, n // 2, n - 2, n - 1, n})
]


def wilson_from_the_formula(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson (1927), written here from its closed form, not from the code it checks: the roots in p of
    (successes - n p)^2 = z^2 n p (1 - p), i.e. (k + z^2/2 -+ z sqrt(k (n - k) / n + z^2 / 4)) / (n + z^2)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = successes + z * z / 2
    spread = z * math.sqrt(successes * (n - successes) / n + z * z / 4)
    return (centre - spread) / (n + z * z), (centre + spread) / (n + z * z)


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.99, 0.999])
def test_wilson_interval_matches_scipy_and_the_formula_at_each_confidence(confidence: float) -> None:
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    for k, n in WILSON_GRID:
        scipys = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
        got = wilson_interval(k, n, z=z)
        assert got == pytest.approx((scipys.low, scipys.high), abs=1e-9), (k, n)
        assert got == pytest.approx(wilson_from_the_formula(k, n, confidence), abs=1e-9), (k, n)
        assert (got[0] < 1e-12) is (k == 0) and (got[1] > 1 - 1e-12) is (k == n), (k, n)  # an edge only at 0 or n


def test_a_training_jobs_eval_points_carry_the_95_percent_wilson_interval() -> None:
    """JobPublic.train_evals' points (job_eval.public_point) for every (correct, n) of the grid."""
    for k, n in WILSON_GRID:
        summary = EvalSummary(
            label="after", step=9, n=n, correct=k, format_correct=n, partial_correct=k, samples_per_row=1, sampling="greedy", rows_file="r"
        )
        expected = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert public_point(summary).ci95 == pytest.approx((expected.low, expected.high), abs=1e-9), (k, n)
        assert public_point(summary).ci95 == pytest.approx(wilson_from_the_formula(k, n, 0.95), abs=1e-9), (k, n)


@pytest.mark.parametrize(("both", "only_before", "only_after"), [(0.25, 0.05, 0.2), (0.3, 0.1, 0.1), (0.02, 0.03, 0.08)])
def test_paired_interval_covers_the_true_difference_about_95_percent_of_the_time(
    both: float, only_before: float, only_after: float
) -> None:
    """Paired 0/1 outcomes on 300 prompts drawn from a known joint distribution (true difference
    only_after - only_before): Newcombe's interval should cover it in about 95% of 600 runs (the
    binomial noise of 600 runs is about +-1.8 points)."""
    rng = random.Random(20261201)
    cells = [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)]
    weights = [both, only_before, only_after, 1 - both - only_before - only_after]
    truth, covered, runs = only_after - only_before, 0, 600
    for _ in range(runs):
        drawn = rng.choices(cells, weights=weights, k=300)
        result = paired_difference({str(i): b for i, (b, _) in enumerate(drawn)}, {str(i): a for i, (_, a) in enumerate(drawn)})
        assert result is not None and result.method == "newcombe-paired-wilson"
        covered += result.ci95[0] <= truth <= result.ci95[1]
    assert 0.92 <= covered / runs <= 0.985, covered / runs


def test_paired_difference_counts_flips_and_uses_only_shared_rows() -> None:
    before = {"a": 0.0, "b": 0.0, "c": 1.0, "d": 1.0, "only-before": 1.0}
    after = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0, "only-after": 0.0}
    result = paired_difference(before, after)
    assert result is not None
    assert (result.n, result.improved, result.regressed, result.difference) == (4, 1, 1, 0.0)
    assert result.ci95[0] < 0 < result.ci95[1]
    fractional = paired_difference({"a": 0.25, "b": 0.5, "c": 0.0}, {"a": 0.5, "b": 0.75, "c": 0.25})
    assert fractional is not None and fractional.method == "paired-t" and fractional.difference == pytest.approx(0.25)
    assert paired_difference({"a": 1.0}, {"b": 1.0}) is None


@pytest.mark.parametrize("n", [3, 4, 7, 30, 300])
def test_the_paired_t_interval_of_fractional_scores_matches_scipy(n: int) -> None:
    """Fractional scores (the fraction of a row's 8 samples that are correct) whose differences vary from row to
    row: the interval is scipy's paired t interval (ttest_rel), within the t quantile's approximation (under 1e-3
    of the half width; its largest error, 5e-4, is at 6 degrees of freedom). z for t is 0.4% narrow even at 299
    degrees of freedom and 2.2x narrow at 2, so n spans the quantile's table and its expansion."""
    rng = random.Random(20260317 + n)
    before = {str(i): rng.randrange(9) / 8 for i in range(n)}
    after = {i: min(1.0, max(0.0, b + rng.choice([-2, -1, 0, 1, 1, 2, 3]) / 8)) for i, b in before.items()}
    before["0"], after["0"] = 0.25, 0.625  # never all 0/1 (that would be Newcombe's), never one difference for all
    result = paired_difference(before, after)
    assert result is not None and result.method == "paired-t" and result.n == n
    ids = sorted(before)
    expected = stats.ttest_rel([after[i] for i in ids], [before[i] for i in ids]).confidence_interval(confidence_level=0.95)
    half = (expected.high - expected.low) / 2
    assert half > 0.01, "the differences must vary, or a zero-width interval would pass"
    assert result.difference == pytest.approx((expected.low + expected.high) / 2, abs=1e-12)
    low, high = result.ci95
    assert -1.0 < expected.low and expected.high < 1.0, "inside the clamp, so the clamp cannot hide a wrong width"
    assert low == pytest.approx(expected.low, abs=1e-3 * half)
    assert high == pytest.approx(expected.high, abs=1e-3 * half)


def summary(label: str, step: int, correct: float, n: int = 300, vs: tuple[dict, dict] | None = None) -> EvalSummary:
    return EvalSummary(
        label=label,
        step=step,
        n=n,
        correct=correct,
        format_correct=n,
        partial_correct=correct,
        mean_reward=correct / n,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file=f"{label}.jsonl",
        vs_before=paired_difference(*vs) if vs else None,
    )


def rows(n: int, correct: int) -> dict[str, float]:
    return {f"r{i}": float(i < correct) for i in range(n)}


def test_job_eval_shows_intervals_and_the_paired_change_from_before(tmp_path: Path) -> None:
    points: list[EvalSummary] = []
    points = push_eval(points, summary("after", 30, 150, vs=(rows(300, 100), rows(300, 150))))
    points = push_eval(points, summary("before", 0, 100))
    points = push_eval(points, summary("step-10", 10, 120, vs=(rows(300, 100), rows(300, 120))))
    shown = job_eval(points, spec=record_spec(str(tmp_path / "runs")), phase=JobPhase.SUCCEEDED)
    assert shown.status == "available" and shown.reason is None
    assert [p.label for p in shown.points] == ["before", "step-10", "after"]  # by step, whatever the arrival order
    assert shown.before is not None and shown.before.accuracy == pytest.approx(1 / 3)
    assert shown.before.ci95 == pytest.approx(wilson_interval(100, 300))
    assert shown.difference is not None and shown.difference.of == "after"
    assert shown.difference.difference == pytest.approx(50 / 300) and shown.difference.ci95[0] > 0.1
    # A resumed trainer evaluates a label again: the newer one replaces it.
    again = push_eval(points, summary("step-10", 10, 90, vs=(rows(300, 100), rows(300, 90))))
    assert [p.correct for p in again if p.label == "step-10"] == [90]


def test_points_are_bounded_keeping_before_and_after() -> None:
    points = [summary("before", 0, 1), summary("after", 9999, 2)]
    for step in range(1, MAX_EVAL_POINTS + 20):
        points = push_eval(points, summary(f"step-{step}", step, 1))
    labels = [p.label for p in points]
    assert len(points) == MAX_EVAL_POINTS and labels[0] == "before" and labels[-1] == "after"
    assert labels[1] == "step-22"  # 221 points: the 21 oldest steps went first


@pytest.mark.parametrize(
    ("tests", "phase", "says"),
    [
        (0, JobPhase.RUNNING, "grpo.num_test_batches is 0"),
        (2, JobPhase.RUNNING, "no evaluation has finished yet"),
        (2, JobPhase.FAILED, "the job ended before an evaluation finished"),
    ],
)
def test_no_evaluation_says_why(tmp_path: Path, tests: int, phase: JobPhase, says: str) -> None:
    shown = job_eval([], spec=record_spec(str(tmp_path / "runs"), grpo={"num_test_batches": tests}), phase=phase)
    assert shown.status == "none" and shown.points == [] and says in (shown.reason or "")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def test_eval_events_are_folded_stored_and_logged(
    db_url: str, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    store = SqlJobStore(db_url)
    store.migrate()
    service = JobService(JobPorts(store, fake_launcher, fake_progress), clock=clock)
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path, grpo={"num_test_batches": 2})))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    before, after = summary("before", 0, 100), summary("after", 3, 160, vs=(rows(300, 100), rows(300, 160)))
    fake_progress.add(EvalResult(seq=0, time=clock(), job_id=job_id, step=0, accuracy=1 / 3, summary=before))
    for step in (1, 2, 3):
        fake_progress.add(
            TrainStep(seq=step, time=clock(), job_id=job_id, step=step, total_steps=3, loss=0.1, kl=0.01, metrics={SIGNAL_METRIC: 0.5})
        )
    service.ingest_progress(job_id)
    assert store.get(job_id).health_verdict == "signal"  # type: ignore[union-attr]  # 3 steps say nothing yet
    fake_progress.add(EvalResult(seq=4, time=clock(), job_id=job_id, step=3, accuracy=160 / 300, summary=after))
    service.ingest_progress(job_id)
    store.close()

    reopened = SqlJobStore(db_url)  # as after a service restart
    try:
        record = reopened.get(job_id)
        assert record is not None
        shown = to_public(record, clock()).train_evals
        assert shown.before is not None and shown.after is not None and shown.after.n == 300
        assert shown.difference is not None and shown.difference.difference == pytest.approx(0.2)
        logged = [e.data for e in reopened.events_after(0, job_id=job_id) if e.kind == "eval"]
        assert [e["point"]["label"] for e in logged] == ["before", "after"]
        assert logged[1]["point"]["ci95"] == pytest.approx(list(wilson_interval(160, 300)))
        assert logged[1]["difference"]["n"] == 300 and logged[0]["difference"] is None
        # The paired change over 300 rows lies above 0: the verdict rests on it, and says so.
        health = to_public(record, clock()).health
        assert health is not None and health.verdict == "improving" and "300 paired rows" in health.message
        assert [e.data["verdict"] for e in reopened.events_after(0, job_id=job_id) if e.kind == "health"] == ["signal", "improving"]
    finally:
        reopened.close()
