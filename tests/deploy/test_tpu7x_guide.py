"""docs/deploy-gke.md's TPU7x pool commands held to the code: the single-host pool is one tpu7x-standard-4t VM
labelled as an on-demand pod selects; the multi-host pool has the tpu7x-16 slice's VM count and takes the guide's
workload policy, whose accelerator topology is the slice's shape, through --placement-policy and not --tpu-topology
(GKE's "About Ironwood (TPU7x) in GKE": the policy replaces --tpu-topology on TPU7x)."""

from __future__ import annotations

import pytest

from service.adapters.k8s.accelerators import ACCELERATORS
from service.adapters.k8s.capacity import capacity_scheduling
from tests.deploy import guide_pools

MACHINE = "tpu7x-standard-4t"


def _check(doc: str) -> None:
    pools = {guide_pools.pool_name(c): guide_pools.flags(c) for c in guide_pools.commands(doc, "gcloud container node-pools create")}
    tpu7x = {name: f for name, f in pools.items() if f.get("--machine-type") == MACHINE}
    assert set(tpu7x) == {"tpu7x-8", "tpu7x-16"}
    policies = {
        cmd.split("workload-policy", 1)[1].split()[0]: guide_pools.flags(cmd)
        for cmd in guide_pools.commands(doc, "gcloud compute resource-policies create workload-policy")
    }
    on_demand = capacity_scheduling(("on-demand",), None, tpu=True).node_selector
    for name, flags in tpu7x.items():
        hw = ACCELERATORS[name]
        assert hw.machine_type == MACHINE and flags["--num-nodes"] == str(hw.vms_per_slice), name
        assert guide_pools.node_labels(doc, flags) == on_demand, name
        assert "--tpu-topology" not in flags, name
        if hw.multi_host:
            policy = policies[flags["--placement-policy"]]
            assert policy["--type"] == "HIGH_THROUGHPUT" and policy["--accelerator-topology"] == hw.topology, name
        else:
            assert "--placement-policy" not in flags, name


def test_the_tpu7x_pool_commands_match_the_slices_they_serve() -> None:
    _check(guide_pools.GUIDE.read_text())


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--accelerator-topology=2x2x2", "--accelerator-topology=2x2x1"),
        ("--num-nodes=2 --placement-policy=tpu7x-2x2x2", "--num-nodes=2 --tpu-topology=2x2x2"),
        ("--machine-type=tpu7x-standard-4t --num-nodes=2", "--machine-type=tpu7x-standard-4t --num-nodes=1"),
    ],
)
def test_the_check_fails_when_the_guide_drifts(old: str, new: str) -> None:
    guide = guide_pools.GUIDE.read_text()
    assert old in guide
    with pytest.raises((AssertionError, KeyError)):
        _check(guide.replace(old, new))
