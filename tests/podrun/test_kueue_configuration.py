"""Kueue's manager Configuration and the controllers' fail-closed webhooks on the emulated cluster: what a real
cluster does to our Jobs under each setup (Kueue v0.19.2, JobSet v0.12.0; harness/podrun/kueue/config.py and
admission.py cite the upstream code). The doctor's checks for these live in tests/k8s/test_doctor_kmock.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.podrun.api.kapi import ApiError
from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import CAPACITY_LABEL
from harness.podrun.kueue.config import KueueConfiguration
from harness.podrun.kueue.emulator import KueueEmulator

from .test_kueue_emulator import NODES, NS, TPU_REQUESTS, TPU_TOLERATION, _tpu_queue, job, local_queue

pytestmark = pytest.mark.timeout(60)


def _unlabelled(j: dict[str, Any]) -> dict[str, Any]:
    j["metadata"]["labels"] = {}
    j["spec"]["suspend"] = False
    return j


async def _settle(cluster: EmulatedCluster, passes: int = 5) -> None:
    for _ in range(passes):
        await cluster.reconcile_once()
    await asyncio.sleep(0)


async def test_a_local_queue_named_default_captures_an_unlabelled_cpu_job_into_a_tpu_flavor(kmock, tmp_path):
    """defaults.go ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector (always on since 0.19): the cpu Job
    gets queue-name=default, is suspended, admitted into the TPU flavor, and its pod can land nowhere."""
    kueue = KueueEmulator()
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in [*_tpu_queue(), local_queue("default", "tpu")]:
            await cluster.create(obj)
        created = await cluster.create(_unlabelled(job("cpu", requests={"cpu": "1", "memory": "1Gi"})))
        assert created["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "default"} and created["spec"]["suspend"] is True
        pod = await cluster.wait_for(lambda: next(iter(cluster.pods(NS, **{"job-name": "cpu"})), None), "the captured Job's pod")
        assert pod["spec"]["nodeSelector"][CAPACITY_LABEL] == "on-demand"  # the TPU flavor's labels
        await asyncio.sleep(0.3)
        assert cluster.node_of(NS, pod["metadata"]["name"]) is None, "no node takes a cpu pod with TPU labels and no TPU toleration"


async def test_without_a_default_local_queue_an_unlabelled_job_is_left_alone(kmock, tmp_path):
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=KueueEmulator()) as cluster:
        for obj in _tpu_queue():
            await cluster.create(obj)
        created = await cluster.create(_unlabelled(job("cpu", requests={"cpu": "1"})))
        assert created["metadata"]["labels"] == {} and created["spec"]["suspend"] is False


async def test_a_namespace_the_selector_does_not_match_gets_no_workload(kmock, tmp_path):
    """reconciler.go ReconcileGenericJob: managedJobsNamespaceSelector always respected (GA in 0.19); the webhook
    still suspends the queued Job, so it waits forever. Labelling the namespace lets Kueue in."""
    config = KueueConfiguration(managed_jobs_namespace_selector={"matchLabels": {"kueue": "on"}})
    kueue = KueueEmulator(config=config)
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in _tpu_queue():
            await cluster.create(obj)
        created = await cluster.create(
            job("train", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "on-demand"}, tolerations=[TPU_TOLERATION])
        )
        assert created["spec"]["suspend"] is True
        await _settle(cluster)
        assert kueue.workload_for(created) is None
        kmock.objects["v1/namespaces", None, NS] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NS, "labels": {"kueue": "on"}},
        }
        await cluster.wait_for(lambda: kueue.workload_for(created), "a Workload once the namespace is selected")


async def test_frameworks_without_jobset_leave_a_jobset_suspended_without_a_workload(kmock, tmp_path):
    """apis/config/v1beta2/defaults.go: a Configuration listing no frameworks manages batch/job only."""
    kueue = KueueEmulator(config=KueueConfiguration.from_yaml("integrations: {}\n"))
    assert kueue.config.frameworks == ("batch/job",)
    inner = job("x", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "on-demand"}, tolerations=[TPU_TOLERATION])["spec"]
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "multi", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {k: v for k, v in inner.items() if k != "suspend"}}}],
        },
    }
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in _tpu_queue():
            await cluster.create(obj)
        created = await cluster.create(jobset)
        single = await cluster.create(
            job("single", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "on-demand"}, tolerations=[TPU_TOLERATION])
        )
        await cluster.wait_for(lambda: kueue.workload_for(single), "the batch/job Workload")
        await _settle(cluster)
        assert kueue.workload_for(created) is None and cluster.get("JobSet", NS, "multi")["spec"]["suspend"] is True


async def test_controllers_down_refuse_creates_and_dry_run_stores_nothing(kmock, tmp_path):
    """failurePolicy Fail: the API server's InternalError naming the webhook and its Service without endpoints."""
    kueue = KueueEmulator()
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        probe = job("probe", requests={"cpu": "1"})
        stored = await cluster.api.send("POST", f"/apis/batch/v1/namespaces/{NS}/jobs?dryRun=All", probe)
        assert stored["metadata"]["uid"] and cluster.get("Job", NS, "probe") is None, "a dry-run create is admitted, not stored"
        kueue.stop()
        with pytest.raises(ApiError) as refused:
            await cluster.create(job("train", requests={"cpu": "1"}))
        assert refused.value.status == 500 and (
            'Internal error occurred: failed calling webhook "mjob.kb.io": failed to call webhook: Post '
            '"https://kueue-webhook-service.kueue-system.svc:443/mutate-batch-v1-job?timeout=10s": '
            'no endpoints available for service "kueue-webhook-service"'
        ) in str(refused.value)
        assert cluster.get("Job", NS, "train") is None
        kueue.start()
        cluster.stop_jobset_controller()
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": NS},
            "spec": {"replicatedJobs": []},
        }
        with pytest.raises(ApiError) as refused:
            await cluster.api.send("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets?dryRun=All", jobset)
        assert 'no endpoints available for service "jobset-webhook-service"' in str(refused.value)
        await cluster.create(job("after", requests={"cpu": "1"}))  # Jobs do not go through JobSet's webhooks
