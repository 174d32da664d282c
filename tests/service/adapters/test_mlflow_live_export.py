"""The live MLflow export (RLJOB_MLFLOW_TRACKING_URI) of a live service on loopback (local launcher, the
stand-in trainer), written to a REAL MLflow tracking store (SQLite in tmp_path) and read back with MLflow's
own client: the run carries the spec's params and the team and job id tags while the job runs, later points
are appended, a restarted service logs none twice and loses none, the run ends as the job did, and a
tracking server that is not there changes nothing for the jobs and says why in the log.

MLflow's SQL store quietly drops a point identical to one it holds, so "none twice" is checked on what the
exporter sent (`metrics_logged`), not only on what MLflow kept."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from harness.live_server import served
from service.adapters.mlflow_live import MlflowLiveExport
from service.app import create_app
from service.config import Settings
from service.domain.mlflow_runs import flatten_spec, metric_values
from tests.service.service_helpers import TOKEN_A, refused_url, spec_body, wait_until
from trainer.contract import RunLayout

EXPERIMENT = "rljob"


@pytest.fixture(autouse=True)
def _fast_mlflow_http(monkeypatch: pytest.MonkeyPatch) -> None:
    # The exporter only sets these when unset: set here, they are undone after the test.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


@pytest.fixture
def tracking(tmp_path: Path) -> tuple[str, MlflowClient]:
    """A real SQLite tracking store with the experiment made beforehand, so artifacts land in tmp_path."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    client.create_experiment(EXPERIMENT, artifact_location=str(tmp_path / "mlflow-artifacts"))
    return uri, client


Serve = Callable[..., Any]


@pytest.fixture
def serve(settings_factory: Callable[..., Settings]) -> Serve:
    @contextmanager
    def run(tracking_uri: str) -> Iterator[tuple[str, FastAPI]]:
        settings = settings_factory(
            bootstrap_token=TOKEN_A,
            bootstrap_team="team-a",
            mlflow_tracking_uri=tracking_uri,
            mlflow_experiment=EXPERIMENT,
            mlflow_export_interval_s=0.2,
        )
        app = create_app(settings)
        with served(app) as url:
            yield url, app

    return run


def _exporter(app: FastAPI) -> MlflowLiveExport:
    exporter = app.state.runtime.mlflow_export
    assert isinstance(exporter, MlflowLiveExport)
    return exporter


def _api(url: str, path: str, method: str = "GET", **kw: Any) -> Any:
    response = httpx.request(method, f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN_A}"}, timeout=10, **kw)
    assert response.status_code in (200, 201), response.text
    return response.json()


def _submit(url: str, tmp_path: Path, labels: dict[str, str]) -> str:
    body = spec_body(tmp_path, labels=labels, grpo={"learning_rate": 3e-6, "num_batches": 3})
    job_id: str = _api(url, "/v1/jobs", "POST", json=body)["id"]
    return job_id


def _run(client: MlflowClient, job_id: str) -> Run | None:
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`rljob.job_id` = '{job_id}'")
    assert len(runs) <= 1, runs
    return runs[0] if runs else None


def _steps(client: MlflowClient, job_id: str, key: str) -> list[int]:
    run = _run(client, job_id)
    return [] if run is None else sorted(m.step for m in client.get_metric_history(run.info.run_id, key))


def _status(client: MlflowClient, job_id: str) -> str | None:
    run = _run(client, job_id)
    return None if run is None else run.info.status


def _series_match(url: str, client: MlflowClient, job_id: str) -> int:
    """Every value the service holds for the job is in its run, once per step; returns how many there are."""
    job = _api(url, f"/v1/jobs/{job_id}")
    values = metric_values(_api(url, f"/v1/jobs/{job_id}/metrics")["points"], job["train_evals"], 0)
    expected: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for v in values:
        expected[v.key].append((v.step, v.value))
    run = _run(client, job_id)
    assert run is not None
    logged = {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)) for key in expected}
    assert logged == {key: sorted(points) for key, points in expected.items()}
    return len(values)


def test_a_running_job_is_exported_as_it_runs_and_a_restart_logs_nothing_twice(
    serve: Serve, tracking: tuple[str, MlflowClient], tmp_path: Path
) -> None:
    uri, client = tracking
    with serve(uri) as (url, app):
        job_id = _submit(url, tmp_path, {"fake-steps": "3", "fake-gate": "true", "fake-eval-n": "40"})
        wait_until(lambda: _steps(client, job_id, "reward_mean") == [1], timeout_s=30)  # at the gate after step 1
        # The exporter counts a write once MLflow has answered it, so the store can show the point first.
        wait_until(lambda: _exporter(app).metrics_logged[job_id] > 0, timeout_s=30)
        run = _run(client, job_id)
        assert run is not None and run.info.status == "RUNNING"
        job = _api(url, f"/v1/jobs/{job_id}")
        assert run.data.params == flatten_spec(job["spec"]) and run.data.params["grpo.learning_rate"] == "3e-06"
        tags = run.data.tags
        assert (tags["rljob.job_id"], tags["rljob.team"], tags["rljob.name"]) == (job_id, "team-a", "job-one")
        first_term = _exporter(app).metrics_logged[job_id]
        assert first_term == _series_match(url, client, job_id)

    # A new service on the same state directory re-attaches the trainer, still at its gate, and takes up the run.
    with serve(uri) as (url, app):
        (tmp_path / "runs" / job_id / "gate").write_text("go")
        wait_until(lambda: _api(url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=30)
        wait_until(lambda: _status(client, job_id) == "FINISHED", timeout_s=30)
        total = _series_match(url, client, job_id)
        assert _steps(client, job_id, "reward_mean") == [1, 2, 3]
        assert _steps(client, job_id, "evaluation/accuracy") == [3]
        assert _exporter(app).metrics_logged[job_id] == total - first_term  # nothing sent twice, nothing lost

        run = _run(client, job_id)
        assert run is not None and run.data.tags["rljob.phase"] == "SUCCEEDED"
        artifacts = tmp_path / "mlflow-artifacts" / run.info.run_id / "artifacts" / "rljob"
        assert (artifacts / "samples.json").is_file() and (artifacts / "job.json").is_file()
        has_repro = httpx.get(f"{url}/v1/jobs/{job_id}/repro", headers={"Authorization": f"Bearer {TOKEN_A}"}).status_code == 200
        assert (artifacts / "repro.json").is_file() == has_repro
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_a_job_that_ended_while_no_service_ran_gets_its_last_points_and_its_end(
    serve: Serve, tracking: tuple[str, MlflowClient], tmp_path: Path
) -> None:
    uri, client = tracking
    with serve(uri) as (url, app):
        job_id = _submit(url, tmp_path, {"fake-steps": "3", "fake-gate": "true"})
        wait_until(lambda: _steps(client, job_id, "reward_mean") == [1], timeout_s=30)
        # The exporter counts a write once MLflow has answered it, so the store can show the point first.
        wait_until(lambda: _exporter(app).metrics_logged[job_id] > 0, timeout_s=30)
        first_term = _exporter(app).metrics_logged[job_id]
    events = Path(RunLayout(str(tmp_path / "runs"), job_id).events)
    (tmp_path / "runs" / job_id / "gate").write_text("go")
    wait_until(lambda: '"run_finished"' in events.read_text(), timeout_s=30)  # the trainer is done, no service up
    with serve(uri) as (url, app):
        wait_until(lambda: _status(client, job_id) == "FINISHED", timeout_s=30)
        assert _api(url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED"
        assert _exporter(app).metrics_logged[job_id] == _series_match(url, client, job_id) - first_term
        assert _steps(client, job_id, "reward_mean") == [1, 2, 3]


def test_runs_end_as_their_jobs_did(serve: Serve, tracking: tuple[str, MlflowClient], tmp_path: Path) -> None:
    uri, client = tracking
    with serve(uri) as (url, app):
        failed = _submit(url, tmp_path, {"fake-steps": "2", "fake-exit": "3"})
        cancelled = _submit(url, tmp_path, {"fake-steps": "3", "fake-gate": "true"})
        wait_until(lambda: _steps(client, cancelled, "reward_mean") == [1], timeout_s=30)
        _api(url, f"/v1/jobs/{cancelled}/cancel", "POST")
        wait_until(lambda: _status(client, failed) == "FAILED", timeout_s=30)
        wait_until(lambda: _status(client, cancelled) == "KILLED", timeout_s=30)
        assert _api(url, f"/v1/jobs/{failed}")["phase"] == "FAILED"
        assert _api(url, f"/v1/jobs/{cancelled}")["phase"] == "CANCELLED"
        assert _exporter(app).metrics_logged[failed] == _series_match(url, client, failed) > 0


def test_a_tracking_server_that_is_not_there_leaves_the_jobs_alone_and_says_why(
    serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with refused_url() as nobody, caplog.at_level(logging.WARNING, logger="service.adapters.mlflow_live"), serve(nobody) as (url, app):
        job_id = _submit(url, tmp_path, {"fake-steps": "2"})
        wait_until(lambda: _api(url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=30)
        assert [p["step"] for p in _api(url, f"/v1/jobs/{job_id}/metrics")["points"] if p["kind"] == "train"] == [1, 2]
        wait_until(lambda: _exporter(app).last_error is not None, timeout_s=30)
        assert httpx.get(f"{url}/readyz").status_code == 200
    messages = [r.getMessage() for r in caplog.records if r.name == "service.adapters.mlflow_live"]
    assert len(messages) == 1, messages  # one line for the outage, not one per pass
    assert f"MLflow export to {nobody}" in messages[0] and "Jobs are not affected" in messages[0]
    assert "unset RLJOB_MLFLOW_TRACKING_URI" in messages[0]
    assert not any(r.exc_info for r in caplog.records if r.name == "service.adapters.mlflow_live")  # a line, not a traceback
