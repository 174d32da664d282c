"""The shape of one evaluation attached to a training job, as its view shows it (JobPublic.attached_evals).

Only a shape (no job records), so models.py and run_report.py can name it; attached_evals.py builds it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.run.eval_report import Comparison, FunctionScores

from .phases import JobPhase


class AttachedEvalPublic(BaseModel):
    """An eval job the service made for a checkpoint of this job (JobSpec.eval), and what it found."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    label: str = Field(description="base, step-N or export: which weights of this job it evaluates")
    step: int | None = Field(default=None, description="the actor checkpoint's train step (step-N only)")
    eval_id: str | None = Field(default=None, description="the eval job (GET /v1/jobs/{eval_id}); null when it could not be submitted")
    phase: JobPhase | None = Field(default=None, description="the eval job's phase")
    suite_version: int | None = Field(default=None, description="the service's version of the suite content it ran")
    function: str | None = Field(default=None, description="the reward function shown: the suite's primary one")
    scores: FunctionScores | None = Field(default=None, description="pass@1, sampled, pass@k and maj@k with 95% intervals, once reported")
    vs_base: Comparison | None = Field(
        default=None,
        description="this eval minus the base model's, paired by row (bootstrap 95% CI, exact McNemar p), once both have SUCCEEDED",
    )
    note: str | None = Field(default=None, description="why there is no eval job or no comparison, when there is none")
