"""The best checkpoint by evaluation: which weights a job with `export.checkpoint: best` exports, and why.

Tunix saves the actor with Orbax and passes no metrics to `save()` (tunix/sft/checkpoint_manager.py), so
Orbax's own `best_fn` never sees an evaluation; and the actor's retention (`keep_last_checkpoints`) deletes
old steps whatever they scored. So the trainer keeps the best weights itself: inside train_rl, each
intermediate evaluation and the final one are offered to a keeper (trainer/maxtext_entry/best_checkpoint.py);
a strictly better accuracy saves those weights' parameters with Tunix's own CheckpointManager under
`rl/<job>/checkpoints/best/<step>/model_params` (the actor's layout, so to_huggingface reads it unchanged) and
then rewrites `<run>/best-checkpoint.json`. The evaluation before training is not a candidate: it measures
the starting model, not a checkpoint of this job. Ties keep the earlier weights, fewer updates from the
starting model, as early stopping does.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.run.evaluation import BEFORE, EvalSummary, wilson_interval

BEST_RECORD_FILE = "best-checkpoint.json"


class BestCheckpoint(BaseModel):
    """The best evaluation so far and where its weights' parameters are."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, description="the actor train step whose weights were evaluated")
    label: str = Field(description="the evaluation: step-N (N batches done) or after")
    n: int = Field(gt=0, description="rows evaluated")
    correct: float = Field(ge=0)
    accuracy: float = Field(ge=0, le=1)
    ci95: tuple[float, float] = Field(description="Wilson 95% interval of the accuracy")
    params: str = Field(description="URI of the weights' model_params (Tunix's checkpoint layout)")


def candidate_accuracy(summary: EvalSummary) -> float | None:
    """The accuracy an evaluation competes with, or None when it cannot compete (before training, no rows)."""
    if summary.label == BEFORE or summary.n <= 0:
        return None
    return min(max(summary.correct / summary.n, 0.0), 1.0)


def beats(summary: EvalSummary, best: BestCheckpoint | None) -> bool:
    accuracy = candidate_accuracy(summary)
    return accuracy is not None and (best is None or accuracy > best.accuracy)


def record_for(summary: EvalSummary, step: int, params: str) -> BestCheckpoint:
    accuracy = candidate_accuracy(summary)
    if accuracy is None:
        raise ValueError(f"the {summary.label} evaluation is not a candidate for the best checkpoint")
    return BestCheckpoint(
        step=step,
        label=summary.label,
        n=summary.n,
        correct=summary.correct,
        accuracy=accuracy,
        ci95=wilson_interval(summary.correct, summary.n),
        params=params,
    )


class ExportedCheckpoint(BaseModel):
    """What the export stage exported, for its outputs and manifest.json."""

    model_config = ConfigDict(extra="forbid")

    asked: Literal["last", "best"]
    exported: Literal["last", "best"]
    step: int = Field(ge=0)
    params: str
    best: BestCheckpoint | None = Field(default=None, description="the evaluation that chose it (exported: best)")
    reason: str | None = Field(default=None, description="why the last was exported when the best was asked for")
