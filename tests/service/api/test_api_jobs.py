"""The REST API against the real app and a real store (SQLite and PostgreSQL), fakes at the launcher."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, spec_body, wait_for_phase


def _locs(response) -> set[tuple[str, ...]]:
    assert response.status_code == 422, response.text
    return {tuple(str(p) for p in item["loc"]) for item in response.json()["detail"]}


def test_submit_returns_201_with_the_job(api: Api, tmp_path: Path) -> None:
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=api.as_(TOKEN_A))
    assert response.status_code == 201
    job = response.json()
    assert job["id"].startswith("rl-") and len(job["id"]) == 15 and job["id"][3:].isalnum() and job["id"].islower()
    assert job["team"] == "team-a" and job["spec"]["team"] == "team-a"
    assert job["phase"] == "LAUNCHING" and job["backend"] == "fake"
    assert job["run_uri"] == f"{tmp_path / 'runs'}/{job['id']}"
    assert api.launcher.launched == [job["id"]]


def test_validation_errors_name_every_bad_field(api: Api, tmp_path: Path) -> None:
    body = spec_body(tmp_path, name="Bad_Name", unknown_field=1)
    body["model"] = {"name": 7, "source": "relative/path/x"}
    body["grpo"] = {"num_generations": 1, "batch_size": "many"}
    body["output"] = "not-absolute"
    locs = _locs(api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A)))
    assert {
        ("body", "name"),
        ("body", "unknown_field"),
        ("body", "model", "name"),
        ("body", "model", "source"),
        ("body", "grpo", "num_generations"),
        ("body", "grpo", "batch_size"),
        ("body", "output"),
    } <= locs
    detail = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A)).json()["detail"]
    assert all(item["msg"] for item in detail) and all("input" not in item for item in detail)
    assert api.launcher.launched == []


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda b: b.update(name="x'; DROP TABLE jobs; --"), ("body", "name")),
        (lambda b: b.update(name="<script>alert(1)</script>"), ("body", "name")),
        (lambda b: b.update(labels={"team": "$(rm -rf /)"}), ("body", "labels")),
        (lambda b: b.update(output="gs://UPPER/../x"), ("body", "output")),
        (lambda b: b.update(grpo=[1, 2]), ("body", "grpo")),
        (lambda b: b.update(team="team-b"), ("body", "team")),
        (lambda b: b.pop("model"), ("body", "model")),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(api: Api, tmp_path: Path, mutate, loc) -> None:
    body = spec_body(tmp_path)
    mutate(body)
    assert loc in _locs(api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A)))


def test_malformed_requests_are_rejected_without_5xx(api: Api, tmp_path: Path) -> None:
    auth = api.as_(TOKEN_A)
    huge = spec_body(tmp_path, labels={f"k{i}": "v" * 60 for i in range(5000)})
    assert api.client.post("/v1/jobs", json=huge, headers=auth).status_code == 413
    assert api.client.post("/v1/jobs", content=b"{not json", headers={**auth, "Content-Type": "application/json"}).status_code == 422
    assert api.client.post("/v1/jobs", content=b"[]", headers={**auth, "Content-Type": "application/json"}).status_code == 422
    assert _locs(api.client.get("/v1/jobs?phase=DONE", headers=auth)) == {("query", "phase")}
    assert _locs(api.client.get("/v1/jobs?limit=0", headers=auth)) == {("query", "limit")}
    assert _locs(api.client.get("/v1/jobs?label=a=b&label=novalue", headers=auth)) == {("query", "label", "1")}
    assert api.client.get("/v1/jobs?cursor=bm90LWEtY3Vyc29y", headers=auth).status_code == 400
    assert api.client.get("/v1/jobs/../../etc/passwd", headers=auth).status_code == 404
    assert api.client.get("/v1/jobs/rl-UPPERCASE00", headers=auth).status_code == 404
    assert api.client.get("/v1/jobs/rl-000000000000%27%20OR%201=1", headers=auth).status_code == 404
    long_key = {**auth, "Idempotency-Key": "k" * 300}
    assert _locs(api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=long_key)) == {("header", "Idempotency-Key")}


def test_idempotency_key(api: Api, tmp_path: Path) -> None:
    headers = {**api.as_(TOKEN_A), "Idempotency-Key": "retry-1"}
    first = api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=headers)
    again = api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    conflict = api.client.post("/v1/jobs", json=spec_body(tmp_path, name="another"), headers=headers)
    assert conflict.status_code == 409 and "retry-1" in conflict.json()["detail"]
    assert len(api.launcher.launched) == 1


def test_list_is_newest_first_with_cursor_pagination_and_filters(api: Api, tmp_path: Path) -> None:
    ids = [api.submit(spec_body(tmp_path, name=f"job-{i}", labels={"exp": "a" if i % 2 else "b"}))["id"] for i in range(5)]
    api.submit(spec_body(tmp_path, name="job-b"), token=TOKEN_B)
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/jobs", params=params, headers=api.as_(TOKEN_A)).json()
        assert page["count"] == len(page["data"]) <= 2
        seen += [job["id"] for job in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids)) and pages == 3  # newest first, nothing twice, other team absent

    def names(**params: object) -> list[str]:
        return [j["name"] for j in api.client.get("/v1/jobs", params=params, headers=api.as_(TOKEN_A)).json()["data"]]

    assert names(label="exp=a") == ["job-3", "job-1"]
    assert names(name="job-2") == ["job-2"]
    assert names(label=["exp=a", "exp=b"]) == []
    api.launcher.emit(ids[0], ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(ids[0]), JobPhase.RUNNING)
    assert names(phase="RUNNING") == ["job-0"]
    assert names(team="team-b") == []  # not an admin: another team's jobs do not exist
    admin = api.client.get("/v1/jobs", params={"team": "team-b"}, headers=api.as_(TOKEN_ADMIN)).json()
    assert [j["name"] for j in admin["data"]] == ["job-b"]


def test_auth(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    missing = api.client.get("/v1/jobs")
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert api.client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert api.client.get("/v1/jobs", headers={"Authorization": f"Basic {TOKEN_A}"}).status_code == 401
    assert api.client.post("/v1/jobs", json=spec_body(tmp_path)).status_code == 401
    for method, path in [("GET", ""), ("GET", "/metrics"), ("GET", "/logs"), ("GET", "/events"), ("POST", "/cancel")]:
        response = api.client.request(method, f"/v1/jobs/{job_id}{path}", headers=api.as_(TOKEN_B))
        assert response.status_code == 404, (path, response.text)
    assert api.launcher.cancelled == []
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_ADMIN)).status_code == 200

    tokens = api.client.app.state.runtime.tokens  # the service's own: it forgets the token at once
    secret, record = tokens.create("team-a")
    assert api.client.get("/v1/jobs", headers=api.as_(secret)).status_code == 200
    assert tokens.revoke(record.id)
    assert api.client.get("/v1/jobs", headers=api.as_(secret)).status_code == 401
    assert all(secret not in str(t) for t in tokens.list())  # only hashes are stored


def test_cancel_is_cancelling_until_the_workload_stops(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    response = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.as_(TOKEN_A))
    assert response.status_code == 200 and response.json()["phase"] == "CANCELLING"
    assert api.launcher.cancelled == [job_id]
    assert api.phase(job_id) == "CANCELLING"
    api.launcher.emit(job_id, ObservedState.FAILED, exit_code=143)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.CANCELLED)
    again = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.as_(TOKEN_A))
    assert again.status_code == 409 and "CANCELLED" in again.json()["detail"]


def test_job_detail_metrics_and_logs(api: Api, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from trainer.contract import EvalResult, StageStarted, TrainStep

    job_id = api.submit(spec_body(tmp_path))["id"]
    api.launcher.log_lines[job_id] = ["line 1", "line 2", "line 3"]
    now = datetime.now(UTC)
    api.progress.add(StageStarted(seq=0, time=now, job_id=job_id, stage="train"))
    for step in (1, 2):
        api.progress.add(
            TrainStep(
                seq=step,
                time=now,
                job_id=job_id,
                step=step,
                total_steps=10,
                reward_mean=step / 10,
                reward_std=0.1,
                kl=0.2,
                loss=0.3,
                metrics={"lr": 1e-3},
            )
        )
    api.progress.add(EvalResult(seq=3, time=now, job_id=job_id, step=2, accuracy=0.25))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.client.app.state.runtime.jobs.ingest_progress(job_id)  # what the progress poller does
    job = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()
    assert (job["stage"], job["step"], job["total_steps"], job["progress"]) == ("train", 2, 10, 0.2)
    assert job["metrics"] == {"reward_mean": 0.2, "reward_std": 0.1, "kl": 0.2, "loss": 0.3, "eval_accuracy": 0.25}
    assert job["stage_times"]["train"]["started_at"] is not None and job["eta_s"] is not None
    points = api.client.get(f"/v1/jobs/{job_id}/metrics", headers=api.as_(TOKEN_A)).json()["points"]
    assert [(p["kind"], p["step"]) for p in points] == [("train", 1), ("train", 2), ("eval", 2)]
    assert points[1]["values"]["lr"] == 1e-3 and points[2]["values"]["accuracy"] == 0.25
    logs = api.client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 2}, headers=api.as_(TOKEN_A))
    assert logs.text == "line 2\nline 3\n" and logs.headers["content-type"].startswith("text/plain")


def test_job_detail_shows_the_run_directorys_newest_size_by_part(api: Api, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from trainer.contract import RunStorage, StorageMeasured

    job_id = api.submit(spec_body(tmp_path))["id"]
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["storage"] is None
    now = datetime.now(UTC)
    train = RunStorage.of_files([("rl/x/checkpoints/actor/3/a", 3000), ("rl/x/checkpoints/actor/2/a", 3000), ("logs/t", 7)])
    export = RunStorage.of_files([("rl/x/checkpoints/actor/3/a", 3000), ("hf/m", 500), ("logs/t", 9)])
    api.progress.add(StorageMeasured(seq=0, time=now, job_id=job_id, stage="train", storage=train))
    api.progress.add(StorageMeasured(seq=1, time=now, job_id=job_id, stage="export", storage=export))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.client.app.state.runtime.jobs.ingest_progress(job_id)
    job = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()
    assert job["storage"]["total_bytes"] == 3509 and job["storage"]["files"] == 3 and job["storage"]["complete"]
    assert {k: v for k, v in job["storage"]["parts"].items() if v} == {"checkpoints": 3000, "export": 500, "logs": 9}


def test_job_detail_splits_the_wall_time_into_goodput_parts_live(api: Api, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from trainer.contract import GoodputMeasured
    from trainer.contract.run.goodput import TRAIN_PARTS, TrainGoodput

    job_id = api.submit(spec_body(tmp_path))["id"]
    train = TrainGoodput(elapsed_s=0.02, parts=dict.fromkeys(TRAIN_PARTS, 0.0) | {"rollout": 0.01, "update": 0.005}, step=1)
    api.progress.add(GoodputMeasured(seq=0, time=datetime.now(UTC), job_id=job_id, attempt=1, train=train))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    # The trainer's 0.02 s of train_rl happen while the job is RUNNING: read only once it has run that long,
    # or the synthetic report would claim more time than the phase clock has (and "other" would be negative).
    time.sleep(0.1)
    api.client.app.state.runtime.jobs.ingest_progress(job_id)
    first = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["goodput"]
    assert first["parts"]["rollout"] == 0.01 and first["parts"]["update"] == 0.005
    assert abs(sum(first["parts"].values()) - first["wall_s"]) <= 0.05 * first["wall_s"]
    assert 0 < first["productive_fraction"] <= 1
    later = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["goodput"]
    assert later["wall_s"] > first["wall_s"]  # live: the running job's wall time grows between reads
    logged = [e for e in api.client.app.state.runtime.store.events_after(0, job_id=job_id) if e.kind == "goodput"]
    assert logged and logged[-1].data["parts"]["rollout"] == 0.01  # what SSE streams


def test_health_ready_and_prometheus_metrics(api: Api, tmp_path: Path) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"ready": True, "role": "leader"}
    api.submit(spec_body(tmp_path))
    text = api.client.get("/metrics").text
    assert "rljob_leader 1.0" in text
    assert 'rljob_jobs{phase="LAUNCHING"} 1.0' in text
    assert 'rljob_job_submissions_total{outcome="created"} 1.0' in text
    assert 'rljob_api_request_duration_seconds_count{method="POST",route="/v1/jobs",status="201"} 1.0' in text


def test_each_eval_block_answers_once_by_its_one_name(api: Api, tmp_path: Path) -> None:
    job = api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=api.as_(TOKEN_A)).json()
    shown = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()
    assert shown["train_evals"]["status"] == "none" and shown["eval_job"] is None and shown["attached_evals"] == []
    # issue 68: the names API v1 answered beside these until then (`eval`, `evaluation`, `evals`) are gone, from the
    # answer and from the schema: each block is serialised once
    schemas = api.client.get("/openapi.json").json()["components"]["schemas"]
    for removed in ("eval", "evaluation", "evals"):
        assert removed not in shown and removed not in schemas["JobPublic"]["properties"], removed
    assert "eval_job" in schemas["EvalPublic"]["properties"] and "evaluation" not in schemas["EvalPublic"]["properties"]
