"""k8s/kueue/ in the gke-kueue overlay: the shared v6e pool's flavors agree with what the launcher selects,
flex-start goes through its provisioning admission check, and the launcher's settings name queues and
priority classes that exist. (Schema validation of these objects is in test_deploy_manifests.py.)"""

from __future__ import annotations

import json
import typing

from deploy_support import one

from service.adapters.k8s.capacity import capacity_scheduling
from service.adapters.k8s.kueue import priority_class_name
from trainer.contract.spec import HardwareSpec, JobSpec

V6E_2X4 = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4"}
FLAVOR_OF_CAPACITY = {"on-demand": "tpu-v6e-2x4-on-demand", "spot": "tpu-v6e-2x4-spot",
                      "flex-start": "tpu-v6e-2x4-flex-start"}


def _kinds(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_each_capacity_flavor_selects_and_tolerates_what_the_launcher_does(rendered):
    """A flavor's nodeLabels are the v6e-8 slice's plus exactly capacity_scheduling(capacity).node_selector,
    and its tolerations are that capacity's: Kueue and the trainer pod then agree on the nodes."""
    flavors = _kinds(rendered["gke-kueue"], "ResourceFlavor")
    assert set(flavors) == set(FLAVOR_OF_CAPACITY.values())
    capacities = typing.get_args(HardwareSpec.model_fields["capacity"].annotation)
    assert set(FLAVOR_OF_CAPACITY) == set(capacities) - {"reservation"}, "a new capacity needs its flavor"
    for capacity, name in FLAVOR_OF_CAPACITY.items():
        scheduling = capacity_scheduling(capacity)
        spec = flavors[name]["spec"]
        assert spec["nodeLabels"] == {**V6E_2X4, **scheduling.node_selector}, name
        assert spec.get("tolerations", []) == scheduling.tolerations, name


def test_cluster_queue_holds_tpu_quota_in_every_flavor_and_checks_only_flex_start(rendered):
    objs = rendered["gke-kueue"]
    cq = one(objs, "ClusterQueue")
    (group,) = cq["spec"]["resourceGroups"]
    assert "google.com/tpu" in group["coveredResources"]
    assert [f["name"] for f in group["flavors"]] == list(FLAVOR_OF_CAPACITY.values())  # on-demand tried first
    for flavor in group["flavors"]:
        quotas = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        assert set(quotas) == set(group["coveredResources"]), flavor["name"]
        assert quotas["google.com/tpu"] > 0 and quotas["google.com/tpu"] % 8 == 0, "whole v6e-8 nodes"
    ns = one(objs, "Namespace")["metadata"]["name"]
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": ns}
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"

    (check,) = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert check["onFlavors"] == [FLAVOR_OF_CAPACITY["flex-start"]]
    admission = one(objs, "AdmissionCheck", check["name"])["spec"]
    assert admission["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    params = admission["parameters"]
    assert (params["apiGroup"], params["kind"]) == ("kueue.x-k8s.io", "ProvisioningRequestConfig")
    config = one(objs, "ProvisioningRequestConfig", params["name"])["spec"]
    assert config["provisioningClassName"] == "queued-provisioning.gke.io"
    assert config["managedResources"] == ["google.com/tpu"]


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
