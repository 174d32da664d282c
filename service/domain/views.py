"""Builds the public view of a job (JobPublic) from its record: progress, ETA, health, failure, artifacts."""

from __future__ import annotations

from datetime import datetime

from service.domain.cost import job_clock as clocks
from service.domain.cost.estimate_actuals import estimate_actuals
from service.domain.cost.goodput import goodput_of
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, PriceTable, usage_of
from service.domain.evals.eval_view import eval_summary
from service.domain.evals.job_eval import job_eval
from service.domain.health.job_health import learning_health, train_started_at
from service.domain.health.learning_health import HealthPolicy
from service.domain.records.models import Failure, JobPublic, JobRecord, LatestMetrics
from service.domain.records.phases import JobPhase
from service.domain.records.reward_calls import RewardCalls


def _eta_s(record: JobRecord, now: datetime) -> float | None:
    """Seconds left in training at the rate seen since the train stage started."""
    if record.phase is not JobPhase.RUNNING or not record.report.step or not record.report.total_steps:
        return None
    started = train_started_at(record)
    if started is None:
        return None
    elapsed_s = (now - started).total_seconds()
    if elapsed_s <= 0:
        return None
    return max(0.0, elapsed_s / record.report.step * (record.report.total_steps - record.report.step))


DEFAULT_HEALTH_POLICY = HealthPolicy()


def to_public(
    record: JobRecord,
    now: datetime,
    health_policy: HealthPolicy = DEFAULT_HEALTH_POLICY,
    prices: PriceTable = DEFAULT_PRICES_USD_PER_CHIP_HOUR,
) -> JobPublic:
    progress = None
    if record.report.step is not None and record.report.total_steps:
        progress = min(1.0, record.report.step / record.report.total_steps)
    failure = None
    if record.phase is JobPhase.FAILED:
        failure = Failure(
            reason=record.failure_reason,
            message=record.message,
            exit_code=record.exit_code,
            failed_stage=record.report.outcome.failed_stage if record.report.outcome else None,
        )
    stage_times = dict(record.report.stage_times)
    clock = clocks.job_clock(record, now)  # read once: usage, goodput and the estimate's actuals all use it
    return JobPublic(
        id=record.id,
        name=record.name,
        team=record.team,
        submitted_by=record.submitted_by,
        labels=record.labels,
        phase=record.phase,
        message=record.message,
        stage=record.report.stage,
        step=record.report.step,
        total_steps=record.report.total_steps,
        progress=progress,
        eta_s=_eta_s(record, now),
        metrics=LatestMetrics(**record.report.latest_metrics),
        reward_calls=RewardCalls.of_metrics(record.report.latest_metrics),
        health=learning_health(record, now, health_policy),
        train_evals=job_eval(record.report.eval_points, spec=record.spec, phase=record.phase),
        stage_times=stage_times,
        artifacts=list(record.report.artifacts.values()),
        failure=failure,
        backend=record.backend,
        object_name=record.object_name,
        attempt=record.report.attempt,
        run_uri=record.layout.root,
        created_at=record.created_at,
        updated_at=record.updated_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        queue=record.queue,
        hold=record.hold,
        placement=record.placement,
        usage=usage_of(record, clock, prices),
        storage=record.report.storage,
        goodput=goodput_of(record, clock),
        trainer_events=record.report.trainer_events.model_copy(),
        fit_estimate=record.fit_estimate,
        estimate=record.estimate,
        estimate_actuals=estimate_actuals(record, prices, clock),
        eval_job=eval_summary(record),
        attached_evals=list(record.report.attached_evals),
        hangs=list(record.report.hangs),
        hung_restarts=record.report.hung_restarts,
        checkpoint_expiry=record.checkpoint_expiry,
        spec=record.spec,
    )
