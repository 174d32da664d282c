"""Kueue on kmock: the test plays Kueue (Workload conditions, the visibility API's pending list) and the Job
controller, against the real launcher and the whole service. Conditions and messages are Kueue v0.19.2's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import kmock as kmock_lib
import pytest
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.domain.records.ports import ObservedState

from .conftest import JOB_ID, NS, FakeCluster, make_spec
from .test_kueue_workload import PREEMPTED_MESSAGE, QUOTA_MESSAGE
from .test_service_integration import AUTH, NoProgress, _settings, _wait

pytestmark = pytest.mark.timeout(60)
WORKLOADS = "kueue.x-k8s.io/v1beta2/workloads"
TEAM_QUEUES = {"ml": "ml-tpu"}  # the bootstrap token's team (test_service_integration._settings) is ml
WAITING = {"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota", "message": QUOTA_MESSAGE}
# What rljob says of it (service/adapters/k8s/kueue_reasons.py), then Kueue's own message.
QUOTA_WORDS = (
    "waiting for quota: the jobs admitted before it hold the flavors it may use, and it starts when one of them finishes "
    f"(nothing to do). Kueue: {QUOTA_MESSAGE}"
)
ADMITTED = (
    {"type": "QuotaReserved", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue rljob-v6e"},
    {"type": "Admitted", "reason": "Admitted", "message": "The workload is admitted"},
)
EVICTED = (
    {"type": "Evicted", "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload"},
    {"type": "Preempted", "reason": "InClusterQueue", "message": PREEMPTED_MESSAGE},
    {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "The workload was evicted"},
    {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "The workload has no reservation"},
)
READMITTED = (
    {"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": "Previously: Preempted"},
    {"type": "Preempted", "status": "False", "reason": "QuotaReserved", "message": "Previously: preempted"},
    *ADMITTED,
)


class FakeKueue:
    """Plays Kueue through kmock's HTTP API: one Workload per Job, and the visibility API."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.pending: list[str] = []  # workload names, first = next to be admitted
        self.visibility_error: int | None = None  # 403: no RBAC for it; 503: its APIService is unavailable
        self.created: set[str] = set()
        cluster.server.resources[WORKLOADS] = {"namespaced": True, "verbs": ["list", "get", "create", "patch"]}
        cluster.server[lambda req: req.url.path.endswith("/pendingworkloads")] << self._pending_workloads

    def _pending_workloads(self, request: Any) -> Any:
        if self.visibility_error is not None:
            return kmock_lib.Response(
                status=self.visibility_error,
                payload={
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": self.visibility_error,
                    "message": f"visibility.kueue.x-k8s.io answered {self.visibility_error}",
                },
            )
        lq = request.url.path.split("/")[-2]
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
            "metadata": {},
            "items": [
                {
                    "metadata": {"name": name, "namespace": NS},
                    "priority": 0,
                    "localQueueName": lq,
                    "positionInClusterQueue": i,
                    "positionInLocalQueue": i,
                }
                for i, name in enumerate(self.pending)
            ],
        }

    @staticmethod
    def name_of(job_id: str) -> str:
        return f"job-{job_id}-3f9a1"

    async def set_conditions(self, job_id: str, *conditions: dict[str, Any]) -> str:
        """Create the Job's Workload (first call) and set its status conditions."""
        job = self.cluster.job(job_id)
        assert job is not None, f"no Job {job_id}"
        name = self.name_of(job_id)
        status = {"conditions": [{"status": "True", "lastTransitionTime": "2026-11-30T20:00:00Z", **c} for c in conditions]}
        if name not in self.created:
            self.created.add(name)
            await self.cluster._send(
                "POST",
                f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "metadata": {
                        "name": name,
                        "namespace": NS,
                        "labels": {
                            "kueue.x-k8s.io/job-uid": job["metadata"]["uid"],
                            "kueue.x-k8s.io/queue-name": job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
                        },
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_id, "uid": job["metadata"]["uid"]}],
                    },
                    "spec": {"queueName": job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "podSets": []},
                },
            )
        await self.cluster._send("PATCH", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{name}", {"status": status})
        return name


@pytest.fixture()
def kueue(cluster: FakeCluster) -> FakeKueue:
    return FakeKueue(cluster)


async def test_a_job_waiting_for_quota_is_queued_with_kueues_reason_and_place(cluster, kueue, make_launcher):
    launcher = make_launcher(kueue_team_queues=TEAM_QUEUES)
    await asyncio.to_thread(launcher.launch, JOB_ID, make_spec(team="ml", priority="high"))
    labels = cluster.job()["metadata"]["labels"]
    assert cluster.job()["spec"]["suspend"] is True
    assert (labels["kueue.x-k8s.io/queue-name"], labels["kueue.x-k8s.io/priority-class"]) == ("ml-tpu", "rljob-high")

    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason, obs.queue.name, obs.queue.position) == (ObservedState.QUEUED, "NoWorkload", "ml-tpu", None)

    name = await kueue.set_conditions(JOB_ID, WAITING)
    kueue.pending = ["job-rl-aaaaaaaaaaaa-11111", name]
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert obs.state is ObservedState.QUEUED and obs.message == QUOTA_WORDS
    assert (obs.queue.name, obs.queue.position, obs.queue.reason) == ("ml-tpu", 2, "WaitingForQuota")
    pending_reads = [r for r in cluster.server if r.url.path.endswith("/pendingworkloads")]
    assert pending_reads[-1].url.path == (f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/ml-tpu/pendingworkloads")

    for error in (403, 503):  # no RBAC for the visibility API, or it is down: the place is unknown, nothing else
        kueue.visibility_error = error
        before = len([r for r in cluster.server if r.url.path.endswith("/pendingworkloads")])
        obs = await asyncio.to_thread(launcher.observe, JOB_ID)
        assert (obs.state, obs.queue.position, obs.queue.reason) == (ObservedState.QUEUED, None, "WaitingForQuota")
        after = len([r for r in cluster.server if r.url.path.endswith("/pendingworkloads")])
        assert after == before + 1, "one try: a best-effort read is not retried with backoff"


async def test_a_new_place_in_line_is_pushed_by_the_watching_launcher(cluster, kueue, make_launcher, recorder):
    launcher = make_launcher(kueue_queue="ml-tpu")
    launcher.start(recorder)
    try:
        await asyncio.to_thread(launcher.launch, JOB_ID, make_spec(team="ml"))
        name = await kueue.set_conditions(JOB_ID, WAITING)
        kueue.pending = ["job-rl-aaaaaaaaaaaa-11111", name]
        await recorder.wait_for(ObservedState.QUEUED, where=lambda o: o.queue.position == 2)
        kueue.pending = [name]  # only the place moved: same reason, same message
        await recorder.wait_for(ObservedState.QUEUED, where=lambda o: o.queue.position == 1)
    finally:
        await asyncio.to_thread(launcher.stop)


async def test_an_observation_is_stamped_before_the_launcher_reads_the_cluster(cluster, kueue, make_launcher):
    """The job service orders observations by that stamp (ObservationOrder): one stamped after its reads
    could outrank a newer observation and take a re-admitted job back to QUEUED."""
    launcher = make_launcher(kueue_queue="ml-tpu")
    await asyncio.to_thread(launcher.launch, JOB_ID, make_spec(team="ml"))
    await kueue.set_conditions(JOB_ID, WAITING)
    client = launcher.client
    reads: list[float] = []
    real_get_job = client.get_job

    def get_job(name: str) -> Any:
        reads.append(time.monotonic())
        time.sleep(0.05)  # the read takes time, as over a network
        return real_get_job(name)

    client.get_job = get_job  # type: ignore[method-assign]
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert obs.state is ObservedState.QUEUED and reads
    assert obs.read_at <= min(reads)


async def test_a_jobset_is_queued_from_its_workload_too(cluster, kueue, make_launcher):
    launcher = make_launcher(kueue_queue="ml-tpu")
    await asyncio.to_thread(launcher.launch, JOB_ID, make_spec("v6e-16", 4, team="ml"))
    jobset = cluster.server.objects["jobset.x-k8s.io/v1alpha2/jobsets", NS, JOB_ID]
    name = f"jobset-{JOB_ID}-3f9a1"
    await cluster._send(
        "POST",
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/job-uid": jobset["metadata"]["uid"]}},
            "status": {"conditions": [{**WAITING, "lastTransitionTime": "2026-11-30T20:00:00Z"}]},
        },
    )
    kueue.pending = [name]
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.object_name) == (ObservedState.QUEUED, f"jobset/{JOB_ID}")
    assert (obs.queue.position, obs.queue.reason, obs.message) == (1, "WaitingForQuota", QUOTA_WORDS)


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    return client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()


async def test_queued_admitted_preempted_and_readmitted_through_the_service(cluster, kueue, make_launcher, tmp_path):
    loop = asyncio.get_running_loop()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=10)

    def meta(job_id: str) -> dict[str, Any]:
        return (cluster.job(job_id) or {}).get("metadata") or {}

    def phase_is(client: TestClient, job_id: str, phase: str, also: Callable[[dict[str, Any]], bool] = bool) -> Any:
        return _wait(lambda: (j := _job(client, job_id))["phase"] == phase and also(j) and j, f"phase {phase}")

    def scenario() -> str:
        app = create_app(_settings(tmp_path), launcher=make_launcher(kueue_team_queues=TEAM_QUEUES), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            resp = client.post("/v1/jobs", json=make_spec(priority="high").model_dump(mode="json"), headers=AUTH)
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            _wait(lambda: cluster.job(job_id), "the Job in the cluster")

            # Kueue has no quota for it: QUEUED with Kueue's reason, its words and the place in line.
            name = on_loop(kueue.set_conditions(job_id, WAITING))
            kueue.pending = ["job-rl-aaaaaaaaaaaa-11111", name]
            # Waits for Kueue's reason too: the service may read the queue position before the WAITING conditions
            # (a loaded machine once read PendingEvaluation there).
            job = phase_is(
                client,
                job_id,
                "QUEUED",
                lambda j: (j["queue"] or {}).get("position") == 2 and j["queue"].get("reason") == "WaitingForQuota",
            )
            assert job["queue"] == {"name": "ml-tpu", "position": 2, "reason": "WaitingForQuota", "message": QUOTA_WORDS}
            assert job["message"] == f"waiting in ml-tpu: {QUOTA_WORDS}"
            _wait(lambda: meta(job_id).get("annotations", {}).get("rljob.dev/queue-position") == "2", "position annotation")
            assert meta(job_id)["annotations"]["rljob.dev/queue-reason"] == "WaitingForQuota"
            assert meta(job_id)["labels"]["rljob.dev/phase"] == "queued"
            kueue.pending = [name]  # the job ahead was admitted
            phase_is(client, job_id, "QUEUED", lambda j: j["queue"]["position"] == 1)
            _wait(lambda: meta(job_id)["annotations"].get("rljob.dev/queue-position") == "1", "position 1 annotation")

            # Quota frees: Kueue admits the Workload and unsuspends the Job; the trainer starts.
            kueue.pending = []
            on_loop(kueue.set_conditions(job_id, *ADMITTED))
            on_loop(cluster.patch_job({"spec": {"suspend": False}}, name=job_id))
            job = phase_is(client, job_id, "LAUNCHING")
            assert job["queue"] is None
            pod = on_loop(cluster.create_pod(job_id=job_id))
            on_loop(cluster.run_pod(pod))
            first_attempt = phase_is(client, job_id, "RUNNING")["attempt"]
            _wait(lambda: meta(job_id)["labels"]["rljob.dev/phase"] == "running", "phase label running")
            assert "rljob.dev/queue-position" not in meta(job_id)["annotations"]
            assert "rljob.dev/queue-reason" not in meta(job_id)["annotations"]

            # A higher-priority job preempts it: Kueue evicts the Workload and suspends the Job again.
            on_loop(kueue.set_conditions(job_id, *EVICTED))
            on_loop(cluster.patch_job({"spec": {"suspend": True}}, name=job_id))
            on_loop(cluster._send("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}"))
            job = phase_is(client, job_id, "QUEUED")
            assert job["queue"] == {"name": "ml-tpu", "position": None, "reason": "Preempted", "message": PREEMPTED_MESSAGE}
            preempted = f"preempted, back in ml-tpu: {PREEMPTED_MESSAGE}; it resumes from its last checkpoint"
            assert job["message"].startswith(preempted)
            kueue.pending = [name]  # the visibility API lists it: a new place in line keeps the message
            job = phase_is(client, job_id, "QUEUED", lambda j: j["queue"]["position"] == 1)
            assert job["message"].startswith(preempted)
            _wait(lambda: meta(job_id)["annotations"].get("rljob.dev/queue-reason") == "Preempted", "preempted annotation")

            # Re-admitted: the same Job resumes; the service relaunches nothing.
            kueue.pending = []
            on_loop(kueue.set_conditions(job_id, *READMITTED))
            on_loop(cluster.patch_job({"spec": {"suspend": False}}, name=job_id))
            phase_is(client, job_id, "LAUNCHING")
            second = on_loop(cluster.create_pod(job_id=job_id))
            on_loop(cluster.run_pod(second))
            assert phase_is(client, job_id, "RUNNING")["attempt"] == first_attempt  # not a resume
        return job_id

    job_id = await asyncio.to_thread(scenario)
    job_posts = [r for r in cluster.server if r.method == "POST" and r.resource and r.resource.plural == "jobs"]
    assert len(job_posts) == 1, "re-admission resumes the same Job; nothing is relaunched"
    store = SqlJobStore(_settings(tmp_path).effective_database_url)
    try:
        phases = [e.data["phase"] for e in store.events_after(0, job_id=job_id) if e.kind == "phase"]
    finally:
        store.close()
    assert phases == ["QUEUED", "LAUNCHING", "QUEUED", "LAUNCHING", "RUNNING", "QUEUED", "LAUNCHING", "RUNNING"]


async def test_a_team_without_a_local_queue_is_refused_at_submit(cluster, make_launcher, tmp_path):
    def scenario() -> None:
        launcher = make_launcher(kueue_team_queues={"research": "research-tpu"})
        app = create_app(_settings(tmp_path), launcher=launcher, progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            resp = client.post("/v1/jobs", json=make_spec().model_dump(mode="json"), headers=AUTH)
            assert resp.status_code == 422, resp.text
            (detail,) = resp.json()["detail"]
            assert detail["loc"] == ["team"]
            assert "team 'ml' has no Kueue LocalQueue" in detail["msg"] and "RLJOB_K8S_KUEUE_TEAM_QUEUES" in detail["msg"]
            assert client.get("/v1/jobs", headers=AUTH).json()["count"] == 0

    await asyncio.to_thread(scenario)
    assert not [r for r in cluster.server if r.method == "POST"], "a refused job creates nothing"
