"""What a stage hands trainer/maxtext_entry's shims, as one typed document.

MaxText must see its own arguments only, so everything rljob's shims need (the checkpoint whose HF config MaxText's
table should hold, where samples and evaluations go, the objective train_rl cannot set, the reward sandbox's
limits, the rollout seed, ...) travels as one argument, `--rljob_shim_config=<json>`, which the entry takes off argv
before MaxText parses the rest. The stages build it (trainer/stages/), the entries read it
(trainer/maxtext_entry/train_rl_entry.py's INSTALLS say what each field turns on, in order); a field left out is a
feature not installed. It is rljob's own data: nothing in it reaches MaxText's config loader.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.run.evaluation import MAXTEXT_SCORING, EvalScoring
from trainer.contract.spec.reward_sandbox import RewardSandboxSettings

SHIM_CONFIG_FLAG = "--rljob_shim_config="


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HfConfigRegistration(_Part):
    """A checkpoint whose own config.json MaxText's model table should hold (hf_config_registry.py): the tiny model
    or a narrower Llama served under a MaxText model name whose table entry has other shapes."""

    source: str
    revision: str | None = Field(default=None, description="its hub revision; hub sources only")


class EvalRecording(_Part):
    """Where each evaluation's per-row outcomes go, and what a row's outcome is (eval_recorder.py)."""

    uri: str
    scoring: EvalScoring = MAXTEXT_SCORING


class BestCheckpointPaths(_Part):
    """With export.checkpoint=best (best_checkpoint.py): the best weights' root, their record, the actor's checkpoints."""

    best_root: str
    record_uri: str
    actor_root: str


class GrpoObjective(_Part):
    """GRPO's objective where train_rl cannot set it (grpo_objective.py): Tunix's kl_loss_mode and epsilon_high."""

    kl_loss_mode: str
    epsilon_high: float | None = None


class ShimConfig(_Part):
    hf_config: HfConfigRegistration | None = None
    samples_uri: str | None = Field(default=None, description="where train_rl's completion samples go (sample_recorder.py)")
    evaluations: EvalRecording | None = None
    best_checkpoint: BestCheckpointPaths | None = None
    objective: GrpoObjective | None = None
    checkpoint_events_root: str | None = Field(
        default=None, description="the actor's checkpoint root, whose finalized steps are reported on stdout (checkpoint_reporter.py)"
    )
    reward_sandbox: RewardSandboxSettings | None = Field(
        default=None, description="the sandbox of the job's own reward functions (reward_sandbox.py); none for MaxText's built-ins"
    )
    rollout_seed: int | None = Field(
        default=None, description="the seed each rollout's sampling key is drawn from (trainer/rollout/rollout_keys.py)"
    )

    def as_argument(self) -> str:
        return SHIM_CONFIG_FLAG + self.model_dump_json(exclude_none=True)


def pop_shim_config(argv: list[str]) -> tuple[ShimConfig, list[str]]:
    """(the shim configuration, the argv meant for MaxText in order). No such argument: nothing to install. More than
    one is refused: two documents would leave which one holds to the order of argv."""
    found = [arg for arg in argv if arg.startswith(SHIM_CONFIG_FLAG)]
    if len(found) > 1:
        raise SystemExit(f"{SHIM_CONFIG_FLAG.rstrip('=')} was given {len(found)} times; a stage passes it once")
    config = ShimConfig.model_validate_json(found[0].removeprefix(SHIM_CONFIG_FLAG)) if found else ShimConfig()
    return config, [arg for arg in argv if not arg.startswith(SHIM_CONFIG_FLAG)]
