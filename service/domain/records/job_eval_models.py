"""A job's evaluations as the record's API view holds them (`JobPublic.train_evals`): each point with its 95% interval, and
the change from `before`. evals/job_eval.py makes them from the trainer's EvalSummary points.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from trainer.contract.run.evaluation import EvalScoring, PairedDifference


class EvalPoint(BaseModel):
    label: str = Field(description="before, step-N or after")
    step: int = Field(description="the policy's train step when it was evaluated (0: the base model)")
    n: int = Field(description="eval rows scored")
    accuracy: float | None = Field(description="the rows' mean outcome (see scored_by); null when n is 0")
    scored_by: EvalScoring = Field(
        description="maxtext: MaxText's score (the answer in its tags) | rewards: the share of each row's completions "
        "the job's own reward functions rewarded (total reward above 0)"
    )
    maxtext_accuracy: float | None = Field(default=None, description="with scored_by rewards: MaxText's own score, for reference")
    ci95: tuple[float, float] = Field(description="95% Wilson interval of the accuracy")
    format_accuracy: float | None
    partial_accuracy: float | None
    mean_reward: float | None = Field(description="mean total reward per completion, when reward functions ran")
    samples_per_row: int
    sampling: str = Field(description="MaxText's eval_sampling_strategy and eval_mode")


class EvalDifference(PairedDifference):
    of: str = Field(description="which evaluation is compared with `before`: after, else the newest step-N")


class JobEval(BaseModel):
    """JobPublic.train_evals: the job's evaluations on its eval rows, with their uncertainty."""

    status: Literal["available", "none"]
    reason: str | None = Field(description="why there is no evaluation (yet); null when there is one")
    points: list[EvalPoint] = Field(description="oldest first: before, step-N..., after")
    before: EvalPoint | None
    after: EvalPoint | None
    difference: EvalDifference | None = Field(
        description="accuracy of `of` minus `before`, paired over the rows both scored, with its 95% interval"
    )
