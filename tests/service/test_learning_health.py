"""The learning-health verdict (service/domain/learning_health.py), table-driven: each verdict, their
precedence, the boundaries of every threshold, and nothing before the first train step."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from service_helpers import T0

from service.domain.learning_health import (
    HEALTH_WINDOW_STEPS,
    HealthPolicy,
    TrainStepSummary,
    Verdict,
    assess_learning,
    push_step,
    read_window,
)
from service.domain.phases import JobPhase
from trainer.contract import SIGNAL_METRIC, TrainStep

POLICY = HealthPolicy(kl_max=1.0, no_signal_steps=3, stall_floor_s=300.0, stall_step_intervals=5.0)
STEP_S = 10.0  # the steps below come every 10 s, so the stall limit is the floor: max(300, 5 x 10)


def steps(*signal: float | None, kl: float = 0.01, loss: float = 0.5) -> list[TrainStepSummary]:
    """One step per signal fraction, STEP_S apart, starting at T0 + STEP_S."""
    return [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=s, loss=loss, kl=kl)
        for i, s in enumerate(signal, start=1)
    ]


def with_last(history: list[TrainStepSummary], **changes: object) -> list[TrainStepSummary]:
    last = history[-1]
    values = {**last.__dict__, **changes}
    return [*history[:-1], TrainStepSummary(**values)]  # type: ignore[arg-type]


@dataclass
class Case:
    name: str
    history: list[TrainStepSummary]
    expected: Verdict | None
    after_last_s: float = 1.0  # now = the last step's time + this
    phase: JobPhase = JobPhase.RUNNING
    stage: str | None = "train"
    says: list[str] = field(default_factory=list)  # the message must contain each


CASES = [
    Case("nothing before the first train step", [], None),
    Case("steps advancing with signal", steps(0.5, 0.75), Verdict.LEARNING, says=["at step 2, 75% of prompts"]),
    Case("no signal fraction reported (older trainer)", steps(None, None, None), Verdict.LEARNING,
         says=["no signal fraction"]),
    # no-signal: the last N steps, each exactly 0
    Case("no signal at each of the last 3 steps", steps(0.5, 0.0, 0.0, 0.0), Verdict.NO_SIGNAL,
         says=["same reward", "advantages are zero", "grpo.num_generations", "grpo.temperature", "partial credit"]),
    Case("fewer steps than N: not no-signal yet", steps(0.0, 0.0), Verdict.LEARNING,
         says=["step 2 had no prompt whose completions got different rewards", "3 such steps in a row"]),
    Case("signal came back at the last step", steps(0.0, 0.0, 0.0, 0.25), Verdict.LEARNING),
    Case("one of the last N had signal", steps(0.0, 0.125, 0.0, 0.0), Verdict.LEARNING),
    Case("an unknown fraction is not zero", steps(0.0, None, 0.0), Verdict.LEARNING),
    # diverging: the latest step only
    Case("non-finite loss", with_last(steps(0.5, 0.5), nonfinite=("actor/train/loss", "loss"), loss=None),
         Verdict.DIVERGING, says=["the loss is NaN or infinite at step 2", "grpo.learning_rate", "grpo.beta",
                                  "before step 2", "/checkpoints/actor"]),
    Case("non-finite KL", with_last(steps(0.5), nonfinite=("kl",), kl=None), Verdict.DIVERGING, says=["the KL is NaN"]),
    Case("KL above the bound", with_last(steps(0.5, 0.5), kl=1.5), Verdict.DIVERGING, says=["1.5", "above 1"]),
    Case("KL exactly at the bound is not divergence", with_last(steps(0.5, 0.5), kl=1.0), Verdict.LEARNING),
    Case("a non-finite reward metric alone is not divergence",
         with_last(steps(0.5), nonfinite=("rewards/train/mean",)), Verdict.LEARNING),
    Case("recovered after a bad step", [*with_last(steps(0.5, 0.5), kl=3.0), *steps(0.5, 0.5, 0.5)[2:]],
         Verdict.LEARNING),
    # stalled: RUNNING in the train stage, no step for more than max(floor, 5 x median interval)
    Case("no step for longer than the floor", steps(0.5, 0.5), Verdict.STALLED, after_last_s=301,
         says=["no train step for 5m 1s", "the last was step 2", "every 10s", "rljob logs rl-000000000001"]),
    Case("exactly the floor is not stalled", steps(0.5, 0.5), Verdict.LEARNING, after_last_s=300),
    Case("a slow job's limit is 5 median intervals",
         [TrainStepSummary(step=i, time=T0 + timedelta(seconds=100 * i), signal_fraction=0.5) for i in range(1, 4)],
         Verdict.LEARNING, after_last_s=499),
    Case("... and past it, stalled",
         [TrainStepSummary(step=i, time=T0 + timedelta(seconds=100 * i), signal_fraction=0.5) for i in range(1, 4)],
         Verdict.STALLED, after_last_s=501),
    Case("a single step: the floor alone", steps(0.5), Verdict.STALLED, after_last_s=301),
    Case("not in the train stage: never stalled", steps(0.5, 0.5), Verdict.LEARNING, after_last_s=3600, stage="export"),
    Case("terminal: never stalled", steps(0.5, 0.5), Verdict.LEARNING, after_last_s=3600, phase=JobPhase.SUCCEEDED),
    Case("terminal keeps a step verdict", steps(0.0, 0.0, 0.0), Verdict.NO_SIGNAL, after_last_s=3600,
         phase=JobPhase.FAILED),
    # precedence: diverging > stalled > no-signal > learning
    Case("diverging beats stalled", with_last(steps(0.5, 0.5), kl=9.0), Verdict.DIVERGING, after_last_s=3600),
    Case("stalled beats no-signal", steps(0.0, 0.0, 0.0), Verdict.STALLED, after_last_s=3600),
    Case("diverging beats no-signal", with_last(steps(0.0, 0.0, 0.0), nonfinite=("loss",)), Verdict.DIVERGING),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdict(case: Case) -> None:
    now = (case.history[-1].time if case.history else T0) + timedelta(seconds=case.after_last_s)
    health = assess_learning(
        case.history, phase=case.phase, stage=case.stage, now=now, policy=POLICY, job_id="rl-000000000001",
        checkpoints_uri="/runs/rl-000000000001/rl/rl-000000000001/checkpoints/actor",
    )  # fmt: skip
    if case.expected is None:
        assert health is None
        return
    assert health is not None and health.verdict is case.expected, health
    assert health.step == case.history[-1].step
    for text in case.says:
        assert text in health.message, (text, health.message)


def test_divergence_names_the_first_bad_step_for_the_checkpoints() -> None:
    ok, second, third = steps(0.5, 0.5, 0.5)
    history = [ok, with_last([second], kl=2.0)[0], with_last([third], kl=5.0)[0]]  # steps 2 and 3 diverge
    health = assess_learning(history, phase=JobPhase.RUNNING, stage="train", now=history[-1].time, policy=POLICY)
    assert health is not None and "before step 2" in health.message and "the run directory" in health.message


def verdict_at(history: list[TrainStepSummary], now, policy: HealthPolicy = POLICY, **kwargs: object) -> Verdict | None:
    health = assess_learning(history, phase=JobPhase.RUNNING, stage="train", now=now, policy=policy, **kwargs)  # type: ignore[arg-type]
    return None if health is None else health.verdict


def test_a_resumed_train_stage_restarts_the_stall_clock() -> None:
    history = steps(0.5, 0.5)
    restarted = history[-1].time + timedelta(seconds=1000)  # the trainer came back and began training again
    assert verdict_at(history, restarted + timedelta(seconds=200), train_started_at=restarted) is Verdict.LEARNING
    assert verdict_at(history, restarted + timedelta(seconds=301), train_started_at=restarted) is Verdict.STALLED


def test_the_no_signal_window_follows_the_policy() -> None:
    history = steps(0.0, 0.0, 0.0)
    assert verdict_at(history, history[-1].time, HealthPolicy(no_signal_steps=5)) is Verdict.LEARNING
    assert verdict_at(history[:1], history[0].time, HealthPolicy(no_signal_steps=1)) is Verdict.NO_SIGNAL


def test_the_window_is_bounded_ordered_and_replaces_re_reported_steps() -> None:
    window: list[dict] = []
    for summary in steps(*[0.5] * (HEALTH_WINDOW_STEPS + 5)):
        window = push_step(window, summary)
    assert [s.step for s in read_window(window)] == list(range(6, HEALTH_WINDOW_STEPS + 6))
    # A resumed trainer reports step 10 again: what came after the old step 10 is gone.
    window = push_step(window, TrainStepSummary(step=10, time=T0 + timedelta(hours=1), signal_fraction=0.0))
    assert [s.step for s in read_window(window)] == [6, 7, 8, 9, 10]
    assert read_window(window)[-1].signal_fraction == 0.0


def test_a_summary_comes_from_the_event_and_survives_json() -> None:
    event = TrainStep(
        seq=3, time=T0, job_id="rl-000000000001", step=4, total_steps=10, loss=None, kl=0.2,
        metrics={SIGNAL_METRIC: 0.25, "actor/train/loss": 0.7}, nonfinite=["loss"],
    )  # fmt: skip
    summary = TrainStepSummary.of_event(event)
    assert (summary.step, summary.signal_fraction, summary.kl, summary.nonfinite) == (4, 0.25, 0.2, ("loss",))
    assert summary.loss == 0.7  # the Tunix scalar when the headline value is missing
    assert read_window([summary.to_json(), {"garbage": True}]) == [summary]
