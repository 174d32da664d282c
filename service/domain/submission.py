"""A submission before it is a job: the checks that refuse it (nothing stored), and storing it once per
Idempotency-Key, after its team's budget admitted it in the same transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from service.domain.evals.attached_evals import check_attached_eval, record_labels
from service.domain.records.errors import IdempotencyConflict, InvalidRequest
from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import Caller, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import JobLauncher, JobStore, SubmitCheck
from trainer.contract import JobSpec
from trainer.sizing.fit import FitEstimate, estimate_job_fit
from trainer.sizing.hf_model import UnsupportedCheckpoint, resolve_maxtext_model
from trainer.sizing.job_shape import read_local_model_config

from .location_policy import LocationPolicy, check_spec_locations


def check_submission(spec: JobSpec, caller: Caller, policy: LocationPolicy, launcher: JobLauncher) -> tuple[JobSpec, FitEstimate | None]:
    """The spec as stored (its team from the token) and its fit estimate; InvalidRequest naming the field
    when it may not or cannot run. A job whose estimated memory per chip exceeds its accelerator's is
    refused before any TPU is asked for (trainer/sizing/fit.py)."""
    # Validated once already (the API's body): only the team is set, from the token, as a plain JobSpec.
    spec = JobSpec.model_construct(spec.model_fields_set | {"team"}, **{**dict(spec), "team": caller.team})
    check_spec_locations(spec, caller.team, policy)  # eval.suite's files among them (JobSpec.input_locations)
    check_attached_eval(spec)
    check_checkpoint(spec)
    fit = estimate_job_fit(spec)  # None: the model's shape is unknown here, so nothing is checked
    if fit is not None and fit.verdict == "does-not-fit":
        raise InvalidRequest(("body", *(fit.refused_field or "hardware.accelerator").split(".")), fit.message)
    if isinstance(launcher, SubmitCheck):
        launcher.check_submittable(spec)
    return spec, fit


def check_checkpoint(spec: JobSpec) -> None:
    """InvalidRequest naming the field when the trainer would refuse the checkpoint before any stage: a family
    MaxText supports but rljob does not (Gemma, gpt-oss, Qwen3 MoE, ...), a config.json value MaxText does not
    implement, a model.name rljob does not run (trainer/sizing/hf_families.py). Only a config.json this process
    can read is checked here (a local directory); the trainer reads a hub or gs:// one and refuses it the same way."""
    hf = read_local_model_config(spec.model.source)
    if hf is None and not spec.model.name:
        return  # nothing to check before the trainer fetches the config
    dims = spec.model.dims.model_dump() if spec.model.dims else None
    try:
        resolve_maxtext_model(spec.model.name, dims, hf)
    except UnsupportedCheckpoint as e:
        field, reason = e.spec_problem()
        raise InvalidRequest(("body", *field.split(".")), reason) from e


def store_new_job(
    store: JobStore,
    caller: Caller,
    spec: JobSpec,
    idempotency_key: str | None,
    fit: FitEstimate | None,
    *,
    job_id: str,
    now: datetime,
    estimate: JobEstimate | None = None,
    admit: Callable[[], None] | None = None,
    wait_s: float | None = None,
) -> tuple[JobRecord, bool]:
    """(the job, True) once stored; (the job this Idempotency-Key already made, False); IdempotencyConflict
    for the key with another spec; IdempotencyKeyTaken when another transaction stored the key first.

    `admit`: the team's budget check (BudgetLedger.admission), raising to refuse. It runs after the team's admission
    lock and before the insert, in one transaction: a concurrent submission of the team, on this replica or another,
    waits for this one to commit or roll back, so its check counts this job. A repeat of a stored Idempotency-Key is
    answered with its job and never checked."""
    spec_hash = spec.content_hash()
    with store.transaction(wait_s=wait_s) as tx:  # wait_s: a request's bound (write_wait.py)
        if admit is not None:
            tx.lock_team_admissions(caller.team)
        if idempotency_key is not None:
            existing = tx.find_by_idempotency_key(caller.team, idempotency_key)
            if existing is not None:
                if existing.spec_hash != spec_hash:
                    raise IdempotencyConflict(idempotency_key, existing.id)
                return existing, False
        if admit is not None:
            admit()
        record = JobRecord(
            id=job_id,
            team=caller.team,
            name=spec.name,
            labels={**spec.labels, **record_labels(spec)},  # the service's own keys win
            submitted_by=caller.submitter,
            spec=spec,
            spec_hash=spec_hash,
            idempotency_key=idempotency_key,
            phase=JobPhase.QUEUED,
            message="accepted; waiting to be handed to the launcher",
            created_at=now,
            updated_at=now,
            phase_entered_at=now,
            fit_estimate=fit,
            estimate=estimate,
        )
        tx.insert(record)
        tx.append_event(record, "phase", {"phase": record.phase.value, "previous": None, "message": record.message}, now)
    return record, True
