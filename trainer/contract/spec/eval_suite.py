"""Evaluation suites and eval jobs: what an eval job evaluates, on what, and how it samples.

A suite is data plus reward functions plus sampling. Two evaluations are comparable only when they ran
the same suite content: the trainer hashes what it actually loaded (every row, the reward file's bytes,
the prompt template and the sampling settings; `SuiteIdentity.content_hash`), and the service gives each
new content of a suite name the next version number (per team for user suites, one sequence for the
built-ins). Results name both, and a comparison across versions is refused.

Built-in suites (`BUILTIN_SUITES`) ship with the trainer: their rows, reward function, prompt template
and sampling are code (trainer/evals/builtin_suites.py), so a `SuiteSpec` names only them. A user suite
names its rows (JSON lines or parquet with `question` and `answer`, GSM8K's `#### N` last line or a plain
answer), a reward file and its functions, an optional prompt template, and its sampling; every location
goes through the team's location policy like a training job's inputs.

An eval job is a JobSpec with `evaluation` set (`EvalTask`): the trainer runs only evaluation on
`model.source` (a Hugging Face checkpoint) or, for a MaxText checkpoint of a training job, converts
`checkpoint.params` to Hugging Face with that job's model settings first. A training job with `eval`
set (`AttachedEval`) gets eval jobs for its checkpoints as they appear, created by the service.

Where an eval job runs decides its engine (`generation_engine`): on cpu, Hugging Face transformers (torch) on the host,
or the JAX engine on the CPU where no torch is installed; on a single-VM TPU slice, trainer/evals/jax_model.py on the
chips, since a TPU host has no torch. Both sample the same
way (the same prompts, temperature, top-k and per-completion seeds), but not the same random draws.
"""

from __future__ import annotations

import importlib.util
import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, TPU_SLICES, tpu_slice
from trainer.contract.spec import reward_sandbox as sandbox
from trainer.contract.spec import values as limits
from trainer.contract.spec.dns_label import DnsLabel
from trainer.contract.spec.reward_sandbox import RewardErrorPolicy
from trainer.contract.spec.values import Location, PythonName

BUILTIN_SUITES = ("arith", "arith-a", "arith-b", "gsm8k")
MAX_EVAL_SAMPLES = 64  # k: completions sampled per row, beside the greedy one
MAX_SUITE_ROWS = 20_000  # GSM8K's test split is 1319 rows; MATH's 5000
MAX_NEW_TOKENS = 32_768
EVAL_BATCH_ROWS = 8  # rows per generate call (trainer/evals/runner.py); the JAX engine's fit estimate reads it too
EVAL_JOB_LABELS = ("base", "export", "best", "last", "location")  # plus step-N
_STEP = re.compile(r"^step-(\d{1,9})$")
# Patterns in the schema (a client generated from it knows the rules); JobSpec's JOB_ID_RE is the same id.
JOB_ID_PATTERN = r"^rl-[a-z0-9]{12}$"
LABEL_PATTERN = r"^(base|export|best|last|location|step-\d{1,9})$"
AnswerExtractor = Literal["last-number", "first-number"]
GenerationEngine = Literal["transformers", "jax"]


def torch_installed() -> bool:
    """Whether this machine has torch (found, not imported): a TPU VM's or the lent chip's Python may have none."""
    return importlib.util.find_spec("torch") is not None


def generation_engine(accelerator: str, torch_here: bool = True) -> GenerationEngine:
    """What generates an eval job's completions: the JAX engine on a TPU slice (its chips); on cpu, transformers
    where torch is installed, else the JAX engine on the CPU (a cpu eval job on a TPU VM's host)."""
    return "transformers" if accelerator == CPU_ACCELERATOR and torch_here else "jax"


def export_check_engine(torch_here: bool) -> GenerationEngine:
    """What checks an export on the host's CPU: transformers, the export's real reader, wherever torch is installed
    (a GKE pod's image has it), else the JAX engine (a TPU VM's or the lent chip's host)."""
    return "transformers" if torch_here else "jax"


EVAL_ACCELERATORS = (CPU_ACCELERATOR, *(name for name, tpu in TPU_SLICES.items() if not tpu.multi_host))


def eval_accelerator_problem(accelerator: str) -> str | None:
    """Why an eval job cannot run on `accelerator`, or None: cpu, or a TPU slice of one VM (the JAX engine runs
    on one process's chips; it shards over none of them, so more than one VM would only wait)."""
    if accelerator == CPU_ACCELERATOR:
        return None
    tpu = tpu_slice(accelerator)
    if tpu is None:
        return f"{accelerator!r} is neither cpu nor a TPU slice rljob knows"
    if tpu.multi_host:
        return f"eval jobs run on one VM: cpu or a single-VM TPU slice, not {accelerator} ({tpu.vms_per_slice} VMs)"
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class EvalSampling(_Strict):
    """How each row is sampled: one greedy completion (pass@1) and `samples` at the temperature (sampled
    accuracy, pass@k, maj@k). Part of the suite's content: two evaluations sampled differently are different
    suite versions."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"samples", "temperature", "top_k", "max_new_tokens", "seed"})  # spec_hash.py

    samples: int = Field(default=4, ge=1, le=MAX_EVAL_SAMPLES, description="k: sampled completions per row, beside the greedy one")
    temperature: float = Field(default=0.9, gt=0, le=limits.MAX_TEMPERATURE, description="sampling temperature")
    top_k: int = Field(default=50, gt=0, le=limits.MAX_TOP_K, description="sample among the k most likely tokens")
    max_new_tokens: int = Field(default=256, gt=0, le=MAX_NEW_TOKENS, description="longest completion, in tokens")
    seed: int = Field(default=20261204, ge=0, le=2**31 - 1, description="the sampling seed (the same rows get the same draws)")


# SuiteSpec's reward sandbox fields at their defaults: left out of the spec's hash (JobSpec.canonical_json).
SUITE_REWARD_SANDBOX_DEFAULTS = {
    "reward_on_error": "zero",
    "reward_timeout_s": sandbox.DEFAULT_TIMEOUT_S,
    "reward_memory_mib": sandbox.DEFAULT_MEMORY_MIB,
}


class SuiteSpec(_Strict):
    """A built-in suite by name, or a user suite: rows, reward functions, template and sampling."""

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {"name", "data", "rewards_path", "rewards", "prompt_template", "answer", "sampling"}
    )  # spec_hash.py

    name: DnsLabel = Field(description=f"a built-in suite ({', '.join(BUILTIN_SUITES)}) or your suite's name")
    data: Location | None = Field(
        default=None, description="your suite's rows: .jsonl or .parquet with question and answer; none for a built-in suite"
    )
    rewards_path: Location | None = Field(default=None, description="Python file with the reward functions (a user suite)")
    rewards: list[PythonName] = Field(
        default_factory=list,
        max_length=16,
        description="reward functions fn(prompts, completions, tmvp_config, **kw) to import from rewards_path; "
        "a completion is correct under a function when its score is above 0",
    )
    prompt_template: Location | None = Field(
        default=None, description="JSON file with SYSTEM_PROMPT and TEMPLATE (MaxText's data template format); default: MaxText's GSM8K one"
    )
    answer: AnswerExtractor = Field(
        default="last-number", description="how maj@k reads a completion's answer to take the majority: its last or first number"
    )
    sampling: EvalSampling = Field(default_factory=EvalSampling, description="how rows are sampled")
    # A user suite's reward functions run in the reward sandbox (trainer/rewards_sandbox/), as a training job's do, with
    # these limits; the defaults are grpo.rewards'. Not part of the suite's content hash, and left out of the spec's hash
    # at their defaults (JobSpec.canonical_json), so suites written before them keep their versions and hashes.
    reward_on_error: RewardErrorPolicy = Field(
        default="zero",
        description="a reward call that raises, passes reward_timeout_s or crashes its worker: zero scores its completions "
        "incorrect (null, counted as unscored) and the evaluation goes on; fail stops the eval job naming the function and error",
    )
    reward_timeout_s: float = Field(
        default=sandbox.DEFAULT_TIMEOUT_S,
        gt=0,
        le=sandbox.MAX_TIMEOUT_S,
        description="seconds one reward call may take (one row's greedy and sampled completions); past it the worker is replaced",
    )
    reward_memory_mib: int = Field(
        default=sandbox.DEFAULT_MEMORY_MIB,
        ge=sandbox.MIN_MEMORY_MIB,
        le=sandbox.MAX_MEMORY_MIB,
        description="address space of the reward worker, in MiB (RLIMIT_AS)",
    )

    @field_validator("data")
    @classmethod
    def _data(cls, v: str | None) -> str | None:
        if v is not None and not re.search(r"\.(parquet|jsonl)\Z", v):
            raise ValueError("a suite's rows must be a .jsonl or .parquet file")
        return v

    @field_validator("rewards_path")
    @classmethod
    def _rewards_path(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith(".py"):
            raise ValueError("must name a .py file")
        return v

    @field_validator("prompt_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith(".json"):
            raise ValueError("must name a .json file")
        return v

    @model_validator(mode="after")
    def _builtin_or_user(self) -> SuiteSpec:
        if self.name in BUILTIN_SUITES:
            sandboxed = [key for key, default in SUITE_REWARD_SANDBOX_DEFAULTS.items() if getattr(self, key) != default]
            if self.data or self.rewards_path or self.rewards or self.prompt_template or self.sampling != EvalSampling() or sandboxed:
                raise ValueError(
                    f"{self.name} is a built-in suite: its rows, rewards, template, sampling and reward limits are fixed; give your "
                    "own suite another name"
                )
            return self
        if self.data is None:
            raise ValueError(f"{self.name!r} is not a built-in suite ({', '.join(BUILTIN_SUITES)}): a user suite needs its rows in `data`")
        if not self.rewards_path or not self.rewards:
            raise ValueError("a user suite needs rewards_path and the reward functions to call in `rewards`")
        return self

    @property
    def builtin(self) -> bool:
        return self.name in BUILTIN_SUITES

    def input_locations(self, prefix: str) -> list[tuple[str, str]]:
        out = [(f"{prefix}.data", self.data)] if self.data else []
        if self.rewards_path:
            out.append((f"{prefix}.rewards_path", self.rewards_path))
        if self.prompt_template:
            out.append((f"{prefix}.prompt_template", self.prompt_template))
        return out


class EvalCheckpoint(_Strict):
    """Which weights an eval job evaluates."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"format", "params", "job_id", "label"})  # spec_hash.py

    format: Literal["huggingface", "maxtext"] = Field(
        description="huggingface: model.source is the checkpoint | maxtext: `params` is a training job's actor "
        "checkpoint, converted with model.* first"
    )
    params: Location | None = Field(default=None, description="with maxtext: the actor checkpoint's model_params directory")
    job_id: str | None = Field(default=None, pattern=JOB_ID_PATTERN, description="the training job whose weights these are")
    label: str = Field(
        default="location", pattern=LABEL_PATTERN, description="base, export, best, last, step-N, or location (a path or hub id)"
    )

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        if v not in EVAL_JOB_LABELS and not _STEP.match(v):
            raise ValueError(f"{v!r}: use one of {', '.join(EVAL_JOB_LABELS)} or step-N")
        return v

    @model_validator(mode="after")
    def _params(self) -> EvalCheckpoint:
        if (self.format == "maxtext") != (self.params is not None):
            raise ValueError("params is given exactly when format is maxtext")
        return self


class EvalTask(_Strict):
    """JobSpec.evaluation: this job only evaluates a checkpoint on a suite."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"suite", "checkpoint", "baseline"})  # spec_hash.py

    suite: SuiteSpec = Field(description="what to evaluate on: a built-in suite, or rows, reward functions, template and sampling")
    checkpoint: EvalCheckpoint = Field(description="the weights evaluated")
    baseline: str | None = Field(
        default=None, pattern=JOB_ID_PATTERN, description="an earlier eval job to compare with (same suite version)"
    )


class AttachedEval(_Strict):
    """JobSpec.eval: evaluate this training job's checkpoints in eval jobs of their own, off the training slice."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"suite", "every_n_checkpoints", "base", "export"})  # spec_hash.py

    suite: SuiteSpec = Field(description="the suite each eval job runs")
    every_n_checkpoints: int = Field(
        default=1, ge=1, le=limits.MAX_NUM_BATCHES, description="evaluate every n-th actor checkpoint (1: each one)"
    )
    base: bool = Field(default=True, description="also evaluate the base model, so each checkpoint is compared with it")
    export: bool = Field(default=True, description="also evaluate the export when the job succeeds")
    # Left out of the spec's hash at its default, so a spec written before it keeps its hash (JobSpec.canonical_json).
    accelerator: str = Field(
        default=CPU_ACCELERATOR,
        max_length=32,
        description="where the eval jobs run: cpu (transformers on the host, beside training) or a single-VM TPU slice "
        "(the JAX engine on its chips; on one machine an eval job waits for the training job's chips, so a step-N eval "
        "runs after training and finds only the checkpoints grpo.keep_last_checkpoints kept)",
        json_schema_extra={"enum": list(EVAL_ACCELERATORS)},
    )

    @field_validator("accelerator")
    @classmethod
    def _accelerator(cls, v: str) -> str:
        if (problem := eval_accelerator_problem(v)) is not None:
            raise ValueError(problem)
        return v


class SuiteIdentity(_Strict):
    """What an evaluation actually ran: the suite's name, whether it is built in, and its content hash."""

    name: str
    builtin: bool
    content_hash: str = Field(pattern=r"^[0-9a-f]{16}$", description="sha256 (first 16 hex) of rows, rewards, template, sampling")
    rows: int = Field(ge=0, le=MAX_SUITE_ROWS)
    reward_functions: list[str]
    sampling: EvalSampling
