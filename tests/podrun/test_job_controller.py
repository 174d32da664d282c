"""The Job and JobSet controllers on kmock, running the rendered trainer manifests with fake commands."""

from __future__ import annotations

import asyncio
import textwrap

import pytest
from kubernetes import client as k8s

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.job_controller import TRACKING_FINALIZER
from harness.podrun.manifests import NS, service_accounts, shared_dir, spec, tpu_node, workload

pytestmark = pytest.mark.timeout(90)
JOB = "rl-0123456789ab"


def py(code: str, *args: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code), *args]


async def submit(cluster: EmulatedCluster, objects: list[dict]) -> None:
    for sa in service_accounts():
        if cluster.get("ServiceAccount", NS, sa["metadata"]["name"]) is None:
            await cluster.create(sa)
    for obj in objects:
        await cluster.create(obj)


def conditions(obj: dict | None) -> dict[str, dict]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["status"] == "True"}


def job(cluster: EmulatedCluster, name: str = JOB) -> dict | None:
    return cluster.get("Job", NS, name)


async def test_a_job_runs_its_pod_to_completion(emulated):
    await submit(emulated, workload(JOB, py("import json; print('spec name:', json.load(open('/etc/rljob/spec.json'))['name'])")))
    done = await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)) and job(emulated), "Complete")
    assert {"SuccessCriteriaMet", "Complete"} <= set(conditions(done))
    assert conditions(done)["Complete"]["reason"] == "CompletionsReached"
    assert (done["status"]["succeeded"], done["status"]["failed"], done["status"]["active"]) == (1, 0, 0)
    (pod,) = emulated.pods(NS, **{"job-name": JOB})
    meta = pod["metadata"]
    assert meta["labels"]["controller-uid"] == meta["labels"]["batch.kubernetes.io/controller-uid"] == done["metadata"]["uid"]
    assert meta["labels"]["rljob.dev/job-id"] == JOB and meta["name"].startswith(f"{JOB}-")
    assert meta["ownerReferences"][0] | {"kind": "Job", "controller": True} == meta["ownerReferences"][0]
    assert TRACKING_FINALIZER not in (meta.get("finalizers") or [])  # counted, then released
    assert pod["status"]["phase"] == "Succeeded"
    # The pod log endpoint, read with the real client, as the launcher reads it.
    cfg = k8s.Configuration()
    cfg.host = str(emulated.kmock.url).rstrip("/")
    core = k8s.CoreV1Api(k8s.ApiClient(cfg))
    text = await asyncio.to_thread(core.read_namespaced_pod_log, meta["name"], NS, container="trainer")
    assert text.strip() == "spec name: fake"


async def test_a_non_retryable_exit_code_fails_the_job_at_once(emulated):
    await submit(emulated, workload(JOB, py("import sys; sys.exit(65)")))
    failed = await emulated.wait_for(lambda: "Failed" in conditions(job(emulated)) and job(emulated), "Failed")
    cond = conditions(failed)["Failed"]
    assert cond["reason"] == "PodFailurePolicy" and "FailureTarget" in conditions(failed)
    assert cond["message"].startswith("Container trainer for pod rljob/") and cond["message"].endswith(
        "failed with exit code 65 matching FailJob rule at index 1"
    )
    await asyncio.sleep(0.5)
    assert len(emulated.pods(NS, **{"job-name": JOB})) == 1, "no retry after a FailJob rule"


async def test_retryable_failures_count_against_the_backoff_limit(emulated):
    await submit(emulated, workload(JOB, py("import sys; print('attempt'); sys.exit(75)"), backoff_limit=2))
    failed = await emulated.wait_for(lambda: "Failed" in conditions(job(emulated)) and job(emulated), "Failed")
    assert conditions(failed)["Failed"]["reason"] == "BackoffLimitExceeded"
    assert failed["status"]["failed"] == 3 and len(emulated.pods(NS, **{"job-name": JOB})) == 3


EVICTABLE = """
    import os, signal, sys, time
    shared = sys.argv[1]
    attempts = os.path.join(shared, 'attempts')
    if os.path.exists(attempts):
        print('resumed', flush=True); sys.exit(0)
    def stop(*_):
        open(os.path.join(shared, 'got-sigterm'), 'w').write(os.environ['HOSTNAME']); sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    open(attempts, 'a').write('x')  # after the handler: the test evicts once this file is there
    print('first attempt', flush=True); time.sleep(60)
"""


async def test_an_evicted_pod_is_replaced_without_counting_as_a_failure(emulated, tmp_path):
    shared = shared_dir(tmp_path)
    await submit(
        emulated,
        workload(JOB, py(EVICTABLE, str(shared)), backoff_limit=0, host_paths=[str(shared)], job_spec=spec(output=str(shared / "runs"))),
    )
    first = await emulated.wait_for(
        lambda: [p for p in emulated.pods(NS, **{"job-name": JOB}) if (p.get("status") or {}).get("phase") == "Running"], "a running pod"
    )
    name = first[0]["metadata"]["name"]
    await emulated.wait_for(lambda: (shared / "attempts").exists(), "the first attempt started")
    await emulated.evict(NS, name, reason="TerminationByKubelet", message="node is shutting down")
    done = await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)) and job(emulated), "Complete", 60)
    assert (shared / "got-sigterm").read_text() == name  # SIGTERM reached the trainer: it could checkpoint
    assert done["status"]["failed"] == 0 and done["status"]["succeeded"] == 1  # backoffLimit 0 and still fine
    assert emulated.get("Pod", NS, name) is None  # the evicted pod is gone once counted
    (replacement,) = emulated.pods(NS, **{"job-name": JOB})
    assert replacement["metadata"]["name"] != name


async def test_a_suspended_job_starts_no_pod_until_resumed(emulated):
    config_map, main = workload(JOB, py("print('ran')"))
    main["spec"]["suspend"] = True  # as the launcher creates a Kueue-queued (TPU) Job; cpu jobs are never queued
    await submit(emulated, [config_map, main])
    suspended = await emulated.wait_for(lambda: "Suspended" in conditions(job(emulated)) and job(emulated), "Suspended")
    assert suspended["spec"]["suspend"] is True
    await asyncio.sleep(0.5)
    assert emulated.pods(NS, **{"job-name": JOB}) == []
    await emulated.api.patch("Job", NS, JOB, {"spec": {"suspend": False}})  # what Kueue does on admission
    done = await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)) and job(emulated), "Complete")
    resumed = next(c for c in done["status"]["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed")


async def test_ttl_after_finished_deletes_the_job_and_its_pods(emulated):
    await submit(emulated, workload(JOB, py("print('ok')"), ttl_after_finished_s=1))
    await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)), "Complete")
    await emulated.wait_for(lambda: job(emulated) is None, "the TTL deletion", 10)
    await emulated.wait_for(lambda: not emulated.pods(NS, **{"job-name": JOB}), "the pods garbage-collected", 10)


async def test_deleting_the_job_stops_its_running_pod(emulated, tmp_path):
    shared = shared_dir(tmp_path)
    await submit(emulated, workload(JOB, py(EVICTABLE, str(shared)), host_paths=[str(shared)], job_spec=spec(output=str(shared / "runs"))))
    await emulated.wait_for(lambda: (shared / "attempts").exists(), "the pod started")
    (pod,) = emulated.pods(NS, **{"job-name": JOB})
    runner = emulated.runner(NS, pod["metadata"]["name"])
    await emulated.api.delete("Job", NS, JOB)  # what cancel does
    await emulated.wait_for(lambda: not emulated.pods(NS, **{"job-name": JOB}), "the pod deleted", 20)
    assert (shared / "got-sigterm").exists() and runner.finished()


async def test_a_tpu_pod_is_unschedulable_on_a_node_without_tpus(emulated):
    await submit(emulated, workload(JOB, py("print('never')"), job_spec=spec("v6e-8", 8)))
    pod = await emulated.wait_for(lambda: next(iter(emulated.pods(NS, **{"job-name": JOB})), None), "a pod")
    name = pod["metadata"]["name"]
    scheduled = await emulated.wait_for(
        lambda: next(
            (
                c
                for c in (emulated.get("Pod", NS, name) or {}).get("status", {}).get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ),
            None,
        ),
        "PodScheduled=False",
    )
    assert scheduled["reason"] == "Unschedulable" and "didn't match Pod's node affinity/selector" in scheduled["message"]
    assert emulated.get("Pod", NS, name)["status"]["phase"] == "Pending"


async def test_pods_are_not_created_without_their_service_account(emulated):
    for obj in workload(JOB, py("print('x')")):
        await emulated.create(obj)  # no ServiceAccount rljob-trainer in the namespace
    event = await emulated.wait_for(
        lambda: next((e for e in emulated.api.list("Event", NS) if e["reason"] == "FailedCreate"), None), "FailedCreate"
    )
    assert 'serviceaccount "rljob-trainer" not found' in event["message"]
    assert emulated.pods(NS, **{"job-name": JOB}) == []


async def test_a_jobset_runs_one_pod_per_host(kmock, tmp_path):
    code = "import os; print('worker', os.environ['JOB_COMPLETION_INDEX'])"
    async with EmulatedCluster(kmock, tmp_path / "node", node=tpu_node()) as cluster:
        await submit(cluster, workload(JOB, py(code), job_spec=spec("v6e-16", 4)))
        jobset = await cluster.wait_for(
            lambda: (cluster.get("JobSet", NS, JOB) or {}).get("status", {}).get("terminalState") and cluster.get("JobSet", NS, JOB),
            "the JobSet finished",
            60,
        )
        assert jobset["status"]["terminalState"] == "Completed"
        pods = cluster.pods(NS, **{"jobset.sigs.k8s.io/jobset-name": JOB})
        assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2", "3"]
        assert all(p["status"]["phase"] == "Succeeded" for p in pods)


async def test_a_jobset_with_a_non_retryable_exit_fails_without_restarting(kmock, tmp_path):
    async with EmulatedCluster(kmock, tmp_path / "node", node=tpu_node()) as cluster:
        await submit(
            cluster,
            workload(
                JOB,
                py("import os, sys; sys.exit(65 if os.environ['JOB_COMPLETION_INDEX'] == '2' else 0)"),
                job_spec=spec("v6e-16", 4),
                backoff_limit=3,
            ),
        )
        jobset = await cluster.wait_for(
            lambda: (cluster.get("JobSet", NS, JOB) or {}).get("status", {}).get("terminalState") and cluster.get("JobSet", NS, JOB),
            "the JobSet finished",
            60,
        )
        assert jobset["status"]["terminalState"] == "Failed" and jobset["status"].get("restarts", 0) == 0
        assert "PodFailurePolicy" in conditions(jobset)["Failed"]["message"]
