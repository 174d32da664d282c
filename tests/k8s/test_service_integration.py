"""The whole service (create_app, JobService, SQLite store) with the Kubernetes launcher on kmock.

The app runs in FastAPI's TestClient on a worker thread; kmock serves on the test's event loop,
and the test plays the Job controller from that loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.adapters.k8s.launcher import K8sJobLauncher
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.ports import ProgressBatch
from trainer.contract import Stage, StageStarted, TrainStep

from .conftest import NS, make_spec

pytestmark = pytest.mark.timeout(60)
TOKEN = "k8s-integration-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class ListProgress:
    """ProgressSource fake fed by the test, standing in for the events file in the bucket."""

    def __init__(self) -> None:
        self.events: dict[str, list[Any]] = {}
        self.read: dict[str, int] = {}

    def pending(self, record: Any) -> bool:
        return len(self.events.get(record.id, [])) > self.read.get(record.id, 0)

    def read_new(self, record: Any) -> ProgressBatch:
        events = list(self.events.get(record.id, []))
        return ProgressBatch(record.id, events[self.read.get(record.id, 0) :], end=len(events))

    def commit(self, batch: ProgressBatch) -> None:
        self.read[batch.job_id] = max(self.read.get(batch.job_id, 0), batch.end)

    def forget(self, job_id: str) -> None:
        pass


class NoProgress:
    """ProgressSource fake: the trainer's events file lives in a bucket these tests do not have."""

    def pending(self, record: Any) -> bool:
        return False

    def read_new(self, record: Any) -> ProgressBatch:
        return ProgressBatch(record.id)

    def commit(self, batch: ProgressBatch) -> None:
        pass

    def forget(self, job_id: str) -> None:
        pass


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,
        environment="dev",
        state_dir=tmp_path,
        bootstrap_token=TOKEN,
        bootstrap_team="ml",
        progress_poll_interval_s=0.1,
        active_jobs_reconcile_interval_s=0.5,
    )


def _wait(check: Callable[[], Any], what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _phase(client: TestClient, job_id: str) -> str:
    return client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["phase"].lower()


async def test_service_restarted_mid_job_reconciles_and_finishes_once(cluster, make_launcher, tmp_path):
    loop = asyncio.get_running_loop()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=10)

    def first_life() -> str:
        app = create_app(_settings(tmp_path), launcher=make_launcher(), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            body = make_spec().model_dump(mode="json")
            resp = client.post("/v1/jobs", json=body, headers=AUTH)
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            _wait(lambda: cluster.job(job_id), "the Job in the cluster")
            pod = on_loop(cluster.create_pod(job_id=job_id))
            on_loop(cluster.run_pod(pod))
            _wait(lambda: _phase(client, job_id) == "running", "phase running")
            job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
            assert (job["backend"], job["object_name"]) == ("kubernetes", f"job/{job_id}")
        return job_id  # leaving the block stops the service (launcher watch included)

    job_id = await asyncio.to_thread(first_life)

    # While the service is down the trainer finishes and the Job completes.
    await cluster.patch_job(
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T01:00:00Z"}]}},
        name=job_id,
    )

    def second_life() -> None:
        app = create_app(_settings(tmp_path), launcher=make_launcher(), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: _phase(client, job_id) == "succeeded", "phase succeeded after restart")
            time.sleep(1.2)  # two reconcile periods: nothing may move it again
            assert _phase(client, job_id) == "succeeded"

    await asyncio.to_thread(second_life)

    job_posts = [r for r in cluster.server if r.method == "POST" and r.resource and r.resource.plural == "jobs"]
    assert len(job_posts) == 1, "the restarted service must re-attach, not relaunch"
    store = SqlJobStore(_settings(tmp_path).effective_database_url)
    try:
        phases = [e.data["phase"].lower() for e in store.events_after(0, job_id=job_id) if e.kind == "phase"]
    finally:
        store.close()
    assert phases.count("succeeded") == 1 and phases[-1] == "succeeded"
    assert "failed" not in phases


async def test_cancel_through_the_api_deletes_the_job(cluster, make_launcher, tmp_path):
    def scenario() -> None:
        app = create_app(_settings(tmp_path), launcher=make_launcher(), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            job_id = client.post("/v1/jobs", json=make_spec().model_dump(mode="json"), headers=AUTH).json()["id"]
            _wait(lambda: cluster.job(job_id), "the Job in the cluster")
            assert client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).status_code == 200
            _wait(lambda: _phase(client, job_id) == "cancelled", "phase cancelled")
            assert cluster.job(job_id) is None
            spec_cm = ("v1/configmaps", NS, f"{job_id}-spec")
            assert spec_cm not in cluster.server.objects or cluster.server.objects[spec_cm].deleted

    await asyncio.to_thread(scenario)


async def test_phase_stage_and_progress_are_mirrored_onto_the_job(cluster, make_launcher, tmp_path):
    loop = asyncio.get_running_loop()
    progress = ListProgress()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=10)

    def meta(job_id: str) -> dict[str, Any]:
        return (cluster.job(job_id) or {}).get("metadata") or {}

    def scenario() -> None:
        launcher = make_launcher()
        assert isinstance(launcher, K8sJobLauncher)  # the real adapter, not a fake with the capability
        app = create_app(_settings(tmp_path), launcher=launcher, progress=progress)
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            job_id = client.post("/v1/jobs", json=make_spec().model_dump(mode="json"), headers=AUTH).json()["id"]
            _wait(lambda: cluster.job(job_id), "the Job in the cluster")
            pod = on_loop(cluster.create_pod(job_id=job_id))
            on_loop(cluster.run_pod(pod))
            _wait(lambda: _phase(client, job_id) == "running", "phase running")
            _wait(lambda: meta(job_id).get("labels", {}).get("rljob.dev/phase") == "running", "phase label running")

            now = datetime.now(UTC)
            progress.events[job_id] = [
                StageStarted(seq=0, time=now, job_id=job_id, stage=Stage.TRAIN),
                TrainStep(seq=1, time=now, job_id=job_id, step=7, total_steps=50, reward_mean=0.4),
            ]
            _wait(lambda: meta(job_id).get("annotations", {}).get("rljob.dev/progress") == "7/50", "progress annotation")
            annotations = meta(job_id)["annotations"]
            assert annotations["rljob.dev/stage"] == "train"
            assert meta(job_id)["labels"]["rljob.dev/phase"] == "running"
            assert annotations["rljob.dev/spec-hash"]  # merged into what the launcher created, not replaced
            assert client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["step"] == 7

    await asyncio.to_thread(scenario)
    patches = [r for r in cluster.server if r.method == "PATCH" and r.resource and r.resource.plural == "jobs"]
    assert 1 <= len(patches) <= 4, "mirroring is throttled to phase/stage changes, not one write per event"
