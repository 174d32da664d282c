"""The spec's `grpo` section: the GRPO/GSPO settings rl.yml exposes and the reward functions' weights and sandbox."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trainer.contract.spec import reward_sandbox as sandbox
from trainer.contract.spec import rl_settings as rl
from trainer.contract.spec import values as limits
from trainer.contract.spec.async_rollout import ASYNC_ROLLOUT_DESCRIPTION, AsyncRollout
from trainer.contract.spec.base import _check_file, _Strict, stored_spec
from trainer.contract.spec.kl_direction import KL_DIRECTION_DESCRIPTION, KlDirection, kl_direction_problem
from trainer.contract.spec.reward_sandbox import RewardErrorPolicy
from trainer.contract.spec.values import Location, PythonName


def _weight(default: float, description: str) -> float:
    bound = limits.MAX_REWARD_WEIGHT
    return Field(default=default, ge=-bound, le=bound, description=description)


class RewardSpec(_Strict):
    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {
            "exact_answer",
            "white_space_format_match",
            "exact_format_match",
            "partial_format_match",
            "penalty_incorrect_format",
            "penalty_incorrect_answer",
            "functions_path",
            "functions",
        }
    )  # spec_hash.py
    exact_answer: float = _weight(1.0, "MaxText's reward_exact_answer: for the exact answer")
    white_space_format_match: float = _weight(1.0, "MaxText's reward_white_space_format_match")
    exact_format_match: float = _weight(0.1, "MaxText's reward_exact_format_match")
    partial_format_match: float = _weight(0.0, "MaxText's reward_partial_format_match")
    penalty_incorrect_format: float = _weight(0.0, "MaxText's penalty_incorrect_format")
    penalty_incorrect_answer: float = _weight(0.0, "MaxText's penalty_incorrect_answer")
    functions_path: Location | None = Field(
        default=None, description="Python file with reward functions fn(prompts, completions, tmvp_config, **kw)"
    )
    functions: list[PythonName] = Field(
        default_factory=list, max_length=limits.MAX_LIST_ITEMS, description="names to import from functions_path"
    )
    # The sandbox the functions run in (trainer/rewards_sandbox/): worker processes with an empty environment, no network
    # where Linux allows, and these limits. Left out of the spec's hash at their defaults (canonical_json).
    on_error: RewardErrorPolicy = Field(
        default="zero",
        description="a call of your reward function that raises, passes timeout_s or crashes its worker: zero scores its "
        "completions 0 and training goes on (counted in the job's reward_errors and reward_timeouts); fail stops the train "
        "stage with the function's name and error",
    )
    timeout_s: float = Field(
        default=sandbox.DEFAULT_TIMEOUT_S,
        gt=0,
        le=sandbox.MAX_TIMEOUT_S,
        description="seconds one call of a reward function may take (all of a batch's completions); past it the worker is "
        "killed and replaced",
    )
    memory_mib: int = Field(
        default=sandbox.DEFAULT_MEMORY_MIB,
        ge=sandbox.MIN_MEMORY_MIB,
        le=sandbox.MAX_MEMORY_MIB,
        description="address space of a reward worker, in MiB (RLIMIT_AS); an allocation beyond it fails, and the call scores per on_error",
    )

    @field_validator("functions_path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return None if v is None else _check_file(v, ".py")

    @model_validator(mode="after")
    def _both_or_neither(self) -> RewardSpec:
        if bool(self.functions_path) != bool(self.functions):
            raise ValueError("functions_path and functions must be given together")
        changed = [key for key, default in REWARD_SANDBOX_DEFAULTS.items() if getattr(self, key) != default]
        if changed and not self.functions_path:
            raise ValueError(
                f"{', '.join(changed)} apply to your own reward functions: set functions_path and functions, or leave them out"
            )
        return self


# grpo.rewards fields added with the sandbox, at their defaults: left out of the spec's hash, so older specs keep theirs.
REWARD_SANDBOX_DEFAULTS = {"on_error": "zero", "timeout_s": sandbox.DEFAULT_TIMEOUT_S, "memory_mib": sandbox.DEFAULT_MEMORY_MIB}


# Tunix's other aggregations (Dr. GRPO's sequence-mean-token-scale among them): MaxText's config refuses them (issue 66).
TUNIX_ONLY_LOSS_AGG_MODES = ("sequence-mean-token-scale", "seq-mean-token-sum", "sequence-mean-token-sum-norm")


class GrpoSpec(_Strict):
    """The GRPO/GSPO settings rl.yml exposes; defaults are the tutorial's. Upper bounds: spec_values.py."""

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {
            "num_batches",
            "num_test_batches",
            "batch_size",
            "num_generations",
            "num_iterations",
            "beta",
            "epsilon",
            "epsilon_high",
            "loss_algo",
            "kl_estimator",
            "kl_direction",
            "loss_agg_mode",
            "learning_rate",
            "warmup_steps_fraction",
            "max_prefill_predict_length",
            "max_target_length",
            "kv_cache_buffer",
            "temperature",
            "top_k",
            "top_p",
            "checkpoint_period",
            "keep_last_checkpoints",
            "eval_interval",
            "eval_sampling_strategy",
            "num_eval_passes",
            "rewards",
        }
    )  # spec_hash.py

    num_batches: int = Field(default=50, gt=0, le=limits.MAX_NUM_BATCHES, description="batches of prompts to train on")
    num_test_batches: int = Field(
        default=10, ge=0, le=limits.MAX_NUM_TEST_BATCHES, description="batches of eval rows per evaluation; 0: no evaluation"
    )
    batch_size: int = Field(default=1, gt=0, le=limits.MAX_BATCH_SIZE, description="prompts per batch")
    num_generations: int = Field(default=2, ge=2, le=limits.MAX_NUM_GENERATIONS, description="G: completions per prompt; GRPO needs >= 2")
    num_iterations: int = Field(
        default=1, gt=0, le=limits.MAX_NUM_ITERATIONS, description="policy updates per batch (MaxText's rl.num_iterations)"
    )
    beta: float = Field(default=0.08, ge=0, le=limits.MAX_BETA, description="KL penalty to the reference model; 0: no reference")
    epsilon: float = Field(default=0.2, gt=0, lt=1, description="clipping range of the policy ratio (rl.grpo_epsilon)")
    epsilon_high: float | None = Field(
        default=None, gt=0, lt=1, description="upper clipping range of the policy ratio (DAPO's clip-higher); null: epsilon"
    )
    loss_algo: Literal["grpo", "gspo-token"] = Field(default="grpo", description="MaxText's rl.loss_algo")
    # Tunix's kl_loss_mode kl / mse_kl / low_var_kl; train_rl cannot set it (trainer/maxtext_entry/grpo_objective.py).
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        default="k3",
        description="per-token estimate of the KL penalty to the reference: k1 log(p/p_ref), k2 0.5*log(p/p_ref)^2, "
        "k3 p_ref/p - 1 - log(p_ref/p) (the GRPO paper's); k1's gradient never pulls the policy back on-policy",
    )
    # Issue 53 section 3 (kl_direction.py). Left out of the spec's dump, so of its hash, while null: older specs keep theirs.
    kl_direction: KlDirection | None = Field(default=None, exclude_if=lambda v: v is None, description=KL_DIRECTION_DESCRIPTION)
    loss_agg_mode: Literal[
        "token-mean", "sequence-mean-token-mean", "sequence-mean-token-scale", "seq-mean-token-sum", "sequence-mean-token-sum-norm"
    ] = Field(
        default="sequence-mean-token-mean",
        description="how per-token losses become the batch's: sequence-mean-token-mean, the mean over completions of "
        "each one's token mean (TRL's loss_type grpo); token-mean, over all the batch's tokens (TRL's bnpo). Tunix's "
        "other three are refused: MaxText 0.2.5's train_rl does not accept them",
    )
    learning_rate: float = Field(default=3e-6, gt=0, lt=1, description="the optimizer's peak learning rate")
    warmup_steps_fraction: float = Field(default=0.1, ge=0, le=1, description="fraction of the schedule spent warming up")
    max_prefill_predict_length: int = Field(default=256, gt=0, le=limits.MAX_SEQUENCE_LENGTH, description="longest prompt, in tokens")
    max_target_length: int = Field(
        default=1024, gt=0, le=limits.MAX_SEQUENCE_LENGTH, description="longest prompt and completion together, in tokens"
    )
    kv_cache_buffer: int = Field(
        default=256, gt=0, le=limits.MAX_SEQUENCE_LENGTH, description="rollout KV-cache slots beyond max_target_length"
    )
    temperature: float = Field(default=0.9, gt=0, le=limits.MAX_TEMPERATURE, description="rollout sampling temperature")
    top_k: int = Field(default=50, gt=0, le=limits.MAX_TOP_K, description="rollout sampling: the k most likely tokens")
    top_p: float = Field(default=1.0, gt=0, le=1, description="rollout sampling: nucleus probability")
    # In train steps; no period beyond the longest run (num_batches * num_iterations) is ever reached.
    checkpoint_period: int = Field(
        default=50, gt=0, le=limits.MAX_NUM_BATCHES * limits.MAX_NUM_ITERATIONS, description="train steps between actor checkpoints"
    )
    # Orbax's own retention (train_rl: CheckpointManagerOptions(max_to_keep=max_num_checkpoints_to_keep)),
    # deleting old steps only after the new one is finalized. No "best by eval": Orbax's best_fn needs the
    # metrics passed to save(), and Tunix's CheckpointManager.save (tunix/sft/checkpoint_manager.py) passes none.
    keep_last_checkpoints: int = Field(
        default=1,
        gt=0,
        le=limits.MAX_NUM_BATCHES * limits.MAX_NUM_ITERATIONS,
        description="actor checkpoints kept, newest (MaxText's max_num_checkpoints_to_keep)",
    )
    # rl.yml's own default; MaxText's hook (post_train/rl/hooks.py) evaluates when rl_cluster.global_steps,
    # the batches done, is a multiple of it.
    eval_interval: int = Field(
        default=10,
        ge=0,
        le=limits.MAX_NUM_BATCHES,
        description="batches between intermediate evaluations (MaxText's eval_interval); 0: only before and after",
    )
    eval_sampling_strategy: Literal["greedy", "standard", "liberal"] = Field(
        default="greedy", description="how evaluation samples (MaxText's eval_sampling_strategy)"
    )
    num_eval_passes: int = Field(default=1, gt=0, le=limits.MAX_EVAL_PASSES, description="passes over the eval rows per evaluation")
    # rl.yml settings of issue 39 (rl_settings.py); at their defaults, out of the spec's hash.
    eval_mode: rl.EvalMode = Field(default="pass", description=rl.EVAL_MODE_DESCRIPTION)
    eval_batch_size: int | None = Field(default=None, gt=0, le=limits.MAX_BATCH_SIZE, description=rl.EVAL_BATCH_DESCRIPTION)
    max_seq_token_per_tpu: int = Field(default=0, ge=0, le=limits.INT32_MAX, description=rl.PACKING_DESCRIPTION)
    gradient_clipping_threshold: float = Field(
        default=rl.OPTIMIZER_DEFAULTS["gradient_clipping_threshold"],
        ge=0,
        le=rl.MAX_GRADIENT_CLIPPING,
        description=rl.OPTIMIZER_DESCRIPTIONS["gradient_clipping_threshold"],
    )
    adam_b1: float = Field(default=rl.OPTIMIZER_DEFAULTS["adam_b1"], ge=0, lt=1, description=rl.OPTIMIZER_DESCRIPTIONS["adam_b1"])
    adam_b2: float = Field(default=rl.OPTIMIZER_DEFAULTS["adam_b2"], ge=0, lt=1, description=rl.OPTIMIZER_DESCRIPTIONS["adam_b2"])
    weight_decay: float = Field(
        default=rl.OPTIMIZER_DEFAULTS["weight_decay"], ge=0, le=1, description=rl.OPTIMIZER_DESCRIPTIONS["weight_decay"]
    )
    rewards: RewardSpec = Field(default_factory=RewardSpec, description="weights of MaxText's rewards, and your own reward functions")
    # Async (agentic) rollouts, issue 39: typed and refused at submit (JobSpec._async_rollout_refused, async_rollout.py).
    async_rollout: AsyncRollout | None = Field(default=None, description=ASYNC_ROLLOUT_DESCRIPTION)

    @field_validator("loss_agg_mode")
    @classmethod
    def _loss_agg_mode(cls, v: str, info: ValidationInfo) -> str:
        if v in TUNIX_ONLY_LOSS_AGG_MODES and not stored_spec(info):
            raise ValueError(
                f"{v} is Tunix's, but MaxText 0.2.5's train_rl refuses it when it loads its configuration "
                "(types.RL.loss_agg_mode takes token-mean, sequence-mean or sequence-mean-token-mean), so the job would "
                "fail after launch: use token-mean or sequence-mean-token-mean"
            )
        return v

    @field_validator("eval_mode")
    @classmethod
    def _eval_mode(cls, v: str, info: ValidationInfo) -> str:
        if problem := rl.eval_mode_problem(v, info.data.get("num_eval_passes"), info.data.get("eval_sampling_strategy")):
            raise ValueError(problem)
        return v

    @field_validator("kl_direction")
    @classmethod
    def _kl_direction(cls, v: KlDirection | None, info: ValidationInfo) -> KlDirection | None:
        d = info.data
        if {"kl_estimator", "beta", "num_iterations"} <= set(d):  # else one of them is refused already
            if problem := kl_direction_problem(v, d["kl_estimator"], d["beta"], d["num_iterations"]):
                raise ValueError(problem)
        return v

    @field_validator("eval_batch_size")
    @classmethod
    def _eval_batch(cls, v: int | None, info: ValidationInfo) -> int | None:
        if problem := rl.eval_batch_problem(v, info.data.get("max_target_length")):
            raise ValueError(problem)
        return v

    @field_validator("max_seq_token_per_tpu")
    @classmethod
    def _packing(cls, v: int, info: ValidationInfo) -> int:
        if problem := rl.packing_problem(v, info.data.get("max_target_length")):
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _lengths(self) -> GrpoSpec:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(
                f"epsilon_high ({self.epsilon_high}) is below epsilon ({self.epsilon}): it raises the upper clip, "
                "so it is at least epsilon; leave it null to clip both sides at epsilon"
            )
        if self.max_target_length <= self.max_prefill_predict_length:
            raise ValueError("max_target_length must exceed max_prefill_predict_length (room to generate)")
        tokens = self.batch_size * self.num_generations * self.max_target_length
        if tokens > limits.INT32_MAX:
            raise ValueError(
                f"batch_size * num_generations * max_target_length = {tokens} rollout tokens per step; MaxText "
                f"indexes them with 32-bit integers (at most {limits.INT32_MAX}): lower one of them"
            )
        return self
