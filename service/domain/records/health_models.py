"""A job's learning verdict as the record's API view holds it (`JobPublic.health`); health/learning_health.py decides it."""

from __future__ import annotations

import enum
from datetime import datetime

from pydantic import BaseModel, Field


class Verdict(enum.StrEnum):
    IMPROVING = "improving"  # evidence that the policy gets better: an eval comparison or the reward trend
    FLAT = "flat"  # enough steps with signal, and no such evidence
    SIGNAL = "signal"  # advantages are non-zero, but too early to tell
    NO_SIGNAL = "no-signal"
    COLLAPSED = "collapsed"  # completions empty or a fraction of their length (completion_collapse.py)
    STALLED = "stalled"
    DIVERGING = "diverging"


class LearningHealth(BaseModel):
    """JobPublic.health: whether the job's training is learning, and what to do if not."""

    verdict: Verdict = Field(
        description="improving: the latest evaluation's paired change from `before` has a 95% interval above 0 "
        "(enough rows), or, before any evaluation, the rate of rewarded completions rises significantly "
        "(Cochran-Armitage trend test) | flat: many steps with signal and no such evidence | signal: GRPO "
        "advantages are non-zero but there is no evidence of improvement yet | no-signal: every completion of "
        "each prompt got the same reward for several steps | collapsed: completions empty, or a fraction of their "
        "first length, for several steps | stalled: no train step for too long | diverging: "
        "loss or KL not finite, or KL too high"
    )
    message: str = Field(description="what the verdict rests on and what to do next (a sentence without the verdict)")
    step: int = Field(description="the latest train step the verdict looked at")
    signal_fraction: float | None = Field(
        description="at that step: fraction of prompts whose completions got different rewards (non-zero advantage)"
    )
    last_step_at: datetime = Field(description="when the trainer reported that step")
    warning: str | None = Field(
        default=None,
        description="what the steps show beside the verdict, each named: the KL to the reference rising over steps that had "
        "no reward signal; the rollout engine's and the trainer's log-probabilities of the sampled tokens apart by more "
        "than the threshold at several steps in a row",
    )
