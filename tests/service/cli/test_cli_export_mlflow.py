"""`rljob export mlflow` and `rljob tensorboard` against a live service on loopback (local launcher, the
stand-in trainer), written to a REAL MLflow tracking store (SQLite in tmp_path) and read back with MLflow's
own client: params equal the spec's, the tags are there, every metric history equals the service's points,
the evaluation carries its interval, and exporting again (after the job ran further) keeps one run and
logs each point once. Bad input ends in a CLI message and an exit code, never a traceback."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from mlflow.tracking import MlflowClient

from service.cli.mlflow_export import MAX_PARAM_VALUE_CHARS, TRUNCATED, flatten_spec
from tests.service.conftest import RunCli
from tests.service.service_helpers import TOKEN_A, refused_url, spec_body, wait_until


@pytest.fixture(autouse=True)
def _no_tracking_uri_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _api(live_url: str, path: str) -> Any:
    response = httpx.get(f"{live_url}{path}", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert response.status_code == 200, response.text
    return response.json()


def _submit(live_url: str, tmp_path: Path, labels: dict[str, str], **extra: object) -> str:
    body = spec_body(tmp_path, labels=labels, grpo={"learning_rate": 3e-6, "num_batches": 3}, **extra)
    response = httpx.post(f"{live_url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def _service_series(points: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for point in points:
        prefix = "" if point["kind"] == "train" else f"{point['kind']}/"
        for name, value in point["values"].items():
            if value is not None:
                series[prefix + name].append((point["step"], value))
    return series


def _mlflow_series(client: MlflowClient, run_id: str, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


def test_a_job_exports_to_a_real_mlflow_store_once_and_again_as_it_runs(run_cli: RunCli, live_url: str, tmp_path: Path) -> None:
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    export = (
        "export",
        "mlflow",
        "--tracking-uri",
        tracking_uri,
        "--experiment",
        "rl-team",
        "--artifact-location",
        str(tmp_path / "mlflow-artifacts"),
    )
    job_id = _submit(live_url, tmp_path, {"fake-steps": "3", "fake-gate": "true", "fake-eval-n": "40"})
    wait_until(lambda: _api(live_url, f"/v1/jobs/{job_id}")["step"] == 1, timeout_s=30)

    first = run_cli(*export, job_id)  # while the trainer waits at its gate after step 1
    assert first.exit_code == 0, first.output
    assert "created MLflow run" in first.output

    (tmp_path / "runs" / job_id / "gate").write_text("go")
    wait_until(lambda: _api(live_url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=30)
    second = run_cli(*export, job_id)
    assert second.exit_code == 0, second.output
    assert "updated MLflow run" in second.output

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name("rl-team")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # the second export found the first run by its rljob.job_id tag
    run = runs[0]
    job = _api(live_url, f"/v1/jobs/{job_id}")

    assert run.data.params == flatten_spec(job["spec"])
    assert run.data.params["grpo.learning_rate"] == "3e-06" and run.data.params["name"] == "job-one"
    assert run.data.params["labels.fake-steps"] == "3"
    tags = run.data.tags
    assert (tags["rljob.job_id"], tags["rljob.team"], tags["rljob.name"]) == (job_id, "team-a", "job-one")
    assert tags["rljob.phase"] == "SUCCEEDED" and run.info.status == "FINISHED"

    service = _service_series(_api(live_url, f"/v1/jobs/{job_id}/metrics")["points"])
    assert {"reward_mean", "kl", "loss", "eval/accuracy", "eval/pass_at_1"} <= service.keys()
    assert [step for step, _ in service["reward_mean"]] == [1, 2, 3]
    assert _mlflow_series(client, run.info.run_id, sorted(service)) == {k: sorted(v) for k, v in service.items()}

    (after,) = job["train_evals"]["points"]
    evaluation = _mlflow_series(
        client, run.info.run_id, ["evaluation/accuracy", "evaluation/accuracy_ci95_low", "evaluation/accuracy_ci95_high", "evaluation/n"]
    )
    assert evaluation == {
        "evaluation/accuracy": [(3, after["accuracy"])],
        "evaluation/accuracy_ci95_low": [(3, after["ci95"][0])],
        "evaluation/accuracy_ci95_high": [(3, after["ci95"][1])],
        "evaluation/n": [(3, 40.0)],
    }
    assert after["ci95"][0] < 0.5 < after["ci95"][1]
    (eval_point,) = [p for p in _api(live_url, f"/v1/jobs/{job_id}/metrics")["points"] if p["kind"] == "eval"]
    (logged,) = client.get_metric_history(run.info.run_id, "evaluation/accuracy")
    assert logged.timestamp == int(datetime.fromisoformat(eval_point["time"]).timestamp() * 1000)  # not 1970

    artifacts = tmp_path / "mlflow-artifacts" / run.info.run_id / "artifacts" / "rljob"
    samples = json.loads((artifacts / "samples.json").read_text())
    assert [page["step"] for page in samples] == [1, 2, 3] and samples[-1]["samples"]["samples"]
    assert json.loads((artifacts / "job.json").read_text())["id"] == job_id
    repro = httpx.get(f"{live_url}/v1/jobs/{job_id}/repro", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert (artifacts / "repro.json").is_file() == (repro.status_code == 200)  # a service without the record: 404

    third = run_cli(*export, job_id)  # nothing new: same run, no point twice
    assert third.exit_code == 0 and ": 0 metric points logged" in " ".join(third.output.split()), third.output
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert _mlflow_series(client, run.info.run_id, sorted(service)) == {k: sorted(v) for k, v in service.items()}


def test_a_long_spec_value_is_cut_to_mlflows_limit() -> None:
    params = flatten_spec({"reward": {"code": "x" * 10_000}, "labels": {}, "steps": [1, 2], "lr": 1e-5, "on": None})
    assert len(params["reward.code"]) == MAX_PARAM_VALUE_CHARS and params["reward.code"].endswith(TRUNCATED)
    assert params == {**params, "labels": "{}", "steps": "[1, 2]", "lr": "1e-05", "on": "null"}


def test_an_unknown_job_or_an_unreachable_tracking_server_is_a_message(run_cli: RunCli, live_url: str, tmp_path: Path) -> None:
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    unknown = run_cli("export", "mlflow", "rl-aaaaaaaaaaaa", "--tracking-uri", tracking_uri)
    assert unknown.exit_code == 1 and "no job 'rl-aaaaaaaaaaaa'" in unknown.output and "Traceback" not in unknown.output
    assert not (tmp_path / "mlflow.db").exists()  # the service is read first: a failed read writes nothing

    job_id = _submit(live_url, tmp_path, {"fake-steps": "1"})
    wait_until(lambda: _api(live_url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=30)
    with refused_url() as nobody:
        down = run_cli("export", "mlflow", job_id, "--tracking-uri", nobody)
    assert down.exit_code == 1, down.output
    assert f"cannot export {job_id} to MLflow at {nobody}" in down.output and "Traceback" not in down.output
    bad_scheme = run_cli("export", "mlflow", job_id, "--tracking-uri", "nosuch://store")
    assert bad_scheme.exit_code == 1 and "cannot export" in bad_scheme.output


def test_tensorboard_prints_where_the_trainer_writes_event_files(run_cli: RunCli, live_url: str, tmp_path: Path) -> None:
    job_id = _submit(live_url, tmp_path, {"fake-steps": "1"})
    result = run_cli("tensorboard", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{tmp_path / 'runs'}/{job_id}/rl/{job_id}/tensorboard"
    assert run_cli("tensorboard", "rl-aaaaaaaaaaaa").exit_code == 1


def test_tensorboard_sync_copies_the_event_files_and_later_only_new_bytes(run_cli: RunCli, live_url: str, tmp_path: Path) -> None:
    job_id = _submit(live_url, tmp_path, {"fake-steps": "1"})
    wait_until(lambda: _api(live_url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=30)
    logdir = tmp_path / "runs" / job_id / "rl" / job_id / "tensorboard"
    logdir.mkdir(parents=True)
    events = logdir / "events.out.tfevents.1700000000.host-0"
    events.write_bytes(b"\x00first records")
    (logdir / "notes.txt").write_text("not an event file")
    secret = tmp_path / "home" / "client.yaml"
    secret.parent.mkdir(parents=True)
    secret.write_text("token: the-admin-token")
    (logdir / "events.out.tfevents.1700000001.link").symlink_to(secret)  # what a job wrote: never followed

    local = tmp_path / "tb"
    first = run_cli("tensorboard", job_id, "--sync", str(local))
    assert first.exit_code == 0, first.output
    assert sorted(p.name for p in local.iterdir()) == [events.name]
    assert (local / events.name).read_bytes() == b"\x00first records"

    with events.open("ab") as out:  # the trainer appends while it runs: a later sync continues from the local size
        out.write(b" and more")
    again = run_cli("tensorboard", job_id, "--sync", str(local))
    assert again.exit_code == 0, again.output
    assert (local / events.name).read_bytes() == events.read_bytes()
    assert "1 event file(s) with new bytes" in again.output
    assert "0 event file(s)" in run_cli("tensorboard", job_id, "--sync", str(local)).output
