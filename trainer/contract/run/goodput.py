"""Where a job's wall-clock time goes: the `goodput` progress event's body and the names of the parts.

Inside the train stage, the trainer's shim (maxtext_entry/goodput_recorder.py) times Tunix's own
methods and prints one `RLJOB_GOODPUT {TrainGoodput}` line at each step's end and when train_rl
ends; the pipeline turns it into a GoodputMeasured event. Every figure is cumulative over one train_rl
process (one attempt), so the newest event of an attempt supersedes the earlier ones. The service adds
what happens outside train_rl (queued, start-up, convert, export), splits each attempt's first step into a steady
step and its `warmup`, and calls what is left `other` (service/domain/cost/goodput.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Inside train_rl (the methods are named in maxtext_entry/goodput_recorder.py).
ROLLOUT = "rollout"  # generating completions for the training batch
LOGPROBS = "logprobs"  # the reference model's and the old policy's per-token log-probabilities
UPDATE = "update"  # the actor's optimizer steps
WEIGHT_SYNC = "weight_sync"  # copying the updated weights to the rollout engine
CHECKPOINT = "checkpoint"  # saving and restoring the actor (the blocking part of Orbax's save)
EVAL = "eval"  # MaxText's evaluations (their generation included)
TRAIN_PARTS: tuple[str, ...] = (ROLLOUT, LOGPROBS, UPDATE, WEIGHT_SYNC, CHECKPOINT, EVAL)
# Outside train_rl (from the service's phase times and the trainer's stage durations).
QUEUED = "queued"  # waiting for capacity
STARTUP = "startup"  # admitted/launched, the trainer not yet running
CONVERT = "convert"  # the convert stage
# What an attempt's first train step cost beyond a steady one (the service's split of the trainer's reports:
# compilation, model loading, first allocations); a warm compilation cache is what shrinks it (trainer/compile_cache.py).
WARMUP = "warmup"
EXPORT = "export"  # the export stage
OTHER = "other"  # the wall time no part names: process start, model load, compilation, rewards, ...
GOODPUT_PARTS: tuple[str, ...] = (QUEUED, STARTUP, CONVERT, WARMUP, *TRAIN_PARTS, EXPORT, OTHER)
# Productive: the work GRPO exists to do.
PRODUCTIVE_PARTS: tuple[str, ...] = (ROLLOUT, UPDATE)

GOODPUT_LINE_PREFIX = "RLJOB_GOODPUT "  # what the shim prints on stdout; trainer/progress/train_rl_events.py reads it


class TrainGoodput(BaseModel):
    """Seconds of one train_rl process, by part, since the shim was installed (cumulative)."""

    model_config = ConfigDict(extra="forbid")

    elapsed_s: float = Field(ge=0, description="seconds since the shim was installed (train_rl's start)")
    parts: dict[str, float] = Field(description="seconds by part: " + ", ".join(TRAIN_PARTS))
    step: int = Field(default=0, ge=0, description="Tunix's global step when measured")
    final: bool = Field(default=False, description="train_rl has returned (its last report)")


class JobGoodput(BaseModel):
    """A job's wall-clock time split into parts that add up to it."""

    wall_s: float = Field(ge=0, description="seconds from submit to the end (or to now while the job runs)")
    parts: dict[str, float] = Field(description="seconds by part, adding up to wall_s: " + ", ".join(GOODPUT_PARTS))
    productive_fraction: float | None = Field(
        description="(rollout + update) / wall_s: the share of the job's time spent on the work GRPO exists "
        "to do; null before any time has passed"
    )
