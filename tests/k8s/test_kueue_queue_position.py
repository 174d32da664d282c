"""A queued job's place in line on the emulated cluster, under Kueue v0.19.2's and v0.20.0's rules (issue 55 section 1):
the emulated Kueue serves the visibility API's LocalQueue endpoint from its own queue (harness/podrun/kueue/visibility.py,
after pkg/visibility/storage/pending_workloads_lq.go), and rljob's launcher reads each waiting job's position from it.

The shipped k8s/kueue/ objects and one on-demand v6e-8 node (quota for one job): A (high priority) runs; B and C (low)
wait, in the order they came; D (normal) comes last and goes ahead of both, without preempting A (the ClusterQueue
preempts only lower priorities). A LocalQueue that does not exist is a 404, which the launcher reads as no position.
"""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import NS, service_accounts
from service.adapters.k8s import pod_template
from service.adapters.k8s.launcher import build_k8s_launcher
from service.domain.records.ports import ObservedState
from trainer.contract import JobSpec

from .conftest import configuration_for, make_settings, make_spec
from .test_kueue_routing import shipped_kueue_objects

pytestmark = pytest.mark.timeout(120)
NODES = [Node.gke_tpu("tpu-od-0", "on-demand")]


def _fake_trainer(job_id: str) -> list[str]:
    return ["python", "-c", textwrap.dedent("import time; time.sleep(600)")]


def _spec(name: str, priority: str) -> JobSpec:
    body = make_spec().model_dump(mode="json")
    return JobSpec.model_validate({**body, "name": name, "priority": priority})


@pytest.mark.parametrize("version", ["v0.19.2", "v0.20.0"])
async def test_a_waiting_job_says_its_place_in_line_by_priority_then_arrival(kmock, tmp_path, monkeypatch, version):
    monkeypatch.setattr(pod_template, "trainer_command", _fake_trainer)
    async with EmulatedCluster(kmock, tmp_path, nodes=NODES, kueue=KueueEmulator(version=version)) as cluster:
        for obj in [*service_accounts(), *shipped_kueue_objects()]:
            await cluster.create(obj)
        launcher = build_k8s_launcher(make_settings(kueue_queue="rljob-v6e"), sleep=lambda s: None, configuration=configuration_for(kmock))

        async def observe(job_id: str) -> Any:
            return await asyncio.to_thread(launcher.observe, job_id)

        async def positions(*job_ids: str) -> list[int | None]:
            seen = [await observe(j) for j in job_ids]
            return [o.queue.position if o.state is ObservedState.QUEUED and o.queue else None for o in seen]

        async def launch(job_id: str, priority: str) -> None:
            await asyncio.to_thread(launcher.launch, job_id, _spec(job_id, priority))

        await launch("rl-posa00000001", "high")
        await cluster.wait_for(lambda: cluster.pods(NS, **{"job-name": "rl-posa00000001"}), "A's pod")
        await launch("rl-posb00000001", "low")
        await asyncio.sleep(1.1)  # a later creationTimestamp (whole seconds) than B's
        await launch("rl-posc00000001", "low")

        async def settled(want: list[int | None], *job_ids: str) -> list[int | None]:
            for _ in range(100):
                got = await positions(*job_ids)
                if got == want:
                    return got
                await asyncio.sleep(0.1)
            return got

        assert await settled([1, 2], "rl-posb00000001", "rl-posc00000001") == [1, 2], "B and C in the order they came"
        await launch("rl-posd00000001", "normal")
        order = ["rl-posd00000001", "rl-posb00000001", "rl-posc00000001"]
        assert await settled([1, 2, 3], *order) == [1, 2, 3], "D, of a higher priority, goes ahead of both"
        assert (await observe("rl-posa00000001")).state is not ObservedState.QUEUED, "A runs: D preempts no higher priority"
        # The endpoint as the API serves it: 0-based positions in the ClusterQueue and the LocalQueue.
        summary = await asyncio.to_thread(launcher._client.kueue_pending_workloads, "rljob-v6e")
        items = [(i["localQueueName"], i["positionInClusterQueue"], i["positionInLocalQueue"], i["priority"]) for i in summary["items"]]
        # WorkloadPriorityClasses rljob-normal 1000, rljob-low 100 (k8s/kueue/priorityclasses.yaml)
        assert items == [("rljob-v6e", 0, 0, 1000), ("rljob-v6e", 1, 1, 100), ("rljob-v6e", 2, 2, 100)]
        assert await asyncio.to_thread(launcher._client.kueue_pending_workloads, "no-such-queue") is None
