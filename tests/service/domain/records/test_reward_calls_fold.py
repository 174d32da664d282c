"""The reward sandbox's figures in a job (service/domain/records/reward_calls.py): train steps' counts add up, the newest
latencies and isolation are kept, and a job whose trainer reported none shows none."""

from __future__ import annotations

from datetime import UTC, datetime

from service.domain.progress import fold_report
from service.domain.records.reward_calls import RewardCalls
from service.domain.records.run_report import RunReport
from trainer.contract import TrainStep
from trainer.contract.spec.reward_sandbox import (
    CALLS_METRIC,
    ERRORS_METRIC,
    LATENCY_P50_METRIC,
    LATENCY_P95_METRIC,
    NETWORK_ISOLATED_METRIC,
    TIMEOUTS_METRIC,
    WRITES_CONFINED_METRIC,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _step(seq: int, calls: float, errors: float, timeouts: float, p50: float, p95: float) -> TrainStep:
    metrics = {
        "actor/train/loss": 1.0,
        CALLS_METRIC: calls,
        ERRORS_METRIC: errors,
        TIMEOUTS_METRIC: timeouts,
        LATENCY_P50_METRIC: p50,
        LATENCY_P95_METRIC: p95,
        NETWORK_ISOLATED_METRIC: 1.0,
    }
    return TrainStep(seq=seq, time=T0, job_id="rl-aaaaaaaaaaaa", step=seq, total_steps=4, loss=1.0, metrics=metrics)


def test_counts_add_up_over_steps_and_latencies_are_the_newest_steps():
    report = RunReport()
    for event in (_step(1, 4, 1, 0, 0.01, 0.5), _step(2, 4, 0, 1, 0.02, 3.0)):
        folded = fold_report(report, event)
        assert folded is not None
        report = folded.report
    calls = RewardCalls.of_metrics(report.latest_metrics)
    assert calls == RewardCalls(calls=8, errors=1, timeouts=1, latency_p50_s=0.02, latency_p95_s=3.0, network_isolated=True)
    assert calls.says() == "8 calls, 1 errors, 1 timeouts; latency p50 0.02 s, p95 3 s; sandboxed, no network"


def test_a_job_without_sandboxed_rewards_shows_none():
    folded = fold_report(RunReport(), TrainStep(seq=1, time=T0, job_id="rl-aaaaaaaaaaaa", step=1, total_steps=4, loss=1.0))
    assert folded is not None and RewardCalls.of_metrics(folded.report.latest_metrics) is None


def test_writes_the_workers_could_make_anywhere_are_said_in_status():
    """Under gVisor without the reward container (no Landlock), the trainer reports 0: status says so."""
    step = _step(1, 4, 0, 0, 0.01, 0.5)
    for reported, says in ((0.0, ", WRITES NOT CONFINED (see the train log)"), (1.0, "")):
        metrics = {**step.metrics, WRITES_CONFINED_METRIC: reported}
        folded = fold_report(RunReport(), step.model_copy(update={"metrics": metrics}))
        assert folded is not None
        calls = RewardCalls.of_metrics(folded.report.latest_metrics)
        assert calls is not None and calls.writes_confined is (reported == 1.0)
        assert calls.says().endswith("sandboxed, no network" + says)
