"""One train step as the learning-health verdict needs it (learning_health.py), and the bounded list of them a job
record keeps (stored as JSON, so an entry another version wrote is skipped, not fatal): the run's first
FIRST_STEPS_KEPT steps and the window of its last HEALTH_WINDOW_STEPS. The first steps stay so that a rise is
judged against where the run started, not only within the window: a run whose reward rose early and then held
reads as flat inside any window of its last 20 steps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainer.contract import SIGNAL_METRIC, TrainStep
from trainer.contract.run.samples import COMPLETIONS_METRIC, REWARDED_METRIC

EMPTY_METRIC = "completions/train/empty_fraction"  # trainer/rollout/stop_token.py
MEAN_LENGTH_METRIC = "completions/train/mean_length"  # Tunix's
LOGP_DIFF_METRIC = "sampler_trainer/train/logp_diff_mean"  # trainer/maxtext_entry/logprob_agreement.py
HEALTH_WINDOW_STEPS = 20  # enough for a stable median step interval; small enough to store per job
FIRST_STEPS_KEPT = 5  # the start the trend test also compares with (learning_health.py)


@dataclass(frozen=True)
class TrainStepSummary:
    """What the verdict needs from one TrainStep; one entry of JobRecord.report.recent_train_steps."""

    step: int
    time: datetime
    signal_fraction: float | None = None  # groups with non-zero advantage / groups
    loss: float | None = None
    kl: float | None = None
    nonfinite: tuple[str, ...] = ()
    completions: int | None = None  # in the step's rollout (None: a trainer that did not count them)
    rewarded_completions: int | None = None  # ... whose total reward was > 0
    empty_fraction: float | None = None  # completions that were EOS at once (trainer/rollout/stop_token.py)
    mean_length: float | None = None  # Tunix's mean completion length, in tokens
    logp_diff_mean: float | None = None  # the rollout engine's and the trainer's log-probabilities, mean |difference|

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
            completions=_count(event.metrics.get(COMPLETIONS_METRIC)),
            rewarded_completions=_count(event.metrics.get(REWARDED_METRIC)),
            empty_fraction=_share(event.metrics.get(EMPTY_METRIC)),
            mean_length=_finite(event.metrics.get(MEAN_LENGTH_METRIC)),
            logp_diff_mean=_finite(event.metrics.get(LOGP_DIFF_METRIC)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time": self.time.isoformat(),
            "signal_fraction": self.signal_fraction,
            "loss": self.loss,
            "kl": self.kl,
            "nonfinite": list(self.nonfinite),
            "completions": self.completions,
            "rewarded_completions": self.rewarded_completions,
            "empty_fraction": self.empty_fraction,
            "mean_length": self.mean_length,
            "logp_diff_mean": self.logp_diff_mean,
        }

    @classmethod
    def from_json(cls, data: Any) -> TrainStepSummary | None:
        """None for an entry this code cannot read (written by another version): skipped, not fatal."""
        try:
            return cls(
                step=int(data["step"]),
                time=as_utc(datetime.fromisoformat(data["time"])),
                signal_fraction=data.get("signal_fraction"),
                loss=data.get("loss"),
                kl=data.get("kl"),
                nonfinite=tuple(str(n) for n in data.get("nonfinite") or ()),
                completions=_count(data.get("completions")),
                rewarded_completions=_count(data.get("rewarded_completions")),
                empty_fraction=_share(data.get("empty_fraction")),
                mean_length=_finite(data.get("mean_length")),
                logp_diff_mean=_finite(data.get("logp_diff_mean")),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def _count(value: Any) -> int | None:
    """A count from a metric (Tunix logs floats) or a stored entry; None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return round(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _share(value: Any) -> float | None:
    number = _finite(value)
    return number if number is not None and number <= 1.0 else None


def as_utc(when: datetime) -> datetime:
    """A time without a zone (an event from a trainer that wrote none) is taken as UTC, so that
    comparing it with the service's clock cannot fail."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def push_step(kept: list[TrainStepSummary], summary: TrainStepSummary) -> list[TrainStepSummary]:
    """The kept steps with `summary` appended: the first FIRST_STEPS_KEPT, then at most the last
    HEALTH_WINDOW_STEPS. Entries for this step or later go first: a resumed trainer reports the steps after its
    checkpoint again."""
    ordered = [*(entry for entry in kept if entry.step < summary.step), summary]
    return ordered[:FIRST_STEPS_KEPT] + ordered[FIRST_STEPS_KEPT:][-HEALTH_WINDOW_STEPS:]


def window(kept: Sequence[TrainStepSummary]) -> Sequence[TrainStepSummary]:
    """The last HEALTH_WINDOW_STEPS of the kept steps: what every rule but the trend's comparison with the start reads."""
    return kept[-HEALTH_WINDOW_STEPS:]


def read_window(window: list[Any]) -> list[TrainStepSummary]:
    """A stored window (JSON entries) as summaries, the entries this code cannot read left out."""
    return [s for s in (TrainStepSummary.from_json(entry) for entry in window) if s is not None]
