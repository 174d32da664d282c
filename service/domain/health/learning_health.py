"""Whether a job is learning: one verdict from its recent train steps (and its latest evaluation),
decided by a pure function that claims only what the numbers show.

GRPO learns from differences: a completion's advantage is its reward minus the mean reward of its
group (the completions of one prompt). So a run can look healthy (steps advance, the loss is
finite) and learn nothing, because every completion of each prompt got the same reward. It can
also diverge (loss or KL not finite, or the policy far from the reference), or stop reporting
steps altogether. And a run with signal has not yet shown that it improves: that takes an
evaluation against the base model whose paired 95% interval lies above 0, or, before there is one,
a significant rise of the rewarded rate over the steps (reward_trend.py). The verdict says which,
and its message says what it rests on and what to do about it.

The job record keeps the run's first train steps and a bounded window of its recent ones
(`TrainStepSummary`, stored as JSON: train_step_summary.push_step) so the verdict survives a service restart.
The rules read the window; the trend test and the collapse's length rule also compare with the first steps.
`assess_learning` is evaluated on every read (views.py) and after every write (job_service.py logs a `health`
event when the verdict changes).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.domain.records.health_models import LearningHealth, Verdict
from service.domain.records.phases import JobPhase
from service.domain.records.train_step_summary import TrainStepSummary, window
from trainer.contract.run.evaluation import BEFORE, EvalSummary, PairedDifference

from .completion_collapse import collapse, kl_rise_without_signal
from .reward_trend import StepCount, TrendTest, cochran_armitage
from .sampler_agreement import agreement_drift

TRAIN_STAGE = "train"
# Names in TrainStep.nonfinite that mean the update itself is broken (the headline values and the
# Tunix scalars they come from); a non-finite reward or length metric alone is not divergence.
_DIVERGENCE_NAMES = {"loss": "loss", "actor/train/loss": "loss", "kl": "KL", "actor/train/kl": "KL"}


@dataclass(frozen=True)
class HealthPolicy:
    """The thresholds. The first four are service settings (RLJOB_HEALTH_*, config.py); the
    improvement thresholds below them keep these defaults."""

    kl_max: float = 1.0  # KL to the reference policy above this is divergence
    no_signal_steps: int = 3  # this many consecutive steps without signal make "no-signal"
    stall_floor_s: float = 300.0  # never "stalled" sooner than this after the last step
    stall_step_intervals: float = 5.0  # ... nor sooner than this many median step intervals
    # An eval comparison shows improvement only over this many paired rows: fewer give an interval
    # too wide, and an approximation too rough, to rely on.
    eval_min_pairs: int = 30
    # The trend test (no eval comparison yet) needs this many steps with rewarded counts, and a
    # one-sided p below trend_p_max at each of the last trend_looks looks (the kept steps, then without the
    # newest step, and so on). One look's level holds per look, but the verdict is re-judged after every
    # step, so errors add up over a run. bench/learning/verdict_error_rates.py measures it through this function
    # (bench/results/verdict_error_rates.json): at a constant rate, one look read `improving` at some step
    # of 50 in about 10-12% of runs, three looks in about 4-5% (5-7% of 100), while a 10% -> 50% rise over
    # 30 steps is still found by step 30 in 99.8%. Keeping the first steps beside the window lowered those
    # errors (three looks over 100 steps: 16-18% when only the window was tested) and found more small
    # rises (20% -> 35%: 38% instead of 29%): a sliding window re-tests fresh noise, the first steps anchor
    # it. So the trend is a screen, and an eval comparison, once there, decides.
    trend_min_steps: int = 6
    trend_p_max: float = 0.01
    trend_looks: int = 3
    # Steps with signal (in the window) after which "no evidence of improvement" means flat, not early.
    flat_signal_steps: int = 10
    # Collapsed: at each of the last collapse_steps steps, this share of completions empty, or the mean length at
    # most this fraction of the run's first reported one (kept with the window).
    collapse_steps: int = 3
    collapse_empty_fraction: float = 0.5
    collapse_length_fraction: float = 0.1
    # A warning (beside any verdict) when the sampler's and the trainer's log-probabilities differ by more than this
    # (mean nats per sampled token) at each of the last agreement_steps steps that measured it (sampler_agreement.py).
    agreement_logp_diff_max: float = 0.05
    agreement_steps: int = 3


def assess_learning(
    steps: Sequence[TrainStepSummary],
    *,
    phase: JobPhase,
    stage: str | None,
    now: datetime,
    policy: HealthPolicy = HealthPolicy(),
    train_started_at: datetime | None = None,
    job_id: str = "JOB",
    checkpoints_uri: str | None = None,
    evaluation: EvalSummary | None = None,
) -> LearningHealth | None:
    """The verdict on `steps` (oldest first: the kept steps, train_step_summary.push_step) and `evaluation` (the
    latest one compared with `before`, if any); None before the first train step.

    Precedence: diverging > stalled > collapsed > no-signal > improving > flat > signal. Stalled is about time,
    so it applies only while the trainer should be producing steps (RUNNING, train stage);
    otherwise, terminal jobs included, the verdict rests on the steps alone. Among the last three,
    an evaluation comparison, once there is one, decides instead of the reward trend.
    """
    if not steps:
        return None
    kept, steps = steps, window(steps)
    latest = steps[-1]

    def verdict(v: Verdict, message: str) -> LearningHealth:
        return LearningHealth(
            verdict=v,
            message=message,
            step=latest.step,
            signal_fraction=latest.signal_fraction,
            last_step_at=latest.time,
            warning=_warnings(steps, policy),
        )

    broken = _divergence(latest, policy)
    if broken is not None:
        first_bad = latest.step
        for s in reversed(steps[:-1]):
            if _divergence(s, policy) is None:
                break
            first_bad = s.step
        where = checkpoints_uri or "the run directory"
        return verdict(
            Verdict.DIVERGING,
            f"{broken}. Lower grpo.learning_rate (and raise grpo.beta to keep the policy near the "
            f"reference model) and submit again; the checkpoints saved before step {first_bad} are in {where}",
        )

    deadline = stall_deadline(steps, phase=phase, stage=stage, policy=policy, train_started_at=train_started_at)
    if deadline is not None and now > deadline:
        waited_s = (now - _last_progress(latest, train_started_at)).total_seconds()
        interval_s = median_step_interval_s(steps)
        pace = f"; steps came every {_duration(interval_s)} before" if interval_s else ""
        return verdict(
            Verdict.STALLED,
            f"no train step for {_duration(waited_s)} (the last was step {latest.step}{pace}). "
            f"The trainer may be hung or starved of accelerators: check `rljob logs {job_id}`",
        )

    collapsed = collapse(
        kept, last=policy.collapse_steps, empty_share=policy.collapse_empty_fraction, length_share=policy.collapse_length_fraction
    )
    if collapsed is not None:
        where = checkpoints_uri or "the run directory"
        return verdict(
            Verdict.COLLAPSED,
            f"the policy stopped writing: {collapsed}. Every completion of a prompt then gets the same reward, so "
            f"nothing is learned and more sampling will not help. Resubmit from a checkpoint before the collapse (in "
            f"{where}) with a lower grpo.learning_rate or a higher grpo.beta, and check that no reward pays for "
            f"short answers (`rljob samples {job_id}`)",
        )

    recent = steps[-policy.no_signal_steps :]
    if len(recent) >= policy.no_signal_steps and all(s.signal_fraction == 0 for s in recent):
        return verdict(
            Verdict.NO_SIGNAL,
            f"at each of the last {len(recent)} steps every completion of each prompt got the same "
            "reward, so GRPO's advantages are zero and nothing is learned. Raise grpo.num_generations or "
            "grpo.temperature for more varied completions, or check that the reward functions pay for something "
            "the model sometimes does (give partial credit)",
        )

    comparison = evaluation.vs_before if evaluation is not None else None
    if evaluation is not None and comparison is not None:
        return verdict(*_judge_by_eval(steps, evaluation, comparison, policy, job_id))
    return verdict(*_judge_by_trend(kept, steps, policy, job_id))


def _warnings(steps: Sequence[TrainStepSummary], policy: HealthPolicy) -> str | None:
    found = [
        kl_rise_without_signal(steps),
        agreement_drift(steps, limit=policy.agreement_logp_diff_max, last=policy.agreement_steps),
    ]
    return "; ".join(w for w in found if w) or None


def _judge_by_eval(
    steps: Sequence[TrainStepSummary], evaluation: EvalSummary, d: PairedDifference, policy: HealthPolicy, job_id: str
) -> tuple[Verdict, str]:
    low, high = d.ci95
    measured = (
        f"the {evaluation.label} evaluation (step {evaluation.step}) against `{BEFORE}`: {d.difference:+.1%} correct "
        f"over {d.n} paired rows, 95% CI [{low:+.1%}, {high:+.1%}] ({d.method}; {d.improved} rows improved, "
        f"{d.regressed} regressed)"
    )
    with_signal = _signal_steps(steps)
    signal_text = f"{with_signal} of the last {len(steps)} train steps had signal"
    if low > 0 and d.n >= policy.eval_min_pairs:
        return Verdict.IMPROVING, f"{measured}: the interval lies above 0, so the policy gets more eval rows right"
    if low > 0:
        shown = (
            f"the interval lies above 0, but over fewer than {policy.eval_min_pairs} paired rows, too few to "
            "rely on (raise grpo.num_test_batches for more eval rows)"
        )
    else:
        shown = "the interval does not lie above 0"
    if with_signal < policy.flat_signal_steps:
        return Verdict.SIGNAL, (
            f"{_signal_now(steps[-1], policy)}; {measured}: {shown}. Too early to call it flat: {signal_text}, "
            f"and it takes {policy.flat_signal_steps}"
        )
    if high < 0:
        return Verdict.FLAT, (
            f"the eval fell: {measured}: the interval lies wholly below 0, while {signal_text}. Check what the "
            f"rewards pay for (`rljob samples {job_id}`) against what the eval scores, or lower grpo.learning_rate"
        )
    return Verdict.FLAT, (
        f"no improvement shown: {measured}: {shown}, while {signal_text}. Check what the rewards pay for "
        f"(`rljob samples {job_id}`); more steps or a higher grpo.learning_rate may help"
    )


def _judge_by_trend(
    kept: Sequence[TrainStepSummary], steps: Sequence[TrainStepSummary], policy: HealthPolicy, job_id: str
) -> tuple[Verdict, str]:
    """The trend over every kept step (the first ones and the window): a rise from the run's start counts even
    once the window holds only steps after it."""
    counts = [
        StepCount(s.step, s.rewarded_completions, s.completions)
        for s in kept
        if s.completions is not None and s.rewarded_completions is not None
    ]
    trend = cochran_armitage(counts)
    with_signal = _signal_steps(steps)
    early = f"{_signal_now(steps[-1], policy)}; no evidence of improvement yet"
    if trend is None:
        return Verdict.SIGNAL, (
            f"{early}: the trainer reported no rewarded-completion counts to test a trend on, and there is no "
            f"evaluation against `{BEFORE}` (grpo.num_test_batches > 0 runs one)"
        )
    if trend.steps < policy.trend_min_steps:
        return Verdict.SIGNAL, (
            f"{early}: a trend test needs {policy.trend_min_steps} steps with rewarded counts, there "
            f"{'is' if trend.steps == 1 else 'are'} {trend.steps}"
        )
    tested = _trend_text(trend, counts, policy)
    if _rise_at_each_look(counts, policy):
        return Verdict.IMPROVING, (
            f"the rate of rewarded completions rose: {tested}, at each of the last {policy.trend_looks} steps. No "
            f"evaluation against `{BEFORE}` yet: one would show whether held-out rows improve too, not only the reward"
        )
    if with_signal >= policy.flat_signal_steps:
        return Verdict.FLAT, (
            f"no significant rise in the rate of rewarded completions, though {with_signal} of the last "
            f"{len(steps)} steps had signal: {tested}. Check what the rewards pay for (`rljob samples {job_id}`); "
            "more steps or a higher grpo.learning_rate may help"
        )
    return Verdict.SIGNAL, (
        f"{early}: {tested}; {with_signal} of the last {len(steps)} steps had signal, and "
        f"{policy.flat_signal_steps} without a rise make the verdict flat"
    )


def _rise_at_each_look(counts: list[StepCount], policy: HealthPolicy) -> bool:
    """The trend test passes on the window as it stood at each of the last trend_looks steps."""
    for dropped in range(max(1, policy.trend_looks)):
        trend = cochran_armitage(counts[: len(counts) - dropped])
        if trend is None or trend.steps < policy.trend_min_steps or not trend.p_rise < policy.trend_p_max:
            return False
    return True


def _trend_text(trend: TrendTest, counts: Sequence[StepCount], policy: HealthPolicy) -> str:
    verdict = "below" if trend.p_rise < policy.trend_p_max else "not below"
    return (
        f"{trend.first_rate:.0%} of completions rewarded in the first half of steps {_step_ranges(counts)}, "
        f"{trend.last_rate:.0%} in the second ({trend.rewarded} of {trend.completions} over "
        f"{trend.steps} steps); Cochran-Armitage trend test, one-sided p = {trend.p_rise:.2g}, {verdict} "
        f"{policy.trend_p_max:g}"
    )


def _step_ranges(counts: Sequence[StepCount]) -> str:
    """The steps as ranges: "1-5 and 21-40" for the first steps kept and the window after a gap, "3-12" without one."""
    ranges: list[list[int]] = []
    for step in sorted(c.step for c in counts if c.completions > 0):
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return " and ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)


def _signal_steps(steps: Sequence[TrainStepSummary]) -> int:
    return sum(1 for s in steps if s.signal_fraction is not None and s.signal_fraction > 0)


def _signal_now(latest: TrainStepSummary, policy: HealthPolicy) -> str:
    """What the latest step says about GRPO's advantages (the start of a `signal` message)."""
    if latest.signal_fraction is None:
        return f"step {latest.step} has a finite loss and KL (the trainer reported no signal fraction)"
    if latest.signal_fraction == 0:
        return (
            f"step {latest.step} had no prompt whose completions got different rewards (nothing to learn from at "
            f"that step; {policy.no_signal_steps} such steps in a row make the verdict no-signal)"
        )
    return (
        f"at step {latest.step}, {latest.signal_fraction:.0%} of prompts had completions with different rewards (a non-zero GRPO advantage)"
    )


def stall_deadline(
    steps: Sequence[TrainStepSummary],
    *,
    phase: JobPhase,
    stage: str | None,
    policy: HealthPolicy,
    train_started_at: datetime | None = None,
) -> datetime | None:
    """The moment after which these steps are "stalled"; None when time cannot stall the job (no
    step yet, or not training). Time changes a verdict only there, so a caller that re-judges a job
    once the clock passes it, and again whenever the job's steps change, misses no verdict."""
    if not steps or phase is not JobPhase.RUNNING or stage != TRAIN_STAGE:
        return None
    interval_s = median_step_interval_s(steps)
    limit_s = max(policy.stall_floor_s, policy.stall_step_intervals * (interval_s or 0.0))
    return _last_progress(steps[-1], train_started_at) + timedelta(seconds=limit_s)


def _last_progress(latest: TrainStepSummary, train_started_at: datetime | None) -> datetime:
    """What a stall is counted from: the last step, or a later (re)start of training."""
    return max(latest.time, train_started_at) if train_started_at else latest.time


def _divergence(step: TrainStepSummary, policy: HealthPolicy) -> str | None:
    """Why this step counts as diverging, or None."""
    bad = sorted({_DIVERGENCE_NAMES[n] for n in step.nonfinite if n in _DIVERGENCE_NAMES}, key=len)
    if bad:
        return f"the {' and the '.join(bad)} {'are' if len(bad) > 1 else 'is'} NaN or infinite at step {step.step}"
    if step.kl is not None and step.kl > policy.kl_max:
        return f"the KL to the reference policy is {step.kl:.3g} at step {step.step}, above {policy.kl_max:g}"
    return None


def median_step_interval_s(steps: Sequence[TrainStepSummary]) -> float | None:
    gaps = [(b.time - a.time).total_seconds() for a, b in zip(steps, steps[1:], strict=False) if b.step > a.step]
    gaps = [g for g in gaps if g > 0]
    return statistics.median(gaps) if gaps else None


def _duration(seconds: float) -> str:
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
