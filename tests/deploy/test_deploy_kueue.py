"""k8s/kueue/ in the gke-kueue overlay: the shared v6e pool's flavors agree with what the launcher selects, one
flavor per capacity on the one routing key, no admission check (plain flex-start pools), and the launcher's
settings name queues and priority classes that exist. (Schema validation of these objects is in
test_deploy_manifests.py; where a job of each capacity really lands under Kueue's rules is in
tests/k8s/test_kueue_routing.py.)"""

from __future__ import annotations

import json
import typing

from service.adapters.k8s.capacity import CAPACITY_LABEL, EVAL_POOL, capacity_scheduling, eval_pool_scheduling
from service.adapters.k8s.kueue import priority_class_name
from tests.deploy.deploy_support import one
from trainer.contract.spec.hardware import CAPACITY_KINDS
from trainer.contract.spec.job import JobSpec

V6E_2X4 = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4"}
FLAVOR_OF_CAPACITY = {
    "on-demand": "tpu-v6e-2x4-on-demand",
    "spot": "tpu-v6e-2x4-spot",
    "flex-start": "tpu-v6e-2x4-flex-start",
    "reservation": "tpu-v6e-2x4-reservation",
}
POOL_ORDER = ("reservation", "spot", "on-demand", "flex-start")  # paid for already, cheapest, on-demand, may wait
EVAL_FLAVOR = "cpu-eval"  # eval jobs' flavor, last: only eval pods select it
SHIPPED_RESERVATION = "rljob-v6e-8"  # the reservation flavor's example name


def _kinds(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_each_capacity_flavor_selects_and_tolerates_what_the_launcher_does(rendered):
    """A flavor's nodeLabels are the v6e-8 slice's plus exactly capacity_scheduling(capacity).node_selector,
    and its tolerations are that capacity's: Kueue and the trainer pod then agree on the nodes. Every flavor
    names the routing key with its own value, so no flavor can take another capacity's pod."""
    flavors = _kinds(rendered["gke-kueue"], "ResourceFlavor")
    assert set(flavors) == {*FLAVOR_OF_CAPACITY.values(), EVAL_FLAVOR}
    assert set(FLAVOR_OF_CAPACITY) == set(CAPACITY_KINDS), "a new capacity needs its flavor"
    for capacity, name in FLAVOR_OF_CAPACITY.items():
        scheduling = capacity_scheduling((capacity,), SHIPPED_RESERVATION)
        spec = flavors[name]["spec"]
        assert spec["nodeLabels"] == {**V6E_2X4, **scheduling.node_selector}, name
        assert spec.get("tolerations", []) == scheduling.tolerations, name
    assert len({f["spec"]["nodeLabels"][CAPACITY_LABEL] for f in flavors.values()}) == len(flavors)
    # The eval flavor: exactly what a queued eval pod selects and tolerates (the eval pool), nothing of a TPU.
    eval_pool = eval_pool_scheduling()
    assert flavors[EVAL_FLAVOR]["spec"] == {"nodeLabels": eval_pool.node_selector, "tolerations": eval_pool.tolerations}
    assert eval_pool.node_selector == {CAPACITY_LABEL: EVAL_POOL}


def test_cluster_queue_holds_tpu_quota_in_every_flavor_and_waits_on_no_admission_check(rendered):
    objs = rendered["gke-kueue"]
    cq = one(objs, "ClusterQueue")
    (group,) = cq["spec"]["resourceGroups"]
    assert "google.com/tpu" in group["coveredResources"]
    # The pool's order for a job of several kinds (docs/deploy-gke.md "One spec, several capacities").
    assert [f["name"] for f in group["flavors"]] == [*(FLAVOR_OF_CAPACITY[c] for c in POOL_ORDER), EVAL_FLAVOR]
    for flavor in group["flavors"]:
        quotas = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        # Kueue: every flavor of a group lists every covered resource, in coveredResources' order.
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"], flavor["name"]
        if flavor["name"] == EVAL_FLAVOR:
            assert quotas["google.com/tpu"] == 0 and quotas["cpu"] > 0, "eval jobs: cpu and memory, no TPUs"
            continue
        assert quotas["google.com/tpu"] > 0 and quotas["google.com/tpu"] % 8 == 0, "whole v6e-8 nodes"
    ns = one(objs, "Namespace")["metadata"]["name"]
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": ns}
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"

    # Plain flex-start pools: no ProvisioningRequest. A check on a cluster that does not serve ProvisioningRequest
    # would never turn Active, and a ClusterQueue referencing an inactive check admits nothing at all.
    assert "admissionChecks" not in cq["spec"] and "admissionChecksStrategy" not in cq["spec"]
    assert not _kinds(objs, "AdmissionCheck") and not _kinds(objs, "ProvisioningRequestConfig")


def test_every_queue_and_priority_class_the_launcher_names_exists(rendered):
    objs = rendered["gke-kueue"]
    cq_name = one(objs, "ClusterQueue")["metadata"]["name"]
    ns = one(objs, "Namespace")["metadata"]["name"]
    local_queues = _kinds(objs, "LocalQueue")
    for lq in local_queues.values():
        assert lq["spec"]["clusterQueue"] == cq_name and lq["metadata"]["namespace"] == ns
    config = next(o for o in objs if o["kind"] == "ConfigMap" and "RLJOB_LAUNCHER" in o.get("data", {}))["data"]
    team_queues = json.loads(config["RLJOB_K8S_KUEUE_TEAM_QUEUES"])
    assert len(team_queues) >= 2, "the overlay shows how teams map to their queues"
    named = {config["RLJOB_K8S_KUEUE_QUEUE"], *team_queues.values()}
    assert named == set(local_queues), "every LocalQueue in k8s/kueue/ is one the launcher may name, and back"

    classes = {name: o["value"] for name, o in _kinds(objs, "WorkloadPriorityClass").items()}
    priorities = typing.get_args(JobSpec.model_fields["priority"].annotation)
    assert set(classes) == {priority_class_name(p) for p in priorities}
    assert classes["rljob-low"] < classes["rljob-normal"] < classes["rljob-high"]
    assert not [o for o in rendered["gke"] if o["apiVersion"].startswith("kueue.")], "Kueue stays optional"
