"""Eval jobs: POST /v1/evals turns "evaluate this checkpoint on that suite" into an ordinary job.

An eval job is a JobSpec with `evaluation` set (trainer/contract/spec/eval_suite.py): it is stored, queued, launched,
logged and cancelled like any job, and the job service's checks (location policy, the launcher's, idempotency) all
apply. What this module adds is the translation: the body (`EvalCreate`), the checkpoint it names (a job's
checkpoint by reference, `<job-id>:export|best|last|step-N|base`, or a location), and the spec built from them
(`eval_job_spec`, also called by the service for evaluations attached to a training job).

A reference is resolved against what the service knows of the referenced job, never against what its trainer
claims: the export is the job's own RunLayout.export_dir, and a checkpoint URI from its events or its
best-checkpoint record is used only when it lies in that job's run directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, ValidationInfo, model_validator

from service.domain.records.errors import InvalidRequest, JobNotFound
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import RunFiles
from trainer.contract import JobSpec, ModelSpec, join_uri
from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, tpu_slice
from trainer.contract.spec.dns_label import DNS_LABEL_MAX_LENGTH, DnsLabel
from trainer.contract.spec.eval_suite import (
    EVAL_ACCELERATORS,
    JOB_ID_PATTERN,
    EvalCheckpoint,
    EvalTask,
    SuiteSpec,
    eval_accelerator_problem,
)
from trainer.contract.spec.values import Location

CHECKPOINT = ("body", "checkpoint")
EXPORT_ARTIFACT = "export.export"  # the export stage's artifact (trainer/pipeline.py: "<stage>.<output>")
_REFERENCE = re.compile(r"^(rl-[a-z0-9]{12}):(.*)\Z", re.DOTALL)
_STEP = re.compile(r"^step-(\d{1,9})\Z")
REFERENCE_HELP = "<job-id>:export, <job-id>:best, <job-id>:last, <job-id>:step-N or <job-id>:base"


class EvalCreate(BaseModel):
    """The body of POST /v1/evals: evaluate a checkpoint on a suite. `team` comes from the caller's token."""

    model_config = ConfigDict(extra="forbid")

    checkpoint: str = Field(
        min_length=1,
        max_length=4096,
        description=f"{REFERENCE_HELP} (a job your team can see), or a Hugging Face checkpoint: hub id, absolute dir or gs:// dir",
    )
    suite: SuiteSpec
    baseline: str | None = Field(
        default=None,
        pattern=JOB_ID_PATTERN,
        description="an earlier eval job on the same suite: this one's view then includes the comparison",
    )
    name: DnsLabel | None = Field(default=None, description="the eval job's name; default eval-<suite>-<checkpoint label>")
    output: Location | None = Field(
        default=None,
        description="where the eval job's run goes; default: the referenced job's output; for a checkpoint location, "
        "required on a cluster, and on the embedded default (local launcher) the service's state directory",
    )
    priority: Literal["low", "normal", "high"] = "normal"
    labels: dict[str, str] = Field(default_factory=dict, description="Kubernetes labels on the eval job's objects")
    accelerator: str = Field(
        default=CPU_ACCELERATOR,
        max_length=32,
        json_schema_extra={"enum": list(EVAL_ACCELERATORS)},
        description="where the eval job runs: cpu (Hugging Face transformers on the host) or a single-VM TPU slice such as "
        "v5e-1 (the JAX engine on its chips)",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _types_as_declared(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        """Strict types, as JobCreate's (models.py): JSON `0` is not `false`, nor `"4"` 4, anywhere in the suite."""
        if isinstance(info.context, dict) and info.context.get("rljob_strict_pass"):
            return handler(data)
        return cls.model_validate(data, strict=True, context={"rljob_strict_pass": True})


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """What an eval job evaluates: the checkpoint, the model settings it is loaded (or converted) with, and the
    job it came from (None for a location)."""

    checkpoint: EvalCheckpoint
    model: ModelSpec
    parent: JobRecord | None


def _refuse(why: str) -> InvalidRequest:
    return InvalidRequest(CHECKPOINT, why)


def _under(uri: str, directory: str) -> bool:
    return uri.startswith(directory.rstrip("/") + "/") and "/../" not in uri and not uri.endswith("/..")


def _maxtext(parent: JobRecord, params: str, label: str) -> ResolvedCheckpoint:
    return ResolvedCheckpoint(EvalCheckpoint(format="maxtext", params=params, job_id=parent.id, label=label), parent.spec.model, parent)


def _step_params(parent: JobRecord, step: int, label: str) -> ResolvedCheckpoint:
    """A saved actor step: its URI from the job's checkpoint events when it reported any, else train_rl's layout
    (trainer/stages/export.py actor_params_uri) for a trainer that sends none."""
    known = parent.report.checkpoints
    layout = parent.layout
    if known:
        if step not in known:
            steps = ", ".join(str(s) for s in sorted(known)[-10:])
            raise _refuse(f"job {parent.id} saved no actor checkpoint at step {step}; its newest: {steps}")
        params = known[step]
        if not _under(params, layout.actor_checkpoints):
            raise _refuse(f"job {parent.id} reported its step-{step} checkpoint outside its run directory ({layout.actor_checkpoints})")
        return _maxtext(parent, params, label)
    return _maxtext(parent, join_uri(layout.actor_checkpoints, str(step), "model_params"), label)


def _of_job(parent: JobRecord, which: str, run_files: RunFiles | None) -> ResolvedCheckpoint:
    if parent.spec.is_eval:
        raise _refuse(f"{parent.id} is an eval job; name a training job's checkpoint")
    if which == "base":
        return ResolvedCheckpoint(EvalCheckpoint(format="huggingface", job_id=parent.id, label="base"), parent.spec.model, parent)
    if which == "export":
        if not parent.spec.export.enabled:
            raise _refuse(f"job {parent.id} has export disabled; evaluate one of its checkpoints ({parent.id}:last) instead")
        if parent.phase is not JobPhase.SUCCEEDED or EXPORT_ARTIFACT not in parent.report.artifacts:
            raise _refuse(f"job {parent.id} has no export yet (it is {parent.phase.value}); its export exists once it has SUCCEEDED")
        model = ModelSpec.model_validate({**parent.spec.model.model_dump(), "source": parent.layout.export_dir, "revision": None})
        return ResolvedCheckpoint(EvalCheckpoint(format="huggingface", job_id=parent.id, label="export"), model, parent)
    if which == "last":
        if not parent.report.checkpoints:
            raise _refuse(f"job {parent.id} has reported no actor checkpoint yet; name a saved step as {parent.id}:step-N")
        return _step_params(parent, max(parent.report.checkpoints), "last")
    if which == "best":
        best = run_files.read_best_checkpoint(parent) if run_files is not None else None
        if best is None:
            raise _refuse(
                f"job {parent.id} has no best-checkpoint record (it keeps one only with export.checkpoint=best and an "
                f"intermediate evaluation); evaluate {parent.id}:last or a step"
            )
        if not _under(best.params, parent.layout.best_checkpoints):
            raise _refuse(f"job {parent.id}'s best-checkpoint record points outside its run directory ({parent.layout.best_checkpoints})")
        return _maxtext(parent, best.params, "best")
    if step := _STEP.match(which):
        return _step_params(parent, int(step.group(1)), which)
    raise _refuse(f"{which!r} is not a checkpoint of a job: use {REFERENCE_HELP}")


def resolve_checkpoint(text: str, find_job: Callable[[str], JobRecord], run_files: RunFiles | None) -> ResolvedCheckpoint:
    """The checkpoint `text` names; InvalidRequest naming `checkpoint` and why when it names none. `find_job`
    answers a job the caller can see (JobNotFound otherwise)."""
    if reference := _REFERENCE.match(text):
        job_id, which = reference.groups()
        try:
            parent = find_job(job_id)
        except JobNotFound:
            raise _refuse(f"no job {job_id} visible to your team") from None
        return _of_job(parent, which, run_files)
    if re.fullmatch(r"rl-[a-z0-9]{12}", text):
        raise _refuse(f"name which checkpoint of {text}: {REFERENCE_HELP.replace('<job-id>', text)}")
    try:
        model = ModelSpec(source=text)
    except ValidationError as e:
        reason = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise _refuse(f"neither a job's checkpoint ({REFERENCE_HELP}) nor a Hugging Face checkpoint location: {reason}") from None
    return ResolvedCheckpoint(EvalCheckpoint(format="huggingface", label="location"), model, None)


def default_eval_name(suite: SuiteSpec, checkpoint: EvalCheckpoint) -> str:
    """eval-<suite>-<label>, cut to a DNS label."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"eval-{suite.name}-{checkpoint.label}".lower())
    return name[:DNS_LABEL_MAX_LENGTH].strip("-")


# A JobSpec's fields as EvalCreate's body names them; the rest come from the checkpoint.
_BODY_FIELDS = {"name": ("body", "name"), "output": ("body", "output"), "labels": ("body", "labels"), "priority": ("body", "priority")}


def eval_job_spec(
    parent: JobRecord | None,
    checkpoint: EvalCheckpoint,
    model: ModelSpec,
    suite: SuiteSpec,
    *,
    output: str,
    name: str,
    priority: Literal["low", "normal", "high"] = "normal",
    labels: dict[str, str] | None = None,
    baseline: str | None = None,
    accelerator: str = CPU_ACCELERATOR,
) -> JobSpec:
    """The eval job's spec: the suite and checkpoint as its `evaluation`, on `accelerator` (cpu: transformers on the
    host; a TPU slice: the JAX engine on its chips), export disabled (an eval job's own export stage converts a
    MaxText checkpoint; it publishes nothing), and the parent's team. InvalidRequest naming the body's field for a
    value JobSpec refuses."""
    if (problem := eval_accelerator_problem(accelerator)) is not None:
        raise InvalidRequest(("body", "accelerator"), problem)
    tpu = tpu_slice(accelerator)
    hardware: dict[str, object] = {"accelerator": accelerator, "rollout_engine": "jax"}
    if tpu is not None:
        hardware["chips_per_vm"] = tpu.chips_per_vm
    body = {
        "name": name,
        "team": parent.team if parent is not None else None,
        "model": model.model_dump(mode="json", exclude_unset=True),
        "hardware": hardware,
        "export": {"enabled": False},
        "output": output,
        "priority": priority,
        "labels": dict(labels or {}),
        "evaluation": EvalTask(suite=suite, checkpoint=checkpoint, baseline=baseline).model_dump(mode="json"),
    }
    try:
        return JobSpec.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        first = str(err["loc"][0]) if err["loc"] else ""
        raise InvalidRequest(_BODY_FIELDS.get(first, CHECKPOINT), err["msg"].removeprefix("Value error, ")) from None


def _check_baseline(baseline: str, suite: SuiteSpec, find_job: Callable[[str], JobRecord]) -> None:
    try:
        record = find_job(baseline)
    except JobNotFound:
        raise InvalidRequest(("body", "baseline"), f"no job {baseline} visible to your team") from None
    task = record.spec.evaluation
    if task is None:
        raise InvalidRequest(("body", "baseline"), f"{baseline} is not an eval job; a baseline is an earlier eval on the same suite")
    if task.suite.name != suite.name:
        raise InvalidRequest(
            ("body", "baseline"), f"{baseline} evaluated suite {task.suite.name}, not {suite.name}: they cannot be compared"
        )


def build_eval_spec(
    body: EvalCreate, find_job: Callable[[str], JobRecord], run_files: RunFiles | None, default_output: str | None = None
) -> JobSpec:
    """POST /v1/evals's body as the eval job's spec (the caller's team); InvalidRequest naming the field.

    `default_output` is where an eval of a checkpoint location goes without `output`: the service's own state
    directory on the embedded default (local launcher), none on a cluster, where no place is every team's to write."""
    resolved = resolve_checkpoint(body.checkpoint, find_job, run_files)
    if body.baseline is not None:
        _check_baseline(body.baseline, body.suite, find_job)
    output = body.output or (resolved.parent.spec.output if resolved.parent is not None else default_output)
    if output is None:
        raise InvalidRequest(("body", "output"), "an eval of a checkpoint location needs `output`: where its run directory goes")
    return eval_job_spec(  # its team is set from the token at submit, as every job's
        resolved.parent,
        resolved.checkpoint,
        resolved.model,
        body.suite,
        output=output,
        name=body.name or default_eval_name(body.suite, resolved.checkpoint),
        priority=body.priority,
        labels=body.labels,
        baseline=body.baseline,
        accelerator=body.accelerator,
    )
