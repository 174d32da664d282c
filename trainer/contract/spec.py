"""The RL job spec: one pydantic model shared by the trainer, the service, the CLI and the manifests.

Every field that reaches a MaxText command line is validated here so a bad spec fails before any
accelerator time is spent: strings MaxText's config loader would reinterpret, numbers beyond what it
can run (spec_values.py says why for each), and hardware the TPU table (tpu.py) does not have.
Location strings are URIs (locations.py): `gs://bucket/path`, an absolute local path (or `file://`),
or, for models/tokenizers/datasets only, a Hugging Face Hub id `org/name`.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from . import reward_sandbox as sandbox
from . import rl_settings as rl
from . import spec_values as limits
from .async_rollout import ASYNC_ROLLOUT_DESCRIPTION, AsyncRollout, async_rollout_refusal
from .dns_label import DNS_LABEL_MAX_LENGTH, DNS_LABEL_PATTERN, DnsLabel, is_dns_label
from .eval_suite import SUITE_REWARD_SANDBOX_DEFAULTS, AttachedEval, EvalTask
from .hang import MAX_HANG_TIMEOUT_S, MIN_HANG_TIMEOUT_S
from .locations import local_path, location_kind
from .reward_sandbox import RewardErrorPolicy
from .spec_values import DisplayText, HubId, Location, MaxTextName, PythonName, Revision, SplitName, SubsetName
from .tpu import (
    ACCELERATOR_NAMES,
    CPU_ACCELERATOR,
    MAX_CHIPS_PER_VM,
    TPU_SLICES,
    rollout_devices,
    rollout_share_problem,
    rollout_split_problem,
    tpu_slice,
)

HUB_ID_RE = re.compile(limits.HUB_ID_PATTERN)
GCS_URI_RE = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?")
LABEL_VALUE_RE = re.compile(limits.LABEL_VALUE_PATTERN)
MAX_ROLLOUT_PARALLELISM = max(s.chips for s in TPU_SLICES.values())


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN, Infinity (and 1e309, which JSON parsers read as infinity) are refused
    # for every float field at once; MaxText cannot train with them and JSON cannot store them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_location(value: str, *, hub_allowed: bool) -> str:
    if value.startswith("gs://"):
        if not GCS_URI_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid gs://bucket/path URI")
        return value.rstrip("/") if value.count("/") > 2 else value
    value = local_path(value)
    if value.startswith("/"):
        return value.rstrip("/") or "/"
    if hub_allowed and HUB_ID_RE.fullmatch(value):
        return value
    allowed = "a Hugging Face Hub id (org/name), " if hub_allowed else ""
    raise ValueError(f"{value!r} must be {allowed}an absolute local path or a gs:// URI")


def _check_file(value: str, suffix: str) -> str:
    loc = _check_location(value, hub_allowed=False)
    if not loc.endswith(suffix):
        raise ValueError(f"must name a {suffix} file")
    return loc


class ModelDims(_Strict):
    """Explicit MaxText-side dimensions. Normally derived from the checkpoint's config.json (see
    hf_model.py); given here they must agree with it, and they stand in for it when it cannot be read.
    """

    base_emb_dim: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="hidden size (config.json hidden_size)")
    base_num_query_heads: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="attention heads (num_attention_heads)")
    base_num_kv_heads: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="key/value heads (num_key_value_heads)")
    base_num_decoder_layers: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="decoder layers (num_hidden_layers)")
    base_mlp_dim: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="MLP hidden size (intermediate_size)")
    head_dim: int = Field(gt=0, le=limits.MAX_MODEL_DIM, description="size of one attention head")

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelDims:
        if self.base_num_query_heads % self.base_num_kv_heads:
            raise ValueError("base_num_query_heads must be a multiple of base_num_kv_heads")
        return self


class ModelSpec(_Strict):
    name: MaxTextName | None = Field(
        default=None,
        description=(
            "MaxText model name: llama3.1-* for a Llama-family checkpoint, or qwen3-0.6b/4b/8b/14b/32b for a Qwen3 dense one "
            "(other families are refused); default: derived from the checkpoint's config.json (llama3.1-8b or qwen3-0.6b, "
            "with the checkpoint's own dimensions)"
        ),
    )
    source: Location = Field(description="HF checkpoint: hub id, absolute local dir, or gs:// dir")
    revision: Revision | None = Field(default=None, description="hub revision (branch, tag or commit)")
    tokenizer: Location | None = Field(default=None, description="HF tokenizer: hub id or dir; default: source")
    dims: ModelDims | None = Field(default=None, description="MaxText dimensions; default: from config.json, which they must match")
    dtype: Literal["bfloat16", "float32"] = Field(default="bfloat16", description="the weights' (MaxText's weight_dtype)")
    compute_dtype: Literal["bfloat16", "float32"] | None = Field(
        default=None, description="MaxText's dtype (activations, matmuls); default: `dtype` on cpu, bfloat16 on a TPU"
    )
    scan_layers: bool = Field(default=True, description="MaxText's scan_layers: the layers as one scanned stack (convert and export)")
    lazy_load_tensors: bool = Field(
        default=True, description="to_maxtext --lazy_load_tensors; lazy needs no torch and writes the same checkpoint"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _check_location(v, hub_allowed=True)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str | None) -> str | None:
        return None if v is None else _check_location(v, hub_allowed=True)

    @model_validator(mode="after")
    def _revision_needs_hub(self) -> ModelSpec:
        if self.revision and location_kind(self.source) != "hub":
            raise ValueError("revision applies only to a Hugging Face Hub source")
        return self

    @property
    def tokenizer_location(self) -> str:
        return self.tokenizer or self.source

    def resolved_compute_dtype(self, accelerator: str) -> str:
        """MaxText's compute `dtype` on `accelerator`. Two fields because a TPU wants them apart: bf16 is
        what its MXU computes in, and fp32 weights with bf16 compute is MaxText's own default (base.yml),
        so a TPU keeps bf16 compute (as before this field existed) unless told otherwise. A CPU has no bf16
        arithmetic (bf16 compute only casts the weights every step: 1.85x slower decode), so it follows `dtype`.
        """
        if self.compute_dtype is not None:
            return self.compute_dtype
        return self.dtype if accelerator == CPU_ACCELERATOR else "bfloat16"


class DatasetSpec(_Strict):
    """GSM8K-format data: rows with `question` and `answer` ending in `#### <number>`.

    Either a hub dataset (`openai/gsm8k`, split names apply) or explicit files: parquet or JSON
    lines, local or gs://. Files are materialised as parquet in the run directory because MaxText
    reads local parquet via `hf_train_files`.
    """

    name: HubId = Field(default="openai/gsm8k", description="hub dataset, when no train_files are given")
    subset: SubsetName = Field(default="main", description="the hub dataset's subset (configuration)")
    train_split: SplitName = Field(default="train", description="the hub dataset's split to train on")
    eval_split: SplitName = Field(default="test", description="the hub dataset's split to evaluate on")
    train_files: list[Location] = Field(
        default_factory=list,
        max_length=limits.MAX_LIST_ITEMS,
        description="parquet or JSON-lines files to train on, instead of the hub dataset",
    )
    eval_files: list[Location] = Field(
        default_factory=list, max_length=limits.MAX_LIST_ITEMS, description="files to evaluate on (with train_files)"
    )
    prompt_template: Location | None = Field(
        default=None,
        description="JSON file with SYSTEM_PROMPT and TEMPLATE ({system_prompt}, {question}) in MaxText's data "
        "template format; default: MaxText's GSM8K template (the tutorial's)",
    )
    # rl.yml settings of issue 39 (rl_settings.py); at their defaults, out of the spec's hash.
    shuffle_seed: int | None = Field(default=None, ge=0, le=rl.MAX_SHUFFLE_SEED, description=rl.SHUFFLE_SEED_DESCRIPTION)
    processor_path: Location | None = Field(default=None, description=rl.PROCESSOR_DESCRIPTION)

    @field_validator("prompt_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        return None if v is None else _check_file(v, ".json")

    @field_validator("processor_path")
    @classmethod
    def _processor(cls, v: str | None) -> str | None:
        return None if v is None else _check_file(v, ".py")

    @field_validator("train_files", "eval_files")
    @classmethod
    def _files(cls, v: list[str]) -> list[str]:
        out = []
        for item in v:
            loc = _check_location(item, hub_allowed=False)
            if not re.search(r"\.(parquet|jsonl|json)\Z", loc):
                raise ValueError(f"{item!r}: data files must end in .parquet, .jsonl or .json")
            out.append(loc)
        return out

    @property
    def uses_files(self) -> bool:
        return bool(self.train_files)

    @model_validator(mode="after")
    def _eval_needs_train(self) -> DatasetSpec:
        if self.eval_files and not self.train_files:
            raise ValueError("eval_files need train_files too")
        return self


def _weight(default: float, description: str) -> float:
    bound = limits.MAX_REWARD_WEIGHT
    return Field(default=default, ge=-bound, le=bound, description=description)


class RewardSpec(_Strict):
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


class GrpoSpec(_Strict):
    """The GRPO/GSPO settings rl.yml exposes; defaults are the tutorial's. Upper bounds: spec_values.py."""

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
    loss_agg_mode: Literal[
        "token-mean", "sequence-mean-token-mean", "sequence-mean-token-scale", "seq-mean-token-sum", "sequence-mean-token-sum-norm"
    ] = Field(
        default="sequence-mean-token-mean",
        description="how per-token losses become the batch's (Tunix's modes; sequence-mean-token-scale is Dr. GRPO's, "
        "no bias toward short or long completions)",
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

    @field_validator("eval_mode")
    @classmethod
    def _eval_mode(cls, v: str, info: ValidationInfo) -> str:
        if problem := rl.eval_mode_problem(v, info.data.get("num_eval_passes"), info.data.get("eval_sampling_strategy")):
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


CapacityKind = Literal["on-demand", "spot", "flex-start", "reservation"]
CAPACITY_KINDS: tuple[CapacityKind, ...] = typing.get_args(CapacityKind)


def capacity_text(capacities: tuple[str, ...]) -> str:
    """A capacity set as people read it: `spot`, or `[spot, on-demand]`."""
    return capacities[0] if len(capacities) == 1 else f"[{', '.join(capacities)}]"


class HardwareSpec(_Strict):
    """Checked against the TPU table (tpu.py) whatever launches the job; whether this host has the
    accelerator is the local launcher's question, asked at submit."""

    accelerator: str = Field(
        default="v6e-8",
        description="a TPU slice such as v6e-8, or cpu",
        json_schema_extra={"enum": list(ACCELERATOR_NAMES)},
    )
    # validate_default: a default must fit the accelerator too (v6e-16 with the default 8 chips per VM).
    chips_per_vm: int = Field(
        default=8,
        ge=1,
        le=MAX_CHIPS_PER_VM,
        validate_default=True,
        description="TPU chips on each VM: the slice's own (v6e-8: 8, v6e-16: 4)",
    )
    capacity: CapacityKind | Annotated[list[CapacityKind], Field(max_length=len(CAPACITY_KINDS))] = Field(
        default="on-demand",
        description="how the TPU VMs are obtained on GKE: on-demand, spot (preemptible, 30 s notice), "
        "flex-start (Dynamic Workload Scheduler, at most 7 days) or a reservation (name it in `reservation`); "
        "or an ordered list of them (e.g. [spot, on-demand]): the job may run on any of them, and which one "
        "is the pool's choice (Kueue tries its ClusterQueue's flavors in order)",
    )
    reservation: DnsLabel | None = Field(default=None, description="with capacity: reservation, the reservation's name")
    rollout_engine: Literal["vllm", "jax"] = Field(
        default="vllm", description="vllm (TPU; train_rl as shipped) or jax (CPU: Tunix's sampler over MaxText's weights)"
    )
    rollout_data_parallelism: int = Field(
        default=1,
        ge=-1,
        le=MAX_ROLLOUT_PARALLELISM,
        validate_default=True,
        description="rollout replicas; -1 lets MaxText derive it",
    )
    rollout_tensor_parallelism: int = Field(
        default=-1,
        ge=-1,
        le=MAX_ROLLOUT_PARALLELISM,
        validate_default=True,
        description="chips per rollout replica; -1 lets MaxText derive it",
    )
    # An rl.yml setting of issue 39 (rl_settings.py); at its default, out of the spec's hash.
    reshard_chunk_size: int | None = Field(default=None, ge=1, le=rl.MAX_RESHARD_CHUNK_SIZE, description=rl.RESHARD_DESCRIPTION)

    @field_validator("accelerator")
    @classmethod
    def _accel(cls, v: str) -> str:
        if v not in ACCELERATOR_NAMES:
            raise ValueError(f"{v[:40]!r} is not an accelerator rljob knows; use one of {', '.join(ACCELERATOR_NAMES)}")
        return v

    @field_validator("chips_per_vm")
    @classmethod
    def _chips(cls, v: int, info: ValidationInfo) -> int:
        tpu = tpu_slice(info.data.get("accelerator", CPU_ACCELERATOR))
        if tpu is not None and v != tpu.chips_per_vm:
            raise ValueError(f"{tpu.name}'s VMs have {tpu.chips_per_vm} chips each, not {v}; set chips_per_vm: {tpu.chips_per_vm}")
        return v

    @field_validator("rollout_data_parallelism", "rollout_tensor_parallelism")
    @classmethod
    def _parallel(cls, v: int, info: ValidationInfo) -> int:
        if v == 0:
            raise ValueError("must be a positive count or -1 (auto)")
        if "accelerator" not in info.data:
            return v  # the accelerator is already reported
        devices = rollout_devices(info.data["accelerator"])
        problem = rollout_share_problem(v, devices)
        data = info.data.get("rollout_data_parallelism")  # validated first; absent when already reported
        if problem is None and info.field_name == "rollout_tensor_parallelism" and data is not None:
            problem = rollout_split_problem(data, v, devices)
        if problem:
            raise ValueError(f"{problem} ({info.data['accelerator']})")
        return v

    @field_validator("reshard_chunk_size")
    @classmethod
    def _reshard(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("rollout_engine") == "jax":
            raise ValueError("applies to the vllm rollout's weight sync; the jax rollout syncs in one piece: leave it null")
        return v

    @model_validator(mode="after")
    def _engine_fits(self) -> HardwareSpec:
        if self.accelerator == CPU_ACCELERATOR and self.rollout_engine == "vllm":
            raise ValueError("the vllm rollout engine needs a TPU; use rollout_engine: jax on cpu")
        return self

    @field_validator("capacity")
    @classmethod
    def _capacity_set(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, str):
            return v
        if not v:
            raise ValueError("an empty list offers no capacity: name one kind, or several in order")
        repeated = sorted({c for c in v if v.count(c) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed more than once: name each kind once")
        # One kind in a list means the same as the kind alone: stored alone, so the spec's hash does not depend on it.
        return v[0] if len(v) == 1 else v

    @property
    def capacities(self) -> tuple[CapacityKind, ...]:
        """The kinds of capacity the job may run on, in the order given (one, for a single value)."""
        return (self.capacity,) if isinstance(self.capacity, str) else tuple(self.capacity)

    @model_validator(mode="after")
    def _reservation_named(self) -> HardwareSpec:
        if "reservation" in self.capacities and self.reservation is None:
            raise ValueError("capacity: reservation needs the reservation's name in hardware.reservation")
        if "reservation" not in self.capacities and self.reservation is not None:
            raise ValueError(f"hardware.reservation is only read with capacity: reservation, not {capacity_text(self.capacities)}")
        return self


class ExportSpec(_Strict):
    enabled: bool = Field(default=True, description="run the export stage (MaxText -> Hugging Face)")
    verify: bool = Field(default=True, description="load the export with transformers and check finite logits")
    hub_repo: HubId | None = Field(default=None, description="optional HF Hub repo to upload to (token from HF_TOKEN)")
    hub_private: bool = Field(default=True, description="create the hub repo private")
    checkpoint: Literal["last", "best"] = Field(
        default="last",
        description="which weights to export: the last checkpoint, or the best by intermediate evaluation accuracy "
        "(ties: the earlier); best needs grpo.num_test_batches and grpo.eval_interval below grpo.num_batches",
    )


class RetentionSpec(_Strict):
    """What the service deletes of a finished run, and when (service/domain/checkpoint_retention.py)."""

    intermediate_checkpoint_days: int = Field(
        ge=0,
        le=limits.MAX_RETENTION_DAYS,
        description="days after the job ends that its intermediate actor checkpoints are deleted (the final, the exported "
        "and the best are kept); 0: never; unset: the service's RLJOB_CHECKPOINT_RETENTION_DAYS",
    )


class JobSpec(_Strict):
    """One RL post-training job: convert -> GRPO -> export; or, with `evaluation`, an eval job."""

    name: DnsLabel = Field(description="DNS-1123 label: lowercase letters, digits and '-'")
    team: DisplayText | None = Field(default=None, description="set by the service from the caller's token")
    model: ModelSpec = Field(description="the checkpoint to train")
    dataset: DatasetSpec = Field(default_factory=DatasetSpec, description="the prompts and answers")
    grpo: GrpoSpec = Field(default_factory=GrpoSpec, description="the GRPO settings train_rl runs with")
    hardware: HardwareSpec = Field(default_factory=HardwareSpec, description="the accelerator and how rollouts use it")
    export: ExportSpec = Field(default_factory=ExportSpec, description="the Hugging Face export")
    output: Location = Field(description="where runs go: gs://bucket/prefix or an absolute local dir")
    priority: Literal["low", "normal", "high"] = Field(
        default="normal",
        description="order among a team's queued jobs (and, on Kueue, the WorkloadPriorityClass): high first",
    )
    # Checked whole by _labels (so an error names `labels`); the schema states the same patterns.
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=limits.MAX_LABELS,
        description="Kubernetes labels on the job's objects (rljob's own keys win)",
        json_schema_extra={
            "propertyNames": {"pattern": DNS_LABEL_PATTERN, "maxLength": DNS_LABEL_MAX_LENGTH},
            "additionalProperties": {"type": "string", "pattern": limits.LABEL_VALUE_PATTERN, "maxLength": 63},
        },
    )

    evaluation: EvalTask | None = Field(
        default=None,
        description="set by POST /v1/evals: this job only evaluates a checkpoint on a suite (eval_suite.py); "
        "dataset, grpo and export are not used",
    )
    eval: AttachedEval | None = Field(
        default=None, description="evaluate this job's checkpoints as they appear, each in an eval job of its own off the training slice"
    )
    retention: RetentionSpec | None = Field(
        default=None, description="override the service's checkpoint retention for this job; null: the service's setting"
    )
    hang_timeout_s: float | None = Field(
        default=None,
        ge=MIN_HANG_TIMEOUT_S,
        le=MAX_HANG_TIMEOUT_S,
        description="seconds without a progress event (a step, a stage's start or end, an evaluation, a checkpoint) after "
        "which the trainer counts itself hung, writes its stacks to the stage log and exits to be restarted; null: the "
        "larger of RLJOB_HANG_FLOOR_S and RLJOB_HANG_STEP_FACTOR times the slowest recent step (trainer/contract/hang.py)",
    )

    @field_validator("output")
    @classmethod
    def _output(cls, v: str) -> str:
        return _check_location(v, hub_allowed=False)

    @model_validator(mode="after")
    def _evaluation_fits(self) -> JobSpec:
        if self.evaluation is None:
            return self
        if self.eval is not None:
            raise ValueError("an eval job (evaluation) cannot have evaluations attached (eval)")
        if self.hardware.accelerator != CPU_ACCELERATOR:
            raise ValueError(
                f"eval jobs run on cpu (Hugging Face transformers on the host), not {self.hardware.accelerator}: "
                "no TPU evaluation engine is built yet"
            )
        return self

    @property
    def is_eval(self) -> bool:
        return self.evaluation is not None

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not is_dns_label(key) or not LABEL_VALUE_RE.fullmatch(value):
                raise ValueError(f"label {key}={value!r} is not a valid Kubernetes label")
        return v

    @model_validator(mode="after")
    def _file_data_has_eval_files(self) -> JobSpec:
        # MaxText would otherwise fetch the eval split of `dataset.name` from the hub.
        if self.dataset.uses_files and self.grpo.num_test_batches > 0 and not self.dataset.eval_files:
            raise ValueError("dataset.eval_files are required with train_files when grpo.num_test_batches > 0")
        return self

    @model_validator(mode="after")
    def _async_rollout_refused(self) -> JobSpec:
        # Here, not in GrpoSpec: the reason depends on hardware.accelerator.
        if self.grpo.async_rollout is not None:
            raise ValueError(async_rollout_refusal(self.hardware.accelerator))
        return self

    @model_validator(mode="after")
    def _best_needs_an_intermediate_evaluation(self) -> JobSpec:
        # Refused before launch: without an evaluation before the last batch (one at the last batch measures the
        # last weights), "best" could only ever be the last checkpoint, and the job would pay for nothing.
        g = self.grpo
        if self.export.checkpoint == "best" and (g.num_test_batches == 0 or not 0 < g.eval_interval < g.num_batches):
            raise ValueError(
                f"export.checkpoint=best picks among intermediate evaluations, and this job has none: it needs "
                f"grpo.num_test_batches > 0 (is {g.num_test_batches}) and 0 < grpo.eval_interval < grpo.num_batches "
                f"(is {g.eval_interval}, num_batches {g.num_batches})"
            )
        return self

    def input_locations(self) -> list[tuple[str, str]]:
        """(field path, URI) of every input the job reads, for existence and permission checks."""
        out: list[tuple[str, str]] = [("model.source", self.model.source)]
        if self.model.tokenizer:
            out.append(("model.tokenizer", self.model.tokenizer))
        out += [(f"dataset.train_files.{i}", f) for i, f in enumerate(self.dataset.train_files)]
        out += [(f"dataset.eval_files.{i}", f) for i, f in enumerate(self.dataset.eval_files)]
        if self.dataset.prompt_template:
            out.append(("dataset.prompt_template", self.dataset.prompt_template))
        if self.dataset.processor_path:
            out.append(("dataset.processor_path", self.dataset.processor_path))
        if self.grpo.rewards.functions_path:
            out.append(("grpo.rewards.functions_path", self.grpo.rewards.functions_path))
        if self.evaluation is not None:
            out += self.evaluation.suite.input_locations("evaluation.suite")
            if self.evaluation.checkpoint.params:
                out.append(("evaluation.checkpoint.params", self.evaluation.checkpoint.params))
        if self.eval is not None:
            out += self.eval.suite.input_locations("eval.suite")
        return out

    def canonical_json(self) -> str:
        body = self.model_dump(mode="json")
        # Left out when unset, so every spec written before evaluations (and retention) existed keeps its hash (idempotency, repro).
        for key in ("evaluation", "eval", "retention", "hang_timeout_s"):
            if body.get(key) is None:
                body.pop(key, None)
        rl.drop_defaults(body["grpo"], rl.GRPO_DEFAULTS)  # issue 39's rl.yml settings, likewise
        rl.drop_defaults(body["grpo"], {"async_rollout": None})
        rl.drop_defaults(body["dataset"], rl.DATASET_DEFAULTS)
        rl.drop_defaults(body["hardware"], rl.HARDWARE_DEFAULTS)
        rewards = body["grpo"]["rewards"]
        for key, default in REWARD_SANDBOX_DEFAULTS.items():
            if rewards.get(key) == default:
                rewards.pop(key, None)
        suites = [task["suite"] for task in (body.get("evaluation"), body.get("eval")) if task is not None]
        for suite in suites:  # a suite's reward limits, likewise
            for key, default in SUITE_REWARD_SANDBOX_DEFAULTS.items():
                if suite.get(key) == default:
                    suite.pop(key, None)
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def default_job_id(spec: JobSpec) -> str:
    """A DNS-safe id derived from the spec, for `trainer run` without a service-assigned id."""
    return "rl-" + spec.content_hash()[:12]


JOB_ID_RE = re.compile(r"^rl-[a-z0-9]{12}\Z")  # \Z: `$` would also accept a trailing newline
