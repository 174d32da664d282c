"""A queued TPU7x job meets the shipped Kueue objects: their flavors are the v6e-8 pool's (k8s/kueue/), none selects
`cloud.google.com/gke-tpu-accelerator: tpu7x`, so a tpu7x-8 or tpu7x-16 job sent to rljob's queue is refused at
submit with the reason every generation without a flavor gets (docs/deploy-gke.md says what flavors TPU7x pools
need), rather than waiting in a queue that can never admit it. Read through the emulated Kueue (harness/podrun)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import settings, spec
from harness.podrun.pods.images import ROOT
from service.adapters.k8s.launcher import build_k8s_launcher
from service.domain.records.errors import InvalidRequest

from .conftest import configuration_for

pytestmark = pytest.mark.timeout(120)


def _shipped_kueue_objects() -> list[dict[str, Any]]:
    kueue_dir = ROOT / "k8s" / "kueue"
    files = yaml.safe_load((kueue_dir / "kustomization.yaml").read_text())["resources"]
    docs = [d for f in files for d in yaml.safe_load_all((kueue_dir / f).read_text()) if d]
    order = ["ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"]
    return sorted(docs, key=lambda d: order.index(d["kind"]))


async def test_a_queued_tpu7x_job_is_refused_at_submit_as_other_generations_without_flavors(kmock, tmp_path):
    nodes = [Node.gke_tpu("tpu7x-8-0", pool="tpu7x-8", topology="2x2x1", machine_type="tpu7x-standard-4t")]
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=nodes, kueue=KueueEmulator()) as cluster:
        for obj in _shipped_kueue_objects():
            await cluster.create(obj)
        launcher = build_k8s_launcher(settings(kueue_queue="rljob-v6e"), sleep=lambda s: None, configuration=configuration_for(kmock))

        async def refusal(accelerator: str, chips_per_vm: int) -> str:
            with pytest.raises(InvalidRequest) as refused:
                await asyncio.to_thread(launcher.check_submittable, spec(accelerator, chips_per_vm))
            assert refused.value.loc == ("hardware",)
            return str(refused.value)

        for accelerator in ("tpu7x-8", "tpu7x-16"):
            reason = await refusal(accelerator, 4)
            assert "no flavor of ClusterQueue rljob-v6e" in reason, reason
            assert "the job selects cloud.google.com/gke-tpu-accelerator=tpu7x" in reason, reason
