"""`rljob export mlflow`'s side of the MLflow mapping: the client, and MLflow's refusals as CLI errors.

The mapping itself (params, tags, metrics, artifacts, how a second export finds the first) is
service/domain/mlflow_runs.py, shared with the service's live export so both write the same run. The job's
data comes in as the API returned it (service/cli/export_commands.py reads it over HTTP). MLflow is imported
only when an export runs: it is an optional extra (`pip install 'rljob[mlflow]'`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.domain import mlflow_runs
from service.domain.mlflow_runs import (
    MAX_PARAM_VALUE_CHARS,
    TRUNCATED,
    ExportResult,
    JobExport,
    MlflowExportError,
    flatten_spec,
    metric_values,
    run_tags,
)

from .client import CliError, CliExit

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = [
    "MAX_PARAM_VALUE_CHARS",
    "TRUNCATED",
    "ExportResult",
    "JobExport",
    "flatten_spec",
    "metric_values",
    "mlflow_client",
    "run_tags",
    "write_export",
]


def mlflow_client(tracking_uri: str) -> MlflowClient:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise CliError("`rljob export mlflow` needs MLflow's client: pip install 'rljob[mlflow]' (mlflow-skinny)", CliExit.FAILED) from e
    return MlflowClient(tracking_uri=tracking_uri)


def write_export(client: MlflowClient, export: JobExport, experiment: str, artifact_location: str | None) -> ExportResult:
    """Create or find the job's run in the experiment named `experiment` (created when missing), then log what
    it does not hold yet, checked against each key's history: exact, whatever wrote the run before."""
    try:
        experiment_id = mlflow_runs.experiment_id(client, experiment, artifact_location)
        return mlflow_runs.write_export(client, export, experiment_id)
    except MlflowExportError as e:
        raise CliError(str(e), CliExit.BAD_INPUT if e.bad_input else CliExit.FAILED) from e
