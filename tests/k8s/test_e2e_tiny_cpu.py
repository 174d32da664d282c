"""The whole Kubernetes path with the real trainer: the service (create_app + the Kubernetes launcher) on
kmock, the emulated Job controller and kubelet (harness/podrun) running the trainer image's command on the
tiny CPU model (examples/tiny-cpu.yaml, `hardware.accelerator: cpu`).

Where the run lives: directories of this machine, the "node directories", hold the tiny model, data and
every run's output. The launcher mounts each into trainer pods as a hostPath at the same path
(RLJOB_K8S_HOST_PATHS), which is what the spec's local paths need on a single-node dev cluster; the
service, running in this test process on the node itself, reads the same directories for events,
artifacts and stage logs, as a service pod with the same hostPaths would.

Slow (MaxText on CPU, minutes per test): run with
    .venv/bin/python -m pytest tests/k8s/test_e2e_tiny_cpu.py -m slow -v
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.manifests import service_accounts
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase, can_reach
from trainer.contract import RunLayout, Stage, parse_event

from .conftest import NS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[2]
TOKEN = "k8s-e2e-token-0123456789abcdef0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RUN_TIMEOUT_S = float(os.environ.get("RLJOB_TINY_TIMEOUT_S", "1800"))


@pytest.fixture(scope="module")
def node_dirs(tiny_dir: Path, tiny_output: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The node's directories, each mounted into trainer pods at its own path: the worker's tiny model
    (tests/conftest.py), the runs' output (shared with the worker's other tiny runs, and so its conversion
    cache) and this module's own files."""
    return {"tiny": tiny_dir, "output": tiny_output, "own": tmp_path_factory.mktemp("node-dir")}


def tiny_spec(tiny_dir: Path, output: Path, model: Path | None = None) -> dict[str, Any]:
    text = (REPO / "examples" / "tiny-cpu.yaml").read_text()
    text = text.replace("${RLJOB_TINY_DIR}", str(tiny_dir)).replace("${RLJOB_OUTPUT}", str(output))
    body = yaml.safe_load(text)
    assert body["hardware"]["accelerator"] == "cpu"
    if model is not None:
        body["model"]["source"] = str(model)
    # Evaluations and the export are the local runs' subject (tests/service/test_tiny_job_integration.py,
    # tests/trainer/test_slow_pipeline.py); the pods run what the Kubernetes path needs: the trainer's stages
    # in a pod, stopped and resumed, to the job's end.
    body["grpo"]["num_test_batches"] = 0
    body["export"] = {"enabled": False}
    return body


def service_settings(tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,
        environment="dev",
        state_dir=tmp_path / "state",
        bootstrap_token=TOKEN,
        bootstrap_team="ml",
        progress_poll_interval_s=0.5,
        active_jobs_reconcile_interval_s=2.0,
    )


def launcher_settings(*node_dirs: Path) -> dict[str, Any]:
    # One of this machine's cores stays free for the service and the emulator; 8Gi is plenty for the tiny model.
    return {
        "host_paths": [str(d) for d in node_dirs],
        "cpu_job_cpu": "1",
        "cpu_job_memory": "8Gi",
        "termination_grace_s": 120,
        "backoff_limit": 1,
    }


def wait_for_phase(
    client: TestClient, job_id: str, target: JobPhase, timeout_s: float, until: Callable[[dict[str, Any]], bool] | None = None
) -> dict[str, Any]:
    """Poll the job until `target` (and `until`), asserting that every phase seen on the way is a legal move."""
    deadline, seen = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        phase = JobPhase(job["phase"])
        if seen and phase is not seen[-1]:
            assert can_reach(seen[-1], phase), f"illegal phase change {seen[-1]} -> {phase} (saw {seen})"
        if not seen or phase is not seen[-1]:
            seen.append(phase)
        if phase is target and (until is None or until(job)):
            return job
        if phase.is_terminal() and phase is not target:
            tail = client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 60}, headers=AUTH).text
            raise AssertionError(f"job ended {phase}, wanted {target}; saw {seen}; {job['message']}\n{tail}")
        time.sleep(0.5)
    raise AssertionError(f"phase is {seen[-1] if seen else '?'} after {timeout_s}s, wanted {target}; saw {seen}")


def run_events(body: dict[str, Any], job_id: str) -> list[Any]:
    path = Path(RunLayout(body["output"], job_id).events)
    return [parse_event(line) for line in path.read_text().splitlines() if line.strip()]


def has_checkpoint(body: dict[str, Any], job_id: str) -> bool:
    root = Path(RunLayout(body["output"], job_id).actor_checkpoints)
    return root.is_dir() and any(d.name.isdigit() and (d / "model_params").is_dir() for d in root.iterdir())


async def _with_service(
    cluster: Any,
    make_launcher: Any,
    tmp_path: Path,
    node_dirs: dict[str, Path],
    scenario: Callable[[TestClient, Callable[[Any], Any], EmulatedCluster], Any],
) -> Any:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    async with EmulatedCluster(cluster.server, tmp_path / "node", install_defaults=False) as emu:
        for sa in service_accounts():
            await emu.create(sa)

        def run() -> Any:
            app = create_app(service_settings(tmp_path), launcher=make_launcher(**launcher_settings(*node_dirs.values())))
            with TestClient(app) as client:
                deadline = time.monotonic() + 30
                while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                    time.sleep(0.1)
                return scenario(client, on_loop, emu)

        return await asyncio.to_thread(run)


def _submit(client: TestClient, body: dict[str, Any]) -> str:
    resp = client.post("/v1/jobs", json=body, headers=AUTH)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _pods(on_loop: Callable[[Any], Any], emu: EmulatedCluster, job_id: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        return emu.pods(NS, **{"job-name": job_id})

    return on_loop(read())


async def test_an_evicted_trainer_resumes_from_its_checkpoint_and_the_job_succeeds_with_artifacts_and_logs(
    cluster, make_launcher, tmp_path, node_dirs
):
    """One trainer run for both stories (each costs minutes of MaxText on CPU): evicted mid-training, the Job's
    next pod resumes without converting again, and the job then ends as a clean success would, with its
    artifacts, its pod's log through the API and the Job's success conditions."""
    body = tiny_spec(node_dirs["tiny"], node_dirs["output"])

    def scenario(client: TestClient, on_loop: Any, emu: EmulatedCluster) -> str:
        job_id = _submit(client, body)
        wait_for_phase(client, job_id, JobPhase.RUNNING, RUN_TIMEOUT_S, until=lambda j: has_checkpoint(body, job_id))
        (running,) = [p for p in _pods(on_loop, emu, job_id) if p["status"]["phase"] == "Running"]
        assert not (Path(RunLayout(body["output"], job_id).stage_marker(Stage.TRAIN))).exists(), (
            "training finished before the eviction; nothing would be resumed"
        )
        on_loop(emu.evict(NS, running["metadata"]["name"], reason="TerminationByKubelet", message="Spot VM preempted"))
        job = wait_for_phase(client, job_id, JobPhase.SUCCEEDED, RUN_TIMEOUT_S)
        pods = _pods(on_loop, emu, job_id)
        assert running["metadata"]["name"] not in {p["metadata"]["name"] for p in pods}
        assert job["backend"] == "kubernetes" and job["object_name"] == f"job/{job_id}"
        assert job["step"] == job["total_steps"] == body["grpo"]["num_batches"]
        assert {"convert", "train", "export"} <= set(job["stage_times"]) and job["metrics"]["reward_mean"] is not None
        artifacts = {a["name"]: a["uri"] for a in job["artifacts"]}
        assert artifacts.get("train.checkpoint", "").startswith(str(node_dirs["output"])), artifacts
        # The current pod's log, through the pod log endpoint: the second attempt's, to its end (its train steps
        # depend on how far the first got before the eviction landed).
        logs = client.get(f"/v1/jobs/{job_id}/logs", headers=AUTH).text
        assert '"type":"run_started","attempt":2' in logs and '"type":"run_finished","ok":true' in logs, logs[-2000:]
        return job_id

    job_id = await _with_service(cluster, make_launcher, tmp_path, node_dirs, scenario)
    manifest = json.loads(Path(RunLayout(body["output"], job_id).manifest).read_text())
    assert manifest["artifacts"] and Path(RunLayout(body["output"], job_id).stage_marker(Stage.TRAIN)).exists()
    events = run_events(body, job_id)
    assert [e.attempt for e in events if e.type == "run_started"] == [1, 2]
    second = events[[i for i, e in enumerate(events) if e.type == "run_started"][1] :]
    # The first attempt converted, or took the worker's cached conversion; the second did neither: it found
    # the first attempt's convert marker.
    assert not any(e.type == "stage_started" and e.stage is Stage.CONVERT for e in second)
    assert any(
        e.type == "stage_finished" and e.stage is Stage.CONVERT and e.skipped and "earlier attempt" in (e.reason or "") for e in second
    )
    train = json.loads(Path(RunLayout(body["output"], job_id).stage_marker(Stage.TRAIN)).read_text())
    assert train["outputs"]["resumed_from_step"] >= 1
    kjob = cluster.job(job_id)
    assert kjob["status"]["failed"] == 0 and kjob["status"]["succeeded"] == 1  # the disruption did not count
    conds = {c["type"] for c in kjob["status"]["conditions"] if c["status"] == "True"}
    assert {"SuccessCriteriaMet", "Complete"} <= conds
    store = SqlJobStore(service_settings(tmp_path).effective_database_url)
    try:
        messages = [e.data for e in store.events_after(0, job_id=job_id) if e.kind == "message"]
    finally:
        store.close()
    assert any(m.get("reason") == "TerminationByKubelet" for m in messages), messages


async def test_cancel_deletes_the_job_and_stops_the_trainer(cluster, make_launcher, tmp_path, node_dirs):
    body = tiny_spec(node_dirs["tiny"], node_dirs["output"])

    def scenario(client: TestClient, on_loop: Any, emu: EmulatedCluster) -> None:
        job_id = _submit(client, body)
        wait_for_phase(client, job_id, JobPhase.RUNNING, RUN_TIMEOUT_S, until=lambda j: j["stage"] is not None)
        (pod,) = _pods(on_loop, emu, job_id)
        runner = emu.runner(NS, pod["metadata"]["name"])
        assert client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).status_code == 200
        wait_for_phase(client, job_id, JobPhase.CANCELLED, 300)
        assert cluster.job(job_id) is None
        deadline = time.monotonic() + 180
        while (_pods(on_loop, emu, job_id) or not runner.finished()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _pods(on_loop, emu, job_id) and runner.finished(), "the trainer pod outlived its cancelled Job"

    await _with_service(cluster, make_launcher, tmp_path, node_dirs, scenario)


async def test_a_non_retryable_exit_fails_at_once_without_a_retry(cluster, make_launcher, tmp_path, node_dirs):
    bad_model = node_dirs["own"] / "bad-model"
    if not bad_model.exists():
        shutil.copytree(node_dirs["tiny"] / "model", bad_model)
        config = json.loads((bad_model / "config.json").read_text())
        config["model_type"] = "gpt2"  # not a family rljob runs: the trainer refuses it with exit 65 before any stage
        # Submit refuses such a config.json itself when it can read it, but it reads only a regular file (not a
        # link): the link stands for a checkpoint submit cannot read (a hub id, gs://), which the trainer reads.
        (bad_model / "config.json").unlink()
        (bad_model / "config.gpt2.json").write_text(json.dumps(config))
        (bad_model / "config.json").symlink_to("config.gpt2.json")
    body = tiny_spec(node_dirs["tiny"], node_dirs["output"], model=bad_model)

    def scenario(client: TestClient, on_loop: Any, emu: EmulatedCluster) -> str:
        job_id = _submit(client, body)
        job = wait_for_phase(client, job_id, JobPhase.FAILED, 600)
        assert job["failure"]["exit_code"] == 65 and "model_type" in client.get(f"/v1/jobs/{job_id}/logs", headers=AUTH).text
        time.sleep(3)  # a retry, if any, would have started by now
        assert len(_pods(on_loop, emu, job_id)) == 1
        return job_id

    job_id = await _with_service(cluster, make_launcher, tmp_path, node_dirs, scenario)
    failed = next(c for c in cluster.job(job_id)["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PodFailurePolicy" and "exit code 65" in failed["message"]
