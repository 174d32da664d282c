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
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR
from trainer.contract.spec import rl_settings as rl
from trainer.contract.spec import values as limits
from trainer.contract.spec.async_rollout import async_rollout_refusal
from trainer.contract.spec.base import LABEL_VALUE_RE, _check_file, _check_location, _Strict
from trainer.contract.spec.dns_label import DNS_LABEL_MAX_LENGTH, DNS_LABEL_PATTERN, DnsLabel, is_dns_label
from trainer.contract.spec.eval_suite import AttachedEval, EvalTask, eval_accelerator_problem
from trainer.contract.spec.grpo import GrpoSpec
from trainer.contract.spec.hang import MAX_HANG_TIMEOUT_S, MIN_HANG_TIMEOUT_S
from trainer.contract.spec.hardware import HardwareSpec
from trainer.contract.spec.hashing import hash_body
from trainer.contract.spec.locations import location_kind
from trainer.contract.spec.values import DisplayText, HubId, Location, MaxTextName, Revision, SplitName, SubsetName


class ModelDims(_Strict):
    """Explicit MaxText-side dimensions. Normally derived from the checkpoint's config.json (see
    hf_model.py); given here they must agree with it, and they stand in for it when it cannot be read.
    """

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {"base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_num_decoder_layers", "base_mlp_dim", "head_dim"}
    )  # spec_hash.py

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
    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {"name", "source", "revision", "tokenizer", "dims", "dtype", "compute_dtype", "scan_layers", "lazy_load_tensors"}
    )  # spec_hash.py
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
    logits_dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16",
        description="the logits' projection, in the rollout and the trainer alike (MaxText's logits_dot_in_fp32): float32 "
        "makes the sampler's and the trainer's log-probabilities agree where bf16 rounds large logits "
        "(bench/chip/README.md, issue 66); the logits are float32 after it either way, so memory is the same",
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

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {"name", "subset", "train_split", "eval_split", "train_files", "eval_files", "prompt_template"}
    )  # spec_hash.py

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


class ExportSpec(_Strict):
    hashed_always: ClassVar[frozenset[str]] = frozenset({"enabled", "verify", "hub_repo", "hub_private", "checkpoint"})  # spec_hash.py
    enabled: bool = Field(default=True, description="run the export stage (MaxText -> Hugging Face)")
    verify: bool = Field(
        default=True,
        description="load the export and check finite logits and a greedy continuation (transformers where torch is "
        "installed, else the JAX engine)",
    )
    hub_repo: HubId | None = Field(default=None, description="optional HF Hub repo to upload to (token from HF_TOKEN)")
    hub_private: bool = Field(default=True, description="create the hub repo private")
    checkpoint: Literal["last", "best"] = Field(
        default="last",
        description="which weights to export: the last checkpoint, or the best by intermediate evaluation accuracy "
        "(ties: the earlier); best needs grpo.num_test_batches and grpo.eval_interval below grpo.num_batches",
    )


class RetentionSpec(_Strict):
    """What the service deletes of a finished run, and when (service/domain/checkpoint_retention.py)."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"intermediate_checkpoint_days"})  # spec_hash.py

    intermediate_checkpoint_days: int = Field(
        ge=0,
        le=limits.MAX_RETENTION_DAYS,
        description="days after the job ends that its intermediate actor checkpoints are deleted (the final, the exported "
        "and the best are kept); 0: never; unset: the service's RLJOB_CHECKPOINT_RETENTION_DAYS",
    )


class JobSpec(_Strict):
    """One RL post-training job: convert -> GRPO -> export; or, with `evaluation`, an eval job."""

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {"name", "team", "model", "dataset", "grpo", "hardware", "export", "output", "priority", "labels", "seed"}
    )  # spec_hash.py

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
    # Left out of a dump while unset (as grpo.kl_direction): a spec written before it reads, stores and renders as before.
    seed: int | None = Field(
        default=None,
        ge=0,
        le=rl.MAX_SHUFFLE_SEED,
        description=rl.SEED_DESCRIPTION,
        exclude_if=lambda v: v is None,
    )
    hang_timeout_s: float | None = Field(
        default=None,
        ge=MIN_HANG_TIMEOUT_S,
        le=MAX_HANG_TIMEOUT_S,
        description="seconds without a progress event (a step, a stage's start or end, an evaluation, a checkpoint) after "
        "which the trainer counts itself hung, writes its stacks to the stage log and exits to be restarted; null: the "
        "larger of RLJOB_HANG_FLOOR_S and RLJOB_HANG_STEP_FACTOR times the slowest recent step (trainer/contract/spec/hang.py)",
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
        if (problem := eval_accelerator_problem(self.hardware.accelerator)) is not None:
            raise ValueError(problem)
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
        return json.dumps(hash_body(self), sort_keys=True, separators=(",", ":"))

    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def default_job_id(spec: JobSpec) -> str:
    """A DNS-safe id derived from the spec, for `trainer run` without a service-assigned id."""
    return "rl-" + spec.content_hash()[:12]


JOB_ID_RE = re.compile(r"^rl-[a-z0-9]{12}\Z")  # \Z: `$` would also accept a trailing newline
