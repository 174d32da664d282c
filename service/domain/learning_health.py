"""Whether a job is learning: one verdict from its recent train steps, decided by a pure function.

GRPO learns from differences: a completion's advantage is its reward minus the mean reward of its
group (the completions of one prompt). So a run can look healthy (steps advance, the loss is
finite) and learn nothing, because every completion of each prompt got the same reward. It can
also diverge (loss or KL not finite, or the policy far from the reference), or stop reporting
steps altogether. The verdict says which, and its message says what to do about it.

The job record keeps a bounded window of recent train steps (`TrainStepSummary`, stored as JSON)
so the verdict survives a service restart. `assess_learning` is evaluated on every read
(views.py) and after every write (job_service.py logs a `health` event when the verdict changes).
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from trainer.contract import SIGNAL_METRIC, TrainStep

from .phases import JobPhase

HEALTH_WINDOW_STEPS = 20  # enough for a stable median step interval; small enough to store per job
TRAIN_STAGE = "train"
# Names in TrainStep.nonfinite that mean the update itself is broken (the headline values and the
# Tunix scalars they come from); a non-finite reward or length metric alone is not divergence.
_DIVERGENCE_NAMES = {"loss": "loss", "actor/train/loss": "loss", "kl": "KL", "actor/train/kl": "KL"}


class Verdict(enum.StrEnum):
    LEARNING = "learning"
    NO_SIGNAL = "no-signal"
    STALLED = "stalled"
    DIVERGING = "diverging"


@dataclass(frozen=True)
class HealthPolicy:
    """The thresholds (service settings RLJOB_HEALTH_*; see config.py)."""

    kl_max: float = 1.0  # KL to the reference policy above this is divergence
    no_signal_steps: int = 3  # this many consecutive steps without signal make "no-signal"
    stall_floor_s: float = 300.0  # never "stalled" sooner than this after the last step
    stall_step_intervals: float = 5.0  # ... nor sooner than this many median step intervals


@dataclass(frozen=True)
class TrainStepSummary:
    """What the verdict needs from one TrainStep; one entry of JobRecord.recent_train_steps."""

    step: int
    time: datetime
    signal_fraction: float | None = None  # groups with non-zero advantage / groups
    loss: float | None = None
    kl: float | None = None
    nonfinite: tuple[str, ...] = ()

    @classmethod
    def of_event(cls, event: TrainStep) -> TrainStepSummary:
        def first(*values: float | None) -> float | None:
            return next((v for v in values if v is not None), None)

        return cls(
            step=event.step,
            time=as_utc(event.time),
            signal_fraction=event.metrics.get(SIGNAL_METRIC),
            loss=first(event.loss, event.metrics.get("actor/train/loss")),
            kl=first(event.kl, event.metrics.get("actor/train/kl")),
            nonfinite=tuple(event.nonfinite),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step, "time": self.time.isoformat(), "signal_fraction": self.signal_fraction,
            "loss": self.loss, "kl": self.kl, "nonfinite": list(self.nonfinite),
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> TrainStepSummary | None:
        """None for an entry this code cannot read (written by another version): skipped, not fatal."""
        try:
            return cls(
                step=int(data["step"]), time=as_utc(datetime.fromisoformat(data["time"])),
                signal_fraction=data.get("signal_fraction"), loss=data.get("loss"), kl=data.get("kl"),
                nonfinite=tuple(str(n) for n in data.get("nonfinite") or ()),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def as_utc(when: datetime) -> datetime:
    """A time without a zone (an event from a trainer that wrote none) is taken as UTC, so that
    comparing it with the service's clock cannot fail."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def push_step(window: list[dict[str, Any]], summary: TrainStepSummary) -> list[dict[str, Any]]:
    """The window with `summary` appended, at most HEALTH_WINDOW_STEPS long. Entries for this step
    or later go first: a resumed trainer reports the steps after its checkpoint again."""
    kept = [entry for entry in window if isinstance(entry, dict) and entry.get("step", 0) < summary.step]
    return [*kept, summary.to_json()][-HEALTH_WINDOW_STEPS:]


def read_window(window: list[dict[str, Any]]) -> list[TrainStepSummary]:
    return [s for s in (TrainStepSummary.from_json(entry) for entry in window) if s is not None]


class LearningHealth(BaseModel):
    """JobPublic.health: whether the job's training is learning, and what to do if not."""

    verdict: Verdict = Field(description="learning | no-signal | stalled | diverging")
    message: str = Field(description="what the verdict rests on and what to do next (a sentence without the verdict)")
    step: int = Field(description="the latest train step the verdict looked at")
    signal_fraction: float | None = Field(
        description="at that step: fraction of prompts whose completions got different rewards (non-zero advantage)"
    )
    last_step_at: datetime = Field(description="when the trainer reported that step")


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
) -> LearningHealth | None:
    """The verdict on `steps` (oldest first); None before the first train step.

    Precedence: diverging > stalled > no-signal > learning. Stalled is about time, so it applies
    only while the trainer should be producing steps (RUNNING, train stage); otherwise, terminal
    jobs included, the verdict rests on the steps alone.
    """
    if not steps:
        return None
    latest = steps[-1]

    def verdict(v: Verdict, message: str) -> LearningHealth:
        return LearningHealth(
            verdict=v,
            message=message,
            step=latest.step,
            signal_fraction=latest.signal_fraction,
            last_step_at=latest.time,
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

    recent = steps[-policy.no_signal_steps :]
    if len(recent) >= policy.no_signal_steps and all(s.signal_fraction == 0 for s in recent):
        return verdict(
            Verdict.NO_SIGNAL,
            f"at each of the last {len(recent)} steps every completion of each prompt got the same "
            "reward, so GRPO's advantages are zero and nothing is learned. Raise grpo.num_generations or "
            "grpo.temperature for more varied completions, or check that the reward functions pay for something "
            "the model sometimes does (give partial credit)",
        )

    if latest.signal_fraction is None:
        return verdict(Verdict.LEARNING, f"step {latest.step} has a finite loss and KL (the trainer reported no signal fraction)")
    if latest.signal_fraction == 0:
        return verdict(
            Verdict.LEARNING,
            f"step {latest.step} had no prompt whose completions got different rewards (nothing to learn from at "
            f"that step); {policy.no_signal_steps} such steps in a row make the verdict no-signal",
        )
    return verdict(
        Verdict.LEARNING,
        f"at step {latest.step}, {latest.signal_fraction:.0%} of prompts had completions with different "
        "rewards (a non-zero GRPO advantage)",
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
