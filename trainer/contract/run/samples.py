"""Completion samples: what the policy wrote at a training step and what each reward function paid.

The trainer keeps a bounded sample per step, taken from the very prompts and completions Tunix hands
the reward functions (not a second generation), as one JSON object per step at
`<run>/samples/train-<step:06d>.json` (RunLayout.samples_file). One object per step, never appended,
so a gs:// run directory needs no read-modify-write.

The same reading also measures the step's learning signal: GRPO's advantage of a completion is its
reward minus its group's mean, so a group (one prompt's `num_generations` completions) whose rewards
are all equal contributes nothing to the update. `groups_with_signal / groups` is logged as a Tunix
metric too, so it arrives with every TrainStep's metrics, and so are the step's completions and how
many of them got a total reward above 0: the service tests whether that rate rises over the steps.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

SAMPLES_SCHEMA_VERSION = 1
# The TensorBoard tags TrainStep.metrics carries them under (the trainer logs each with tunix_metric_name).
SIGNAL_METRIC = "rewards/train/signal_fraction"
REWARDED_METRIC = "rewards/train/rewarded_completions"  # completions whose total reward is > 0
COMPLETIONS_METRIC = "rewards/train/completions"
MAX_SAMPLES_PER_STEP = 8
MAX_TEXT_CHARS = 4000


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: int = Field(ge=0, description="which prompt of the step's batch (completions of one prompt share it)")
    prompt: str = Field(description="the prompt as the model saw it (chat template applied); its tail if long")
    completion: str
    rewards: dict[str, float | None] = Field(description="each reward function's score; null for NaN")
    total: float | None = Field(description="the sum GRPO used")
    truncated: bool = Field(default=False, description=f"prompt or completion cut to {MAX_TEXT_CHARS} characters")


class StepSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: int = SAMPLES_SCHEMA_VERSION
    step: int = Field(ge=1, description="the training step these rollouts were used for")
    time: datetime
    num_generations: int = Field(ge=1)
    groups: int = Field(ge=0, description="prompts in the step's batch")
    groups_with_signal: int = Field(ge=0, description="prompts whose completions did not all get the same reward")
    completions: int = Field(ge=0, description="completions in the step's batch (samples keeps at most a few)")
    samples: list[Sample]


def tunix_metric_name(tag: str) -> str:
    """The name to give Tunix's metrics buffer for a metric to be logged under `tag`: Tunix splits a
    name at its first '/' and logs it as `<prefix>/<mode>/<rest>` (rewards/x -> rewards/train/x)."""
    prefix, _mode, rest = tag.split("/", 2)
    return f"{prefix}/{rest}"


def samples_file_name(step: int) -> str:
    return f"train-{step:06d}.json"


def step_from_file_name(name: str) -> int | None:
    if name.startswith("train-") and name.endswith(".json") and name[6:-5].isdigit():
        return int(name[6:-5])
    return None
