"""One job into one MLflow run: what `rljob export mlflow` writes, and how a second export finds the first.

The job's data comes in as the API returned it (service/cli/export_commands.py reads it over HTTP); this
module maps it to MLflow's params, tags, metrics and artifacts and writes them with MLflow's own client.

Idempotent by design: the run is found again by its `rljob.job_id` tag, params already there are not
re-logged (MLflow refuses to change one), and a metric point is logged only when its key has no point at
that step yet, so exporting a job twice, or again after it ran further, leaves one run and no duplicates.
MLflow is imported only when an export runs: it is an optional extra (`pip install 'rljob[mlflow]'`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from service.domain.phases import JobPhase

from .client import CliError, CliExit

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# MLflow's own limits (mlflow/utils/validation.py): longer param values are refused, bigger batches too.
MAX_PARAM_VALUE_CHARS = 6000
MAX_KEY_CHARS = 250
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
TRUNCATED = "...[truncated]"
JOB_ID_TAG = "rljob.job_id"
JOB_ID_PATTERN = re.compile(r"^[a-z0-9-]{1,63}$")  # the service's ids are DNS-safe; checked before a search filter
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")  # what MLflow allows in metric and param names
# A finished job's run ends with its outcome; a job still going leaves the run RUNNING for the next export.
RUN_STATUS = {JobPhase.SUCCEEDED: "FINISHED", JobPhase.FAILED: "FAILED", JobPhase.CANCELLED: "KILLED"}


@dataclass(frozen=True)
class MetricValue:
    key: str
    value: float
    step: int
    timestamp_ms: int


@dataclass(frozen=True)
class JobExport:
    """What the service said about one job, as its API returned it."""

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
    (JobPublic.eval) as `evaluation/accuracy` with its 95% interval as `evaluation/accuracy_ci95_low` and `_high`
    and its row count as `evaluation/n`, at the step it ran. An evaluation carries no time of its own: it takes the
    time of the eval point at its step, else `fallback_ms`."""
    values: list[MetricValue] = []
    eval_times = {int(p["step"]): _millis(p["time"]) for p in points if p["kind"] == "eval"}
    for point in points:
        prefix = "" if point["kind"] == "train" else f"{point['kind']}/"
        stamp = _millis(point["time"])
        for name, value in point["values"].items():
            if value is not None:
                values.append(MetricValue(_key(prefix + name), float(value), int(point["step"]), stamp))
    for ev in (evaluation or {}).get("points") or []:
        stamp = eval_times.get(int(ev["step"]), fallback_ms)
        fields = {"accuracy": ev.get("accuracy"), "accuracy_ci95_low": ev["ci95"][0], "accuracy_ci95_high": ev["ci95"][1],
                  "n": ev["n"], "format_accuracy": ev.get("format_accuracy"), "mean_reward": ev.get("mean_reward")}  # fmt: skip
        values.extend(MetricValue(f"evaluation/{name}", float(v), int(ev["step"]), stamp) for name, v in fields.items() if v is not None)
    return values


def run_tags(job: dict[str, Any]) -> dict[str, str]:
    return {JOB_ID_TAG: job["id"], "rljob.team": job["team"], "rljob.name": job["name"], "rljob.phase": job["phase"],
            "rljob.run_uri": job["run_uri"], "mlflow.runName": job["name"]}  # fmt: skip


def mlflow_client(tracking_uri: str) -> MlflowClient:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise CliError("`rljob export mlflow` needs MLflow's client: pip install 'rljob[mlflow]' (mlflow-skinny)",
                       CliExit.FAILED) from e  # fmt: skip
    return MlflowClient(tracking_uri=tracking_uri)


def _experiment_id(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise CliError(f"the MLflow experiment {name!r} is deleted: restore it or pass another --experiment", CliExit.BAD_INPUT)
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=artifact_location))


def _find_run(client: MlflowClient, experiment_id: str, job_id: str) -> str | None:
    if not JOB_ID_PATTERN.match(job_id):  # never reached with the service's ids; a search filter is no place for text
        raise CliError(f"{job_id!r} is not a job id the service issues", CliExit.BAD_INPUT)
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{JOB_ID_TAG}` = '{job_id}'", max_results=2)
    return str(runs[0].info.run_id) if runs else None


def _logged_steps(client: MlflowClient, run_id: str, keys: set[str]) -> set[tuple[str, int]]:
    return {(key, m.step) for key in keys for m in client.get_metric_history(run_id, key)}


def write_export(client: MlflowClient, export: JobExport, experiment: str, artifact_location: str | None) -> ExportResult:
    """Create or find the job's run, then log what it does not hold yet."""
    from mlflow.entities import Metric, Param, RunTag

    job = export.job
    experiment_id = _experiment_id(client, experiment, artifact_location)
    run_id = _find_run(client, experiment_id, job["id"])
    created = run_id is None
    if run_id is None:
        run_id = str(client.create_run(experiment_id, tags={JOB_ID_TAG: job["id"]}).info.run_id)
    run = client.get_run(run_id)
    have_params = run.data.params
    params = [Param(k, v) for k, v in flatten_spec(job["spec"]).items() if k not in have_params]
    tags = [RunTag(k, v) for k, v in run_tags(job).items()]
    for start in range(0, max(len(params), len(tags)), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[start : start + PARAMS_PER_BATCH], tags=tags[start : start + PARAMS_PER_BATCH])
    values = metric_values(export.metric_points, job.get("eval"), _millis(job["updated_at"]))
    logged = _logged_steps(client, run_id, {v.key for v in values}) if not created else set()
    new = [Metric(v.key, v.value, v.timestamp_ms, v.step) for v in values if (v.key, v.step) not in logged]
    for start in range(0, len(new), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=new[start : start + METRICS_PER_BATCH])
    # Artifacts are replaced as a whole each time: they are the newest state, not a history.
    client.log_text(run_id, json.dumps(export.samples, indent=2), "rljob/samples.json")
    client.log_text(run_id, json.dumps(job, indent=2, default=str), "rljob/job.json")
    if export.repro is not None:
        client.log_text(run_id, json.dumps(export.repro, indent=2), "rljob/repro.json")
    status = RUN_STATUS.get(JobPhase(job["phase"]))
    if status is not None:
        end_ms = _millis(job["finished_at"]) if job.get("finished_at") else None
        client.set_terminated(run_id, status=status, end_time=end_ms)
    return ExportResult(run_id, experiment_id, created, len(new), len(values) - len(new))
