"""One job into one MLflow run: the mapping both `rljob export mlflow` (service/cli/mlflow_export.py, from the
API's JSON) and the service's live export (service/adapters/mlflow_live.py, from its own store) write with.

The job comes in as the API shows it (JobPublic, metric points, samples and repro record as JSON), so both
writers produce the same run: params from the spec, tags for team and job id, metrics by step, evaluations
with their interval, and the samples, job and repro record as artifacts.

Idempotent by design: the run is found again by its `rljob.job_id` tag and params already there are not
re-logged (MLflow refuses to change one). Which metric points a run already holds is known two ways: the
CLI reads each key's history (exact, one request per key); the live export trusts the run's
`rljob.export_cursor` tag, the last step logged per kind of point, which every metric batch advances in the
same request, so a restarted service neither logs a point twice nor skips one. MLflow's client is passed in:
MLflow is an optional extra (`pip install 'rljob[mlflow]'`), imported only where an export runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from service.domain.records.phases import JobPhase

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# MLflow's own limits (mlflow/utils/validation.py): longer param values are refused, bigger batches too.
MAX_PARAM_VALUE_CHARS = 6000
MAX_KEY_CHARS = 250
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
TRUNCATED = "...[truncated]"
JOB_ID_TAG = "rljob.job_id"
CURSOR_TAG = "rljob.export_cursor"  # {"train": 12, "eval": 10, "evaluation": 10}: the last step logged per source
EVALUATION = "evaluation"  # the source of the values taken from the job's evaluations (JobPublic.train_evals)
JOB_ID_PATTERN = re.compile(r"^[a-z0-9-]{1,63}$")  # the service's ids are DNS-safe; checked before a search filter
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")  # what MLflow allows in metric and param names
# A finished job's run ends with its outcome; a job still going leaves the run RUNNING for the next export.
RUN_STATUS = {JobPhase.SUCCEEDED: "FINISHED", JobPhase.FAILED: "FAILED", JobPhase.CANCELLED: "KILLED"}
# MLflow retries an unreachable HTTP tracking server for minutes by default; an export says so in seconds.
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


class MlflowExportError(Exception):
    """An export MLflow would refuse, said in words; `bad_input`: the caller's to fix (not a retry)."""

    def __init__(self, message: str, *, bad_input: bool) -> None:
        super().__init__(message)
        self.bad_input = bad_input


@dataclass(frozen=True)
class MetricValue:
    key: str
    value: float
    step: int
    timestamp_ms: int
    source: str = "train"  # the point's kind (train, eval) or EVALUATION: what the export cursor counts by


@dataclass(frozen=True)
class JobExport:
    """One job as the API shows it."""

    job: dict[str, Any]  # GET /v1/jobs/{id}
    metric_points: list[dict[str, Any]]  # GET /v1/jobs/{id}/metrics: points
    samples: list[dict[str, Any]]  # GET /v1/jobs/{id}/samples?step=N for the newest few steps
    repro: dict[str, Any] | None  # GET /v1/jobs/{id}/repro, None where the service has none


@dataclass(frozen=True)
class ExportResult:
    run_id: str
    experiment_id: str
    created: bool
    metrics_logged: int
    metrics_already_there: int


def _key(raw: str) -> str:
    return _UNSAFE_KEY_CHARS.sub("_", raw)[:MAX_KEY_CHARS]


def flatten_spec(spec: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted keys for nested mappings (`grpo.learning_rate`); lists and scalars as JSON (strings as they are),
    cut to MLflow's value limit with a marker, so a long reward file never fails the export."""
    params: dict[str, str] = {}
    for name, value in spec.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            params.update(flatten_spec(value, f"{key}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        if len(text) > MAX_PARAM_VALUE_CHARS:
            text = text[: MAX_PARAM_VALUE_CHARS - len(TRUNCATED)] + TRUNCATED
        params[_key(key)] = text
    return params


def _millis(time: str) -> int:
    return int(datetime.fromisoformat(time).timestamp() * 1000)


def metric_values(points: list[dict[str, Any]], evaluation: dict[str, Any] | None, fallback_ms: int) -> list[MetricValue]:
    """Train points under their own names, eval points under `eval/<name>`, and each evaluation on the eval rows
    (JobPublic.train_evals) as `evaluation/accuracy` with its 95% interval as `evaluation/accuracy_ci95_low` and `_high`
    and its row count as `evaluation/n`, at the step it ran. An evaluation carries no time of its own: it takes the
    time of the eval point at its step, else `fallback_ms`."""
    values: list[MetricValue] = []
    eval_times = {int(p["step"]): _millis(p["time"]) for p in points if p["kind"] == "eval"}
    for point in points:
        prefix = "" if point["kind"] == "train" else f"{point['kind']}/"
        stamp = _millis(point["time"])
        for name, value in point["values"].items():
            if value is not None:
                values.append(MetricValue(_key(prefix + name), float(value), int(point["step"]), stamp, point["kind"]))
    for ev in (evaluation or {}).get("points") or []:
        stamp = eval_times.get(int(ev["step"]), fallback_ms)
        fields = {
            "accuracy": ev.get("accuracy"),
            "accuracy_ci95_low": ev["ci95"][0],
            "accuracy_ci95_high": ev["ci95"][1],
            "n": ev["n"],
            "format_accuracy": ev.get("format_accuracy"),
            "mean_reward": ev.get("mean_reward"),
        }
        values.extend(
            MetricValue(f"{EVALUATION}/{name}", float(v), int(ev["step"]), stamp, EVALUATION) for name, v in fields.items() if v is not None
        )
    return values


def run_tags(job: dict[str, Any]) -> dict[str, str]:
    return {
        JOB_ID_TAG: job["id"],
        "rljob.team": job["team"],
        "rljob.name": job["name"],
        "rljob.phase": job["phase"],
        "rljob.run_uri": job["run_uri"],
        "mlflow.runName": job["name"],
    }


def read_cursor(tags: dict[str, str]) -> dict[str, int]:
    """The run's export cursor; an unreadable or missing one counts as nothing logged (the CLI's history check,
    or MLflow refusing an identical point, keeps that from doubling anything)."""
    try:
        raw = json.loads(tags.get(CURSOR_TAG, "{}"))
        return {str(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    except (ValueError, TypeError):
        return {}


def advance(cursor: dict[str, int], values: list[MetricValue]) -> dict[str, int]:
    moved = dict(cursor)
    for v in values:
        moved[v.source] = max(moved.get(v.source, 0), v.step)
    return moved


def experiment_id(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise MlflowExportError(
                f"the MLflow experiment {name!r} is deleted: restore it or export to another experiment", bad_input=True
            )
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=artifact_location))


def find_run(client: MlflowClient, experiment: str, job_id: str) -> str | None:
    if not JOB_ID_PATTERN.match(job_id):  # never reached with the service's ids; a search filter is no place for text
        raise MlflowExportError(f"{job_id!r} is not a job id the service issues", bad_input=True)
    runs = client.search_runs([experiment], filter_string=f"tags.`{JOB_ID_TAG}` = '{job_id}'", max_results=2)
    return str(runs[0].info.run_id) if runs else None


def _logged_steps(client: MlflowClient, run_id: str, keys: set[str]) -> set[tuple[str, int]]:
    return {(key, m.step) for key in keys for m in client.get_metric_history(run_id, key)}


def _batch_cursor(cursor: dict[str, int], batch: list[MetricValue], following: MetricValue | None) -> dict[str, int]:
    """The cursor once `batch` is in: not past a step whose other keys are still in the next batch."""
    moved = advance(cursor, batch)
    if following is not None and moved.get(following.source, 0) >= following.step:
        moved[following.source] = following.step - 1
    return moved


def write_export(
    client: MlflowClient, export: JobExport, experiment: str, *, trust_cursor: bool = False, with_artifacts: bool = True
) -> ExportResult:
    """Create or find the job's run in `experiment` (an id), then log what it does not hold yet.

    trust_cursor: take the run's cursor tag for what it holds (the live export, every few seconds) instead of
    reading every key's history (the CLI, once). with_artifacts: write the samples, job and repro record."""
    from mlflow.entities import Metric, Param, RunTag

    job = export.job
    run_id = find_run(client, experiment, job["id"])
    created = run_id is None
    if run_id is None:
        run_id = str(client.create_run(experiment, tags={JOB_ID_TAG: job["id"]}).info.run_id)
    run = client.get_run(run_id)
    have_params = run.data.params
    cursor = read_cursor(run.data.tags)
    params = [Param(k, v) for k, v in flatten_spec(job["spec"]).items() if k not in have_params]
    tags = [RunTag(k, v) for k, v in run_tags(job).items()]
    for start in range(0, max(len(params), len(tags)), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[start : start + PARAMS_PER_BATCH], tags=tags[start : start + PARAMS_PER_BATCH])
    values = metric_values(export.metric_points, job.get("train_evals"), _millis(job["updated_at"]))
    if created:
        new = values
    elif trust_cursor:
        new = [v for v in values if v.step > cursor.get(v.source, 0)]
    else:
        logged = _logged_steps(client, run_id, {v.key for v in values})
        new = [v for v in values if (v.key, v.step) not in logged]
    for start in range(0, len(new), METRICS_PER_BATCH):
        batch = new[start : start + METRICS_PER_BATCH]
        following = new[start + METRICS_PER_BATCH] if start + METRICS_PER_BATCH < len(new) else None
        cursor = _batch_cursor(cursor, batch, following)
        # The cursor rides in the batch's own request: a pass cut short leaves it no further than the points.
        client.log_batch(
            run_id,
            metrics=[Metric(v.key, v.value, v.timestamp_ms, v.step) for v in batch],
            tags=[RunTag(CURSOR_TAG, json.dumps(cursor, sort_keys=True))],
        )
    final = advance(cursor, values)  # every value is in the run now (a CLI export of a run older than the cursor)
    if final != cursor:
        client.set_tag(run_id, CURSOR_TAG, json.dumps(final, sort_keys=True))
    if with_artifacts:  # replaced as a whole each time: they are the newest state, not a history
        client.log_text(run_id, json.dumps(export.samples, indent=2), "rljob/samples.json")
        client.log_text(run_id, json.dumps(job, indent=2, default=str), "rljob/job.json")
        if export.repro is not None:
            client.log_text(run_id, json.dumps(export.repro, indent=2), "rljob/repro.json")
    status = RUN_STATUS.get(JobPhase(job["phase"]))
    if status is not None:
        end_ms = _millis(job["finished_at"]) if job.get("finished_at") else None
        client.set_terminated(run_id, status=status, end_time=end_ms)
    return ExportResult(run_id, experiment, created, len(new), len(values) - len(new))
