"""Evaluations attached to a training job (JobSpec.eval): which eval jobs it should have, and how each is made.

A training job with `eval` set gets ordinary eval jobs (eval_jobs.py), each submitted once through
JobService.submit under the job's team with the Idempotency-Key `attached-eval:<job id>:<label>`:
- `base` (with eval.base): the job's own model.source, as soon as the job is stored, so it runs beside training;
  not made any more for a job that ended with no checkpoint (nothing would be compared with it);
- `step-N` for each actor checkpoint the trainer reported (RunReport.checkpoints: CheckpointSaved events, sent only
  once Orbax finalized the save) whose step is a multiple of eval.every_n_checkpoints x grpo.checkpoint_period:
  the n-th, 2n-th, ... periodic checkpoint. A checkpoint saved off that grid (the one a stop signal writes, the last
  one when the steps are not a multiple of the period) is not evaluated; the export stands for the last;
- `export` (with eval.export) once the job has SUCCEEDED with its export.
A job that FAILED or was CANCELLED keeps the eval jobs already made (they are ordinary jobs: cancel them if you
like), and still gets eval jobs for the checkpoints it reported, which exist until Orbax's retention deletes them
(grpo.keep_last_checkpoints; docs/service.md says when that can happen first); it gets no export eval.

Who creates them: attached_eval_reconciler.py, on the leader only, from what is stored (the job's record and its
eval jobs, found by the `rljob.dev/eval-of` label), never from an in-memory trigger, so a restarted service makes
whatever is missing. It also keeps the job's view of them (RunReport.attached_evals -> JobPublic.attached_evals): each eval
job's phase, primary scores with their intervals, and the paired difference from the base eval once both SUCCEEDED.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.domain.records.attached_eval_models import AttachedEvalPublic
from service.domain.records.errors import InvalidRequest
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from trainer.contract import JobSpec

from .eval_jobs import EXPORT_ARTIFACT, eval_job_spec, resolve_checkpoint

KEY_PREFIX = "attached-eval:"
# Labels the service puts on stored records (not the spec's: its keys are DNS labels, and these say what rljob made).
EVAL_OF_LABEL = "rljob.dev/eval-of"  # an eval job of a training job's checkpoint: that job's id
ATTACHED_LABEL = "rljob.dev/attached-evals"  # a training job with JobSpec.eval set
ATTACHED_VALUE = "true"
_STEP = re.compile(r"^step-(\d{1,9})\Z")


def idempotency_key(parent_id: str, label: str) -> str:
    return f"{KEY_PREFIX}{parent_id}:{label}"


def attached_label(record: JobRecord) -> str | None:
    """The label of an eval job this service attached to `parent` (None: not one)."""
    key = record.idempotency_key or ""
    parent = record.spec.evaluation.checkpoint.job_id if record.spec.evaluation else None
    prefix = idempotency_key(parent or "", "")
    return key[len(prefix) :] if parent and key.startswith(prefix) else None


def record_labels(spec: JobSpec) -> dict[str, str]:
    """The service's own labels for a new job's record: which job an eval job evaluates, and that a training job
    has evaluations attached (a restarted service finds those jobs by it)."""
    labels: dict[str, str] = {}
    if spec.evaluation is not None and spec.evaluation.checkpoint.job_id:
        labels[EVAL_OF_LABEL] = spec.evaluation.checkpoint.job_id
    if spec.eval is not None:
        labels[ATTACHED_LABEL] = ATTACHED_VALUE
    return labels


def check_attached_eval(spec: JobSpec) -> None:
    """InvalidRequest naming the field when the evaluations asked for could never be made."""
    attached = spec.eval
    if attached is None:
        return
    g = spec.grpo
    total = g.num_batches * g.num_iterations
    if g.checkpoint_period > total:
        raise InvalidRequest(
            ("body", "grpo", "checkpoint_period"),
            f"eval evaluates the job's periodic checkpoints, and with checkpoint_period {g.checkpoint_period} above the "
            f"job's {total} train steps (num_batches x num_iterations) there is none: lower checkpoint_period",
        )
    if attached.export and not spec.export.enabled:
        raise InvalidRequest(
            ("body", "eval", "export"), "eval.export evaluates the job's export, and export.enabled is false: set eval.export to false"
        )


@dataclass(frozen=True)
class WantedEval:
    label: str  # base | step-N | export
    step: int | None = None


def checkpoint_grid(spec: JobSpec) -> int:
    """Steps between evaluated checkpoints: every n-th periodic checkpoint."""
    return (spec.eval.every_n_checkpoints if spec.eval else 1) * spec.grpo.checkpoint_period


def wanted_evals(record: JobRecord) -> list[WantedEval]:
    """The eval jobs `record` should have now, base first, then steps ascending, then the export."""
    attached = record.spec.eval
    if attached is None or record.spec.is_eval:
        return []
    grid = checkpoint_grid(record.spec)
    steps = sorted(step for step in record.report.checkpoints if step > 0 and step % grid == 0)
    succeeded = record.phase is JobPhase.SUCCEEDED
    wanted = []
    if attached.base and (not record.phase.is_terminal() or steps or succeeded):
        wanted.append(WantedEval("base"))
    wanted += [WantedEval(f"step-{step}", step) for step in steps]
    if attached.export and succeeded and record.spec.export.enabled and EXPORT_ARTIFACT in record.report.artifacts:
        wanted.append(WantedEval("export"))
    return wanted


def label_order(label: str) -> tuple[int, int]:
    step = _STEP.match(label)
    if label == "base":
        return (0, 0)
    return (1, int(step.group(1))) if step else (2, 0)


def attached_eval_name(parent: JobRecord, label: str) -> str:
    """<job name>-eval-<label>, cut to a DNS label."""
    return f"{parent.name}-eval-{label}"[:63].rstrip("-")


def attached_eval_spec(parent: JobRecord, wanted: WantedEval, base_eval_id: str | None) -> JobSpec:
    """The eval job's spec: the parent's suite on that checkpoint, in the parent's output, with its priority and
    labels; compared with the base eval (its baseline) when there is one. InvalidRequest when it cannot be made."""
    attached = parent.spec.eval
    if attached is None:
        raise ValueError(f"{parent.id} has no evaluations attached")
    resolved = resolve_checkpoint(f"{parent.id}:{wanted.label}", lambda _job_id: parent, None)
    return eval_job_spec(
        parent,
        resolved.checkpoint,
        resolved.model,
        attached.suite,
        output=parent.spec.output,
        name=attached_eval_name(parent, wanted.label),
        priority=parent.spec.priority,
        labels=dict(parent.spec.labels),
        baseline=base_eval_id if wanted.label != "base" else None,
        accelerator=attached.accelerator,
    )


def eval_entry(label: str, child: JobRecord | None, *, note: str | None = None) -> AttachedEvalPublic:
    """One eval's line in the job's view, without the comparison (the reconciler adds it)."""
    step = _STEP.match(label)
    entry = AttachedEvalPublic(label=label, step=int(step.group(1)) if step else None, note=note)
    if child is None:
        return entry
    report = child.report.eval_report
    scores = report.functions.get(report.primary) if report is not None else None
    return entry.model_copy(
        update={
            "eval_id": child.id,
            "phase": child.phase,
            "suite_version": child.report.suite_version,
            "function": report.primary if report is not None else None,
            "scores": scores,
        }
    )


def settled(record: JobRecord) -> bool:
    """Nothing about the job's evaluations can change any more: it has ended, every eval it wants exists and has
    ended, and each finished one has its comparison (or says why not)."""
    if not record.phase.is_terminal():
        return False
    shown = {e.label: e for e in record.report.attached_evals}
    if any(w.label not in shown or shown[w.label].eval_id is None for w in wanted_evals(record)):
        return False
    base = shown.get("base")
    for entry in shown.values():
        if entry.phase is None or not entry.phase.is_terminal():
            return False
        compared = entry.vs_base is not None or entry.note is not None
        if (
            entry.label != "base"
            and entry.phase is JobPhase.SUCCEEDED
            and base is not None
            and base.phase is JobPhase.SUCCEEDED
            and not compared
        ):
            return False
    return True
