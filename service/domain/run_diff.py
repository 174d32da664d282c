"""Two jobs side by side: what differs in what produced them, and how each turned out (GET /v1/jobs/diff,
`rljob diff`).

Pure: it compares what the caller already read (each job's view, metric points and repro record), so the
same inputs always give the same answer. Specs are compared as flattened dotted keys (`grpo.learning_rate`);
the name differs between any two jobs and says nothing about why their outcomes differ, so it is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from service.domain.records.job_eval_models import EvalDifference, EvalPoint
from service.domain.records.models import JobPublic, MetricPoint
from service.domain.records.phases import JobPhase
from trainer.contract import ReproRecord

IGNORED_SPEC_KEYS = frozenset({"name", "id"})
# The parts of repro.json compared besides the spec; job_id and schema_version always differ or never matter.
RECORD_SECTIONS = ("versions", "image", "seeds", "data", "model", "reward_functions", "reward_files", "hardware")


class FieldDifference(BaseModel):
    key: str = Field(description="dotted path, e.g. grpo.learning_rate or versions.jax")
    a: Any = Field(description="job a's value; null where a lacks the key")
    b: Any


class JobOutcome(BaseModel):
    job_id: str
    name: str
    phase: JobPhase
    final_reward: float | None = Field(description="reward_mean of the last train step")
    best_reward: float | None = Field(description="the highest reward_mean of any train step")
    best_reward_step: int | None
    eval_before: EvalPoint | None = Field(description="the base model's evaluation, with its 95% interval")
    eval_after: EvalPoint | None = Field(description="the trained policy's final evaluation, with its 95% interval")
    eval_difference: EvalDifference | None = Field(description="after (or the newest step) minus before, paired, with its 95% interval")
    steps: int | None = Field(description="train steps done")
    total_steps: int | None
    wall_s: float = Field(description="seconds from submit to the end (or now, for a job still active)")
    chip_hours: float = Field(description="billed chip-hours (running and cancelling)")
    cost_usd: float | None = Field(description="at list price; null: no price for this accelerator and capacity")


class JobDiff(BaseModel):
    """GET /v1/jobs/diff: job a against job b."""

    a: str
    b: str
    spec: list[FieldDifference] = Field(description="spec keys whose values differ (the name left out)")
    record: dict[str, list[FieldDifference]] = Field(
        description="differences in repro.json by section: versions, image, seeds, data, model, reward_functions, reward_files, hardware; "
        "empty when either job has no record (see missing_records)"
    )
    missing_records: list[str] = Field(description="the jobs without a readable repro.json (not written yet, or too old)")
    outcomes: list[JobOutcome] = Field(description="a, then b")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"grpo": {"learning_rate": 1e-5}, "labels": {}} -> {"grpo.learning_rate": 1e-5, "labels": {}}; lists are leaves
    except lists of objects, whose items are keyed by index (data.0.sha256)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return out
    return {prefix: value}


def differences(
    a: Mapping[str, Any], b: Mapping[str, Any], *, ignore: frozenset[str] = frozenset(), prefix: str = ""
) -> list[FieldDifference]:
    flat_a, flat_b = flatten(a, prefix), flatten(b, prefix)
    keys = sorted((set(flat_a) | set(flat_b)) - ignore)
    return [FieldDifference(key=k, a=flat_a.get(k), b=flat_b.get(k)) for k in keys if flat_a.get(k) != flat_b.get(k)]


def _record_differences(a: ReproRecord, b: ReproRecord) -> dict[str, list[FieldDifference]]:
    dump_a, dump_b = a.model_dump(mode="json"), b.model_dump(mode="json")
    return {section: differences({section: dump_a[section]}, {section: dump_b[section]}) for section in RECORD_SECTIONS}


def job_outcome(view: JobPublic, points: list[MetricPoint]) -> JobOutcome:
    rewards = [(p.step, p.values["reward_mean"]) for p in points if p.kind == "train" and "reward_mean" in p.values]
    best = max(rewards, key=lambda pair: pair[1]) if rewards else None
    usage = view.usage
    return JobOutcome(
        job_id=view.id,
        name=view.name,
        phase=view.phase,
        final_reward=rewards[-1][1] if rewards else None,
        best_reward=best[1] if best else None,
        best_reward_step=best[0] if best else None,
        eval_before=view.train_evals.before,
        eval_after=view.train_evals.after,
        eval_difference=view.train_evals.difference,
        steps=view.step,
        total_steps=view.total_steps,
        wall_s=round(sum(amount.seconds for amount in usage.phases.values()), 3),
        chip_hours=usage.billed_chip_hours,
        cost_usd=usage.cost_usd,
    )


def diff_jobs(
    a: JobPublic,
    b: JobPublic,
    *,
    points: tuple[list[MetricPoint], list[MetricPoint]],
    records: tuple[ReproRecord | None, ReproRecord | None],
) -> JobDiff:
    record_a, record_b = records
    missing = [view.id for view, record in ((a, record_a), (b, record_b)) if record is None]
    return JobDiff(
        a=a.id,
        b=b.id,
        spec=differences(a.spec.model_dump(mode="json"), b.spec.model_dump(mode="json"), ignore=IGNORED_SPEC_KEYS),
        record=_record_differences(record_a, record_b) if record_a is not None and record_b is not None else {},
        missing_records=missing,
        outcomes=[job_outcome(a, points[0]), job_outcome(b, points[1])],
    )
