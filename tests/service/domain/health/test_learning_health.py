"""The learning-health verdict (service/domain/health/learning_health.py), table-driven: each verdict, their
precedence, the boundaries of every threshold, and nothing before the first train step; then what
counts as improvement (an eval comparison or the reward trend) over synthetic histories, including
simulated flat ones, which must not read as improving more often than the test's level."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from service.cli.output import _HEALTH_STYLE
from service.domain.health.learning_health import HealthPolicy, assess_learning
from service.domain.records.health_models import Verdict
from service.domain.records.phases import JobPhase
from service.domain.records.train_step_summary import (
    FIRST_STEPS_KEPT,
    HEALTH_WINDOW_STEPS,
    TrainStepSummary,
    push_step,
    read_window,
    window,
)
from tests.service.service_helpers import T0
from trainer.contract import SIGNAL_METRIC, TrainStep
from trainer.contract.run.evaluation import EvalSummary, PairedDifference, paired_difference
from trainer.contract.run.samples import COMPLETIONS_METRIC, REWARDED_METRIC

POLICY = HealthPolicy(kl_max=1.0, no_signal_steps=3, stall_floor_s=300.0, stall_step_intervals=5.0)
STEP_S = 10.0  # the steps below come every 10 s, so the stall limit is the floor: max(300, 5 x 10)


def steps(*signal: float | None, kl: float = 0.01, loss: float = 0.5) -> list[TrainStepSummary]:
    """One step per signal fraction, STEP_S apart, starting at T0 + STEP_S."""
    return [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=s, loss=loss, kl=kl)
        for i, s in enumerate(signal, start=1)
    ]


def counted(*rewarded: int, of: int = 16, signal: float = 0.5) -> list[TrainStepSummary]:
    """One step per rewarded count, each of `of` completions, with signal; as steps() otherwise."""
    return [
        TrainStepSummary(
            step=i,
            time=T0 + timedelta(seconds=STEP_S * i),
            signal_fraction=signal,
            loss=0.5,
            kl=0.01,
            completions=of,
            rewarded_completions=k,
        )
        for i, k in enumerate(rewarded, start=1)
    ]


def collapsed_steps(*empty: float) -> list[TrainStepSummary]:
    """One step per share of empty completions, with no signal (all empty: one reward per group), after 2 good steps."""
    good = steps(0.5, 0.5)
    return [
        *good,
        *(
            TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=0.0, loss=0.0, kl=0.01, empty_fraction=e)
            for i, e in enumerate(empty, start=3)
        ),
    ]


def lengths(*mean: float | None) -> list[TrainStepSummary]:
    """One step per mean completion length, with signal."""
    return [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=0.5, loss=0.5, kl=0.01, mean_length=m)
        for i, m in enumerate(mean, start=1)
    ]


def evaluation(difference: float, low: float, high: float, n: int = 40) -> EvalSummary:
    """The `after` evaluation at step 20 with the given paired change from `before`."""
    change = PairedDifference(
        difference=difference, ci95=(low, high), n=n, improved=n // 4, regressed=n // 10, method="newcombe-paired-wilson"
    )
    return EvalSummary(
        label="after",
        step=20,
        n=n,
        correct=n / 2,
        format_correct=n,
        partial_correct=n / 2,
        samples_per_row=1,
        sampling="greedy pass_at_1",
        rows_file="after.jsonl",
        vs_before=change,
    )


RISE = (1, 2, 2, 4, 5, 6, 8, 9)  # of 16 each: 6% -> 56% in eight steps
LEVEL = (5, 6, 4, 5, 5, 6, 4, 5, 6, 5, 5, 4)  # of 16 each, twelve steps about a rate of 31%
EVAL_UP = evaluation(0.2, 0.05, 0.35)
EVAL_ZERO = evaluation(0.05, -0.08, 0.18)
EVAL_DOWN = evaluation(-0.12, -0.2, -0.03)


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
    evaluation: EvalSummary | None = None


CASES = [
    Case("nothing before the first train step", [], None),
    Case(
        "steps advancing with signal",
        steps(0.5, 0.75),
        Verdict.SIGNAL,
        says=["at step 2, 75% of prompts", "no evidence of improvement yet", "no rewarded-completion counts"],
    ),
    Case("no signal fraction reported (older trainer)", steps(None, None, None), Verdict.SIGNAL, says=["no signal fraction"]),
    # no-signal: the last N steps, each exactly 0
    Case(
        "no signal at each of the last 3 steps",
        steps(0.5, 0.0, 0.0, 0.0),
        Verdict.NO_SIGNAL,
        says=["same reward", "advantages are zero", "grpo.num_generations", "grpo.temperature", "partial credit"],
    ),
    Case(
        "fewer steps than N: not no-signal yet",
        steps(0.0, 0.0),
        Verdict.SIGNAL,
        says=["step 2 had no prompt whose completions got different rewards", "3 such steps in a row"],
    ),
    Case("signal came back at the last step", steps(0.0, 0.0, 0.0, 0.25), Verdict.SIGNAL),
    Case("one of the last N had signal", steps(0.0, 0.125, 0.0, 0.0), Verdict.SIGNAL),
    Case("an unknown fraction is not zero", steps(0.0, None, 0.0), Verdict.SIGNAL),
    # diverging: the latest step only
    Case(
        "non-finite loss",
        with_last(steps(0.5, 0.5), nonfinite=("actor/train/loss", "loss"), loss=None),
        Verdict.DIVERGING,
        says=["the loss is NaN or infinite at step 2", "grpo.learning_rate", "grpo.beta", "before step 2", "/checkpoints/actor"],
    ),
    Case("non-finite KL", with_last(steps(0.5), nonfinite=("kl",), kl=None), Verdict.DIVERGING, says=["the KL is NaN"]),
    Case("KL above the bound", with_last(steps(0.5, 0.5), kl=1.5), Verdict.DIVERGING, says=["1.5", "above 1"]),
    Case("KL exactly at the bound is not divergence", with_last(steps(0.5, 0.5), kl=1.0), Verdict.SIGNAL),
    Case("a non-finite reward metric alone is not divergence", with_last(steps(0.5), nonfinite=("rewards/train/mean",)), Verdict.SIGNAL),
    Case("recovered after a bad step", [*with_last(steps(0.5, 0.5), kl=3.0), *steps(0.5, 0.5, 0.5)[2:]], Verdict.SIGNAL),
    # stalled: RUNNING in the train stage, no step for more than max(floor, 5 x median interval)
    Case(
        "no step for longer than the floor",
        steps(0.5, 0.5),
        Verdict.STALLED,
        after_last_s=301,
        says=["no train step for 5m 1s", "the last was step 2", "every 10s", "rljob logs rl-000000000001"],
    ),
    Case("exactly the floor is not stalled", steps(0.5, 0.5), Verdict.SIGNAL, after_last_s=300),
    Case(
        "a slow job's limit is 5 median intervals",
        [TrainStepSummary(step=i, time=T0 + timedelta(seconds=100 * i), signal_fraction=0.5) for i in range(1, 4)],
        Verdict.SIGNAL,
        after_last_s=499,
    ),
    Case(
        "... and past it, stalled",
        [TrainStepSummary(step=i, time=T0 + timedelta(seconds=100 * i), signal_fraction=0.5) for i in range(1, 4)],
        Verdict.STALLED,
        after_last_s=501,
    ),
    Case("a single step: the floor alone", steps(0.5), Verdict.STALLED, after_last_s=301),
    Case("not in the train stage: never stalled", steps(0.5, 0.5), Verdict.SIGNAL, after_last_s=3600, stage="export"),
    Case("terminal: never stalled", steps(0.5, 0.5), Verdict.SIGNAL, after_last_s=3600, phase=JobPhase.SUCCEEDED),
    Case("terminal keeps a step verdict", steps(0.0, 0.0, 0.0), Verdict.NO_SIGNAL, after_last_s=3600, phase=JobPhase.FAILED),
    # collapsed: completions empty, or a fraction of their first length, at each of the last 3 steps; all-empty
    # groups have no signal either, and collapsed ranks above no-signal
    Case(
        "all-empty completions for 3 steps",
        collapsed_steps(1.0, 1.0, 1.0),
        Verdict.COLLAPSED,
        says=[
            "stopped writing",
            "100%",
            "lower grpo.learning_rate",
            "checkpoint before the collapse",
            "/checkpoints/actor",
            "rljob samples rl-000000000001",
        ],
    ),
    Case("half empty for 3 steps", collapsed_steps(0.5, 0.6, 0.5), Verdict.COLLAPSED),
    Case("empty at 2 of the last 3 steps: no-signal, not collapsed", collapsed_steps(1.0, 0.2, 1.0), Verdict.NO_SIGNAL),
    Case("a few empty completions are not a collapse", collapsed_steps(0.25, 0.25, 0.25), Verdict.NO_SIGNAL),
    Case(
        "length fell to a tenth of the first step's",
        lengths(30.0, 25.0, 3.0, 2.5, 2.0),
        Verdict.COLLAPSED,
        says=["fell from 30.0 tokens at step 1 to 2.0 at step 5"],
    ),
    Case("length fell, but not to a tenth", lengths(30.0, 25.0, 3.5, 3.2, 3.1), Verdict.SIGNAL),
    Case("no lengths reported (older trainer)", lengths(None, None, None, None), Verdict.SIGNAL),
    # precedence: diverging > stalled > collapsed > no-signal > learning
    Case("diverging beats stalled", with_last(steps(0.5, 0.5), kl=9.0), Verdict.DIVERGING, after_last_s=3600),
    Case("stalled beats no-signal", steps(0.0, 0.0, 0.0), Verdict.STALLED, after_last_s=3600),
    Case("diverging beats no-signal", with_last(steps(0.0, 0.0, 0.0), nonfinite=("loss",)), Verdict.DIVERGING),
]

IMPROVEMENT = [
    # before any eval comparison: the trend of the rewarded rate over the steps
    Case(
        "a clear rise",
        counted(*RISE),
        Verdict.IMPROVING,
        says=[
            "rose",
            "14% of completions rewarded in the first half of steps 1-8, 44% in the second",
            "37 of 128 over 8 steps",
            "Cochran-Armitage trend test, one-sided p = ",
            "below 0.01",
            "No evaluation against `before` yet",
        ],
    ),
    Case(
        "the 3-step demo, however steep its rise",
        counted(0, 8, 16),
        Verdict.SIGNAL,
        says=[
            "at step 3, 50% of prompts",
            "no evidence of improvement yet",
            "a trend test needs 6 steps with rewarded counts, there are 3",
        ],
    ),
    Case(
        "a rise at each of the last 3 looks (6, 7 and 8 counted steps)",
        counted(0, 1, 3, 6, 10, 14, 15, 16),
        Verdict.IMPROVING,
        says=["at each of the last 3 steps"],
    ),
    Case("... a rise at the latest look only is not enough", counted(0, 1, 3, 6, 10, 14), Verdict.SIGNAL, says=["below 0.01"]),
    Case("... 5 are not", counted(0, 1, 3, 6, 10), Verdict.SIGNAL, says=["needs 6 steps", "there are 5"]),
    Case(
        "steps without counts (an older trainer) do not enter the test",
        [*steps(0.5, 0.5), *counted(0, 1, 3, 6, 10)[2:]],
        Verdict.SIGNAL,
        says=["there are 3"],
    ),
    Case(
        "a level rate over 12 steps with signal",
        counted(*LEVEL),
        Verdict.FLAT,
        says=[
            "no significant rise",
            "12 of the last 12 steps had signal",
            "one-sided p = ",
            "not below 0.01",
            "rljob samples rl-000000000001",
            "grpo.learning_rate",
        ],
    ),
    Case(
        "... over 9 steps with signal: not flat yet",
        counted(*LEVEL[:9]),
        Verdict.SIGNAL,
        says=["9 of the last 9 steps had signal", "10 without a rise make the verdict flat"],
    ),
    Case(
        "10 steps, 9 of them with signal: still not flat",
        [*counted(*LEVEL[:9]), *counted(*LEVEL[:10], signal=0)[9:]],
        Verdict.SIGNAL,
        says=["step 10 had no prompt whose completions got different rewards"],
    ),
    Case("a falling rate is no rise", counted(9, 8, 8, 6, 5, 4, 4, 3, 2, 2, 1, 1), Verdict.FLAT),
    Case(
        "12 steps with signal but no counts: nothing to test, not flat",
        steps(*[0.5] * 12),
        Verdict.SIGNAL,
        says=["no rewarded-completion counts"],
    ),
    # once there is an eval comparison, it decides
    Case(
        "eval interval above 0 over 40 rows",
        counted(*LEVEL[:3]),
        Verdict.IMPROVING,
        evaluation=EVAL_UP,
        says=[
            "the after evaluation (step 20) against `before`: +20.0% correct over 40 paired rows",
            "95% CI [+5.0%, +35.0%]",
            "newcombe-paired-wilson",
            "10 rows improved, 4 regressed",
            "lies above 0",
        ],
    ),
    Case("... over exactly 30 rows", counted(*LEVEL[:3]), Verdict.IMPROVING, evaluation=evaluation(0.2, 0.05, 0.35, 30)),
    Case(
        "... over 29 rows: too few",
        counted(*LEVEL[:3]),
        Verdict.SIGNAL,
        evaluation=evaluation(0.2, 0.05, 0.35, 29),
        says=["fewer than 30 paired rows", "grpo.num_test_batches", "3 of the last 3 train steps had signal, and it takes 10"],
    ),
    Case("... over 2 rows", counted(*LEVEL[:3]), Verdict.SIGNAL, evaluation=evaluation(1.0, 0.2, 1.0, 2)),
    Case(
        "... over 2 rows with enough steps with signal",
        counted(*LEVEL),
        Verdict.FLAT,
        evaluation=evaluation(1.0, 0.2, 1.0, 2),
        says=["lies above 0, but over fewer than 30 paired rows"],
    ),
    Case("an interval touching 0 is not above it", counted(*LEVEL[:3]), Verdict.SIGNAL, evaluation=evaluation(0.1, 0.0, 0.2)),
    Case(
        "eval interval covering 0, 12 steps with signal",
        counted(*LEVEL),
        Verdict.FLAT,
        evaluation=EVAL_ZERO,
        says=[
            "no improvement shown",
            "95% CI [-8.0%, +18.0%]",
            "does not lie above 0",
            "12 of the last 12 train steps had signal",
            "rljob samples",
        ],
    ),
    Case(
        "eval interval covering 0, 3 steps with signal",
        counted(*LEVEL[:3]),
        Verdict.SIGNAL,
        evaluation=EVAL_ZERO,
        says=["does not lie above 0", "Too early to call it flat: 3 of the last 3 train steps had signal"],
    ),
    Case(
        "eval interval below 0: it fell",
        counted(*LEVEL),
        Verdict.FLAT,
        evaluation=EVAL_DOWN,
        says=[
            "the eval fell",
            "-12.0% correct over 40 paired rows",
            "[-20.0%, -3.0%] (",
            "the interval lies wholly below 0",
            "grpo.learning_rate",
        ],
    ),
    Case("the eval decides over a rising reward", counted(*RISE, 12, 13, 14, 15), Verdict.FLAT, evaluation=EVAL_ZERO),
    Case("... and over a level one", counted(*LEVEL), Verdict.IMPROVING, evaluation=EVAL_UP),
    Case(
        "an evaluation not compared with before leaves it to the trend",
        counted(*RISE),
        Verdict.IMPROVING,
        evaluation=EVAL_UP.model_copy(update={"vs_before": None}),
    ),
    # precedence: diverging > stalled > no-signal > improving > flat > signal
    Case("improving beats flat", counted(*RISE, 12, 13, 14, 15), Verdict.IMPROVING),
    Case(
        "no-signal beats improving",
        [*counted(*LEVEL[:5]), *counted(0, 0, 0, 0, 0, 0, 0, 0, signal=0)[5:]],
        Verdict.NO_SIGNAL,
        evaluation=EVAL_UP,
    ),
    Case("stalled beats improving", counted(*RISE), Verdict.STALLED, evaluation=EVAL_UP, after_last_s=301),
    Case("diverging beats improving", with_last(counted(*RISE), kl=2.0), Verdict.DIVERGING, evaluation=EVAL_UP),
]


@pytest.mark.parametrize("case", CASES + IMPROVEMENT, ids=[c.name for c in CASES + IMPROVEMENT])
def test_verdict(case: Case) -> None:
    now = (case.history[-1].time if case.history else T0) + timedelta(seconds=case.after_last_s)
    health = assess_learning(
        case.history,
        phase=case.phase,
        stage=case.stage,
        now=now,
        policy=POLICY,
        job_id="rl-000000000001",
        checkpoints_uri="/runs/rl-000000000001/rl/rl-000000000001/checkpoints/actor",
        evaluation=case.evaluation,
    )
    if case.expected is None:
        assert health is None
        return
    assert health is not None and health.verdict is case.expected, health
    assert health.step == case.history[-1].step
    for text in case.says:
        assert text in health.message, (text, health.message)


def _health(history: list[TrainStepSummary]):
    return assess_learning(history, phase=JobPhase.RUNNING, stage="train", now=history[-1].time, policy=POLICY)


def test_kl_rising_over_steps_without_signal_is_a_warning_beside_the_verdict() -> None:
    rising = [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=s, loss=0.0, kl=kl)
        for i, (s, kl) in enumerate([(0.5, 0.01), (0.0, 0.02), (0.0, 0.03), (0.0, 0.05)], start=1)
    ]
    health = _health(rising)
    assert health is not None and health.verdict is Verdict.NO_SIGNAL
    assert health.warning is not None and "rose from 0.02 to 0.05 over steps 2-4" in health.warning, health.warning
    assert "grpo.kl_estimator" in health.warning
    # Falling back toward the reference, too short a run, or a run with signal: no warning.
    assert _health(with_last(rising, kl=0.015)).warning is None  # type: ignore[union-attr]
    assert _health(rising[:3]).warning is None  # type: ignore[union-attr]
    assert _health(with_last(rising, signal_fraction=0.25)).warning is None  # type: ignore[union-attr]


def _apart(*diffs: float | None) -> list[TrainStepSummary]:
    return [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=0.5, loss=0.1, kl=0.01, logp_diff_mean=d)
        for i, d in enumerate(diffs, start=1)
    ]


def test_the_sampler_and_trainer_apart_at_several_steps_is_a_warning_that_names_it() -> None:
    health = _health(_apart(0.01, 0.08, 0.09, 0.12))
    assert health is not None and health.verdict is Verdict.SIGNAL  # the verdict stands; the warning is beside it
    assert health.warning is not None and "above 0.05 nats per token at each of steps 2-4 (up to 0.12)" in health.warning
    assert "model.compute_dtype" in health.warning
    # One step back under the threshold, too few measured steps, or steps that did not measure: no warning.
    assert _health(_apart(0.08, 0.09, 0.04, 0.12)).warning is None  # type: ignore[union-attr]
    assert _health(_apart(0.08, 0.09)).warning is None  # type: ignore[union-attr]
    assert _health(_apart(None, None, None, None)).warning is None  # type: ignore[union-attr]
    # Steps that did not measure between measured ones do not break the run.
    assert _health(_apart(0.08, None, 0.09, 0.12)).warning is not None  # type: ignore[union-attr]


def test_both_warnings_are_given_when_both_hold() -> None:
    steps_ = [
        TrainStepSummary(step=i, time=T0 + timedelta(seconds=STEP_S * i), signal_fraction=s, loss=0.0, kl=kl, logp_diff_mean=0.2)
        for i, (s, kl) in enumerate([(0.5, 0.01), (0.0, 0.02), (0.0, 0.03), (0.0, 0.05)], start=1)
    ]
    warning = _health(steps_).warning  # type: ignore[union-attr]
    assert warning is not None and "rose from 0.02 to 0.05" in warning and "disagree" in warning


def test_the_agreement_is_read_from_the_trainers_metrics_and_survives_json() -> None:
    event = TrainStep(
        job_id="rl-000000000001", seq=1, time=T0, step=3, total_steps=10, metrics={"sampler_trainer/train/logp_diff_mean": 0.012}
    )
    summary = TrainStepSummary.of_event(event)
    assert summary.logp_diff_mean == 0.012 and TrainStepSummary.from_json(summary.to_json()) == summary
    # an entry written before the field existed reads as not measured
    older = {k: v for k, v in summary.to_json().items() if k != "logp_diff_mean"}
    assert TrainStepSummary.from_json(older).logp_diff_mean is None  # type: ignore[union-attr]


def test_a_collapse_is_read_from_the_trainers_metrics_and_survives_json() -> None:
    event = TrainStep(
        job_id="rl-000000000001",
        seq=1,
        time=T0,
        step=3,
        total_steps=10,
        metrics={"completions/train/empty_fraction": 0.75, "completions/train/mean_length": 1.5},
    )
    summary = TrainStepSummary.of_event(event)
    assert (summary.empty_fraction, summary.mean_length) == (0.75, 1.5)
    assert TrainStepSummary.from_json(summary.to_json()) == summary
    odd = TrainStepSummary.from_json({**summary.to_json(), "empty_fraction": 3.0, "mean_length": "long"})
    assert odd is not None and (odd.empty_fraction, odd.mean_length) == (None, None)


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
    assert verdict_at(history, restarted + timedelta(seconds=200), train_started_at=restarted) is Verdict.SIGNAL
    assert verdict_at(history, restarted + timedelta(seconds=301), train_started_at=restarted) is Verdict.STALLED


def test_the_no_signal_window_follows_the_policy() -> None:
    history = steps(0.0, 0.0, 0.0)
    assert verdict_at(history, history[-1].time, HealthPolicy(no_signal_steps=5)) is Verdict.SIGNAL
    assert verdict_at(history[:1], history[0].time, HealthPolicy(no_signal_steps=1)) is Verdict.NO_SIGNAL


def test_the_kept_steps_are_the_first_and_the_window_ordered_and_re_reported_steps_replace_later_ones() -> None:
    kept: list[TrainStepSummary] = []
    for summary in steps(*[0.5] * (FIRST_STEPS_KEPT + HEALTH_WINDOW_STEPS + 5)):
        kept = push_step(kept, summary)
    first = list(range(1, FIRST_STEPS_KEPT + 1))
    assert [s.step for s in kept] == first + list(range(FIRST_STEPS_KEPT + 6, FIRST_STEPS_KEPT + HEALTH_WINDOW_STEPS + 6))
    assert [s.step for s in window(kept)] == list(range(FIRST_STEPS_KEPT + 6, FIRST_STEPS_KEPT + HEALTH_WINDOW_STEPS + 6))
    # A resumed trainer reports step 20 again: what came after the old step 20 is gone.
    kept = push_step(kept, TrainStepSummary(step=20, time=T0 + timedelta(hours=1), signal_fraction=0.0))
    assert [s.step for s in kept] == [*first, *range(11, 21)]
    assert kept[-1].signal_fraction == 0.0
    # ... and step 3 again: the first steps are re-reported like any other.
    kept = push_step(kept, TrainStepSummary(step=3, time=T0 + timedelta(hours=2), signal_fraction=0.0))
    assert [s.step for s in kept] == [1, 2, 3]


def test_a_rise_from_the_first_steps_still_counts_once_the_window_has_passed_it() -> None:
    """The reward rose early and then held (the learning bench's lr 3e-6 arm: 7% -> 40% on fresh prompts, and the job
    said flat): inside the window of the last 20 steps the rate is level; against the first steps it rose."""
    rewarded = [1, 1, 2, 1, 1, *[7, 6, 7, 6, 7] * 7]  # 7% for 5 steps, then about 40% for 35
    kept: list[TrainStepSummary] = []
    for summary in counted(*rewarded):
        kept = push_step(kept, summary)
    assert [s.step for s in kept][: FIRST_STEPS_KEPT + 1] == [1, 2, 3, 4, 5, 21]
    health = assess_learning(kept, phase=JobPhase.RUNNING, stage="train", now=kept[-1].time, policy=POLICY)
    assert health is not None and health.verdict is Verdict.IMPROVING, health
    assert "steps 1-5 and 21-40" in health.message and "20 of the last 20 steps" not in health.message
    # The control: the same run judged on its window alone reads flat (what it said before the first steps were kept).
    alone = assess_learning(window(kept), phase=JobPhase.RUNNING, stage="train", now=kept[-1].time, policy=POLICY)
    assert alone is not None and alone.verdict is Verdict.FLAT, alone


def test_a_summary_comes_from_the_event_and_survives_json() -> None:
    event = TrainStep(
        seq=3,
        time=T0,
        job_id="rl-000000000001",
        step=4,
        total_steps=10,
        loss=None,
        kl=0.2,
        metrics={SIGNAL_METRIC: 0.25, "actor/train/loss": 0.7},
        nonfinite=["loss"],
    )
    summary = TrainStepSummary.of_event(event)
    assert (summary.step, summary.signal_fraction, summary.kl, summary.nonfinite) == (4, 0.25, 0.2, ("loss",))
    assert summary.loss == 0.7  # the Tunix scalar when the headline value is missing
    assert read_window([summary.to_json(), {"garbage": True}]) == [summary]


def _simulated(rng: random.Random, rates: list[float], completions: int) -> list[TrainStepSummary]:
    rewarded = [sum(rng.random() < rate for _ in range(completions)) for rate in rates]
    return counted(*rewarded, of=completions)


@pytest.mark.parametrize(("rate", "completions"), [(0.3, 16), (0.1, 8), (0.5, 4)])
def test_flat_reward_reads_as_improving_no_more_often_than_the_tests_level(rate: float, completions: int) -> None:
    """1000 histories of 20 steps (the window) at a constant rate: the test's level is 1%, so
    improving must stay rare (under 3%); every other one, with its 20 steps with signal, is flat."""
    rng = random.Random(19)
    verdicts = [verdict_at(h, h[-1].time) for h in (_simulated(rng, [rate] * 20, completions) for _ in range(1000))]
    assert verdicts.count(Verdict.IMPROVING) < 30, verdicts.count(Verdict.IMPROVING)
    assert verdicts.count(Verdict.IMPROVING) + verdicts.count(Verdict.FLAT) == 1000


def test_a_steady_rise_is_found() -> None:
    """The same histories with the rate rising from 10% to 50% over the 20 steps: nearly always improving."""
    rng = random.Random(19)
    rising = [0.1 + 0.4 * i / 19 for i in range(20)]
    verdicts = [verdict_at(h, h[-1].time) for h in (_simulated(rng, rising, 16) for _ in range(200))]
    assert verdicts.count(Verdict.IMPROVING) > 190


def test_an_eval_comparison_from_real_rows_decides() -> None:
    """vs_before as the trainer computes it (Newcombe's paired interval over 40 shared rows)."""
    before = {f"q{i}": float(i < 10) for i in range(40)}  # 10 of 40 right
    better = {f"q{i}": float(i < 24) for i in range(40)}  # 24 of 40: every row right before stays right
    same = {f"q{i}": float(9 <= i < 19) for i in range(40)}  # 10 of 40, one row kept, nine lost, nine gained
    history = counted(*LEVEL)
    for after, expected in ((better, Verdict.IMPROVING), (same, Verdict.FLAT)):
        change = paired_difference(before, after)
        summary = evaluation(0, 0, 0).model_copy(update={"vs_before": change})
        health = assess_learning(history, phase=JobPhase.RUNNING, stage="train", now=history[-1].time, policy=POLICY, evaluation=summary)
        assert health is not None and health.verdict is expected, (change, health and health.message)


def test_counts_come_from_the_event_and_old_entries_still_read() -> None:
    event = TrainStep(
        seq=3,
        time=T0,
        job_id="rl-000000000001",
        step=4,
        total_steps=10,
        metrics={SIGNAL_METRIC: 0.25, COMPLETIONS_METRIC: 16.0, REWARDED_METRIC: 5.0},
    )
    summary = TrainStepSummary.of_event(event)
    assert (summary.completions, summary.rewarded_completions) == (16, 5)
    assert read_window([summary.to_json()]) == [summary]
    stored_before_the_counts = {"step": 4, "time": T0.isoformat(), "signal_fraction": 0.25, "loss": 0.5, "kl": 0.01, "nonfinite": []}
    [old] = read_window([stored_before_the_counts])
    assert (old.step, old.signal_fraction, old.completions, old.rewarded_completions) == (4, 0.25, None, None)
    odd = TrainStepSummary.from_json({**stored_before_the_counts, "completions": "many", "rewarded_completions": -1})
    assert odd is not None and (odd.completions, odd.rewarded_completions) == (None, None)


def test_the_cli_and_the_dashboard_know_every_verdict() -> None:
    verdicts = {v.value for v in Verdict}
    assert set(_HEALTH_STYLE) == verdicts
    widgets = (Path(__file__).parents[4] / "dashboard" / "src" / "widgets.js").read_text()
    table = widgets.split("export const HEALTH = {")[1].split("};")[0]
    assert set(re.findall(r'^\s*"?([a-z-]+)"?: \{', table, re.MULTILINE)) == verdicts
