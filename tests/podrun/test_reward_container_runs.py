"""The reward container (RLJOB_K8S_REWARD_CONTAINER, service/adapters/k8s/reward_container.py) on the emulated
cluster: the launcher's rendered Job, its `rewards` native sidecar running the shipped
`python -m trainer.rewards_sandbox.host`, and the trainer container running `python -m trainer sandbox-check`
(the deploy guide's check) in place of a training run. The check's reward workers start in the sidecar through
RLJOB_REWARD_HOST and every required guarantee holds; the Job completes, and the sidecar is ended after the trainer."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes import client as k8s

from harness.podrun.manifests import NS, spec, workload
from trainer.contract import JobSpec

from .test_job_controller import JOB, conditions, job, submit

pytestmark = pytest.mark.timeout(120)


def _spec_with_rewards() -> JobSpec:
    """podrun's cpu spec, with a reward file of the user's: what makes the pod get its reward container."""
    rewards = {"functions_path": "gs://example-bucket/rljob/rewards/judge.py", "functions": ["judge"], "memory_mib": 256}
    return JobSpec.model_validate({**spec().model_dump(mode="json"), "grpo": {"rewards": rewards}})


async def test_a_jobs_reward_workers_run_in_its_reward_container_and_the_job_completes(emulated):
    # The reward container's share (2 x 256 MiB + 256, 1 CPU) comes out of what the pod asks for.
    command = ["python", "-m", "trainer", "sandbox-check", "--json"]
    objects = workload(JOB, command, job_spec=_spec_with_rewards(), reward_container=True, cpu_job_cpu="1500m", cpu_job_memory="2Gi")
    pod_spec = objects[1]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod_spec["initContainers"]] == ["rewards"]
    await submit(emulated, objects)
    done = await emulated.wait_for(lambda: "Complete" in conditions(job(emulated)) and job(emulated), "Complete")
    assert done["status"]["succeeded"] == 1
    (pod,) = emulated.pods(NS, **{"job-name": JOB})
    assert pod["status"]["phase"] == "Succeeded"
    (sidecar,) = pod["status"]["initContainerStatuses"]
    assert sidecar["name"] == "rewards" and "terminated" in sidecar["state"]  # ended after the trainer, not before

    cfg = k8s.Configuration()
    cfg.host = str(emulated.kmock.url).rstrip("/")
    core = k8s.CoreV1Api(k8s.ApiClient(cfg))
    trainer_log = await asyncio.to_thread(core.read_namespaced_pod_log, pod["metadata"]["name"], NS, container="trainer")
    result = json.loads(trainer_log)
    assert result["isolation"]["reward_container"], result["isolation"]
    assert all(result["verdict"]["required"].values()), result["verdict"]
    host_log = await asyncio.to_thread(core.read_namespaced_pod_log, pod["metadata"]["name"], NS, container="rewards")
    assert "rljob reward host: serving reward workers on /var/run/rljob-rewards/host.sock" in host_log
