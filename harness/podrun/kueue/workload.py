"""Kueue's jobframework for the emulator (kubernetes-sigs/kueue v0.19.2), pure: the Workload a queued Job or
JobSet gets, what starting it does to the owner, when it is finished, and schema checks on Kueue objects.

Each function names the upstream file and function it follows; read them before changing what it does.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema

from harness.crd_schemas import strict_crd_schema
from harness.podrun.controllers.scheduling import requests_of
from harness.podrun.pods.quantity import parse_quantity

GROUP_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # pkg/controller/constants QueueLabel
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # WorkloadPriorityClassLabel
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # JobUIDLabel
PODSET_LABEL = "kueue.x-k8s.io/podset"  # pkg/constants PodSetLabel, put on admitted pod templates
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"  # apis/kueue/v1beta2/constants.go ResourceInUseFinalizerName
MAX_PREFIX = 253 - 1 - 5  # workload_names.go: ShortWorkloadNames is off by default, so names may reach 253
# (owner kind, owner API group): the integrations emulated (pkg/controller/jobs/job, pkg/controller/jobs/jobset)
OWNERS = {"Job": ("batch/v1", "batch"), "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobset.x-k8s.io")}
# jobs/job/job_controller.go cleanLabels: the job controller's managedLabels it drops from the podset template,
# all but batch.kubernetes.io/job-name (legacyJobNameLabel "job-name" and both controller-uid labels go).
_JOB_MANAGED_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # apis/kueue/v1beta2/topology_types.go WorkloadAnnotation
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"  # pkg/constants LocalQueueLabel
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"  # pkg/constants ClusterQueueLabel
FAILED_TO_START = "FailedToStart"  # jobframework/reconciler.go FailedToStartFinishedReason
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DEPLOY_SCHEMAS = Path(__file__).resolve().parents[3] / "tests" / "deploy" / "schemas" / "kueue-v0.19.2-v1beta2.json"
_WORKLOAD_SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "kueue-v0.19.2-workload-v1beta2.json"


def workload_name(kind: str, name: str, uid: str) -> str:
    """pkg/controller/jobframework/workload_names.go GetWorkloadNameForOwnerWithGVK: `<kind lower>-<name>`
    cut to fit, then the first 5 hex digits of sha1(kind \\n group \\n name \\n uid)."""
    group = OWNERS[kind][1]
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()
    return f"{f'{kind.lower()}-{name}'[:MAX_PREFIX]}-{digest[:5]}"


def pod_sets(owner: dict[str, Any]) -> list[dict[str, Any]]:
    """pkg/controller/jobs/job/job_controller.go (Job).PodSets: one "main", count = min(parallelism, completions);
    pkg/controller/jobs/jobset/jobset_controller.go (JobSet).PodSets: one per replicatedJob, count = replicas *
    the child Job's pod count."""
    if owner["kind"] == "Job":
        template = copy.deepcopy(owner["spec"]["template"])
        labels = (template.get("metadata") or {}).get("labels") or {}
        for key in _JOB_MANAGED_LABELS:
            labels.pop(key, None)
        return [{"name": "main", "count": _job_pods(owner["spec"]), "template": template}]
    return [
        {
            "name": rj["name"],
            "count": int(rj.get("replicas", 1)) * _job_pods(rj["template"]["spec"]),
            "template": copy.deepcopy(rj["template"]["spec"]["template"]),
        }
        for rj in owner["spec"]["replicatedJobs"]
    ]


def _job_pods(job_spec: dict[str, Any]) -> int:
    count = int(job_spec.get("parallelism", 1))
    completions = job_spec.get("completions")
    return min(count, int(completions)) if completions is not None else count


class PriorityClassMissing(LookupError):
    """utilpriority.GetPriorityFromWorkloadPriorityClass's Get failed: the Workload is not created (reconcile error)."""


def build_workload(owner: dict[str, Any], priority_classes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """pkg/controller/jobframework/reconciler.go ConstructWorkload + utils.go NewWorkload + prepareWorkload:
    name, job-uid label, resource-in-use finalizer, controller ownerReference, queueName, podSets, priority.
    Priority (ExtractPriority): the priority-class label's WorkloadPriorityClass; else a pod priorityClassName
    (a k8s PriorityClass: not emulated, refused); else no class and priority 0 (no global default here)."""
    meta = owner["metadata"]
    kind = owner["kind"]
    spec: dict[str, Any] = {"queueName": meta["labels"][QUEUE_LABEL], "podSets": pod_sets(owner)}
    wpc = (meta.get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    if wpc:
        if wpc not in priority_classes:
            raise PriorityClassMissing(f'workloadpriorityclasses.kueue.x-k8s.io "{wpc}" not found')
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": wpc}
        spec["priority"] = int(priority_classes[wpc]["value"])
    elif any(ps["template"]["spec"].get("priorityClassName") for ps in spec["podSets"]):
        from harness.podrun.pods.volumes import NotEmulated

        raise NotEmulated("pod PriorityClass as a Workload's priority (only WorkloadPriorityClass is emulated)")
    else:
        spec["priority"] = 0
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(kind, meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "finalizers": [RESOURCE_IN_USE],
            "ownerReferences": [
                {
                    "apiVersion": OWNERS[kind][0],
                    "kind": kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def podset_requests(ps: dict[str, Any]) -> dict[str, Decimal]:
    """pkg/workload/workload.go totalRequests: per-pod requests (limits standing in for unset requests, as
    workload.AdjustResources does) times count."""
    return {k: v * int(ps.get("count", 1)) for k, v in requests_of(ps["template"]["spec"]).items()}


def format_quantity(value: Decimal, resource: str) -> str:
    """resource.Quantity's canonical text for what the emulator sums: binary suffixes for byte counts, m for
    fractions (close enough to upstream's formatter for the messages tests read). The service's kueue_setup.py has a
    twin; the emulator keeps its own because it imports nothing of the service it checks."""
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    n = int(value)
    if resource in ("memory", "ephemeral-storage") and n:
        for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if n % size == 0:
                return f"{n // size}{suffix}"
    return str(n)


class PodSetMergeConflict(ValueError):
    """pkg/podset/podset.go ErrInvalidPodSetUpdate: a permanent start error (podset.IsPermanent)."""


def _have_conflict(what: str, a: dict[str, str], b: dict[str, str]) -> None:
    """pkg/util/maps/maps.go HaveConflict, wrapped as podset.go BadPodSetsUpdateError words it."""
    for key, av in a.items():
        if key in b and b[key] != av:
            raise PodSetMergeConflict(
                f"invalid admission check PodSetUpdate: conflict for {what}: conflict for key={key}, value1={av}, value2={b[key]}"
            )


def podset_info(podset_name: str, flavors: list[dict[str, Any]], workload: dict[str, Any]) -> dict[str, Any]:
    """reconciler.go getPodSetsInfoFromStatus with v0.19.2's default feature gates: podset.go FromAssignment
    (each assigned flavor's nodeLabels copied over each other, tolerations appended), the workload annotation
    (TopologyAwareScheduling, beta, on), the podset label, and the local/cluster-queue labels
    (AssignQueueLabelsForPods, beta, on; the ClusterQueue's only when its name is a DNS-1123 label)."""
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for flavor in flavors:
        spec = flavor.get("spec") or {}
        selector.update(spec.get("nodeLabels") or {})  # utilmaps.Copy: a later flavor's value wins, no conflict
        tolerations += spec.get("tolerations") or []
    labels = {PODSET_LABEL: podset_name, LOCAL_QUEUE_LABEL: workload["spec"]["queueName"]}
    cq = workload["status"]["admission"]["clusterQueue"]
    if _DNS1123_LABEL.match(cq) and len(cq) <= 63:
        labels[CLUSTER_QUEUE_LABEL] = cq
    annotations = {WORKLOAD_ANNOTATION: workload["metadata"]["name"]}
    return {"labels": labels, "annotations": annotations, "nodeSelector": selector, "tolerations": tolerations}


def merge_podset_info(template: dict[str, Any], info: dict[str, Any]) -> None:
    """pkg/podset/podset.go Merge -> (*PodSetInfo).Merge, in place: a key the template already has with another
    value (annotations, labels, then nodeSelector) is PodSetMergeConflict; tolerations are not duplicated."""
    meta = template.setdefault("metadata", {})
    spec = template["spec"]
    current = {
        "annotations": dict(meta.get("annotations") or {}),
        "labels": dict(meta.get("labels") or {}),
        "nodeSelector": dict(spec.get("nodeSelector") or {}),
    }
    for what in ("annotations", "labels", "nodeSelector"):
        _have_conflict(what, current[what], info[what])
    for what in ("annotations", "labels", "nodeSelector"):
        merged = {**current[what], **info[what]}
        if merged:
            (spec if what == "nodeSelector" else meta)[what] = merged
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in info["tolerations"] if t not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations


def started_owner_spec(owner: dict[str, Any], workload: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """reconciler.go startJob -> (Job).RunWithPodSetsInfo / (JobSet).RunWithPodSetsInfo: suspend=false and each
    podset's template merged with its info (a JobSet: each replicatedJob's template; our JobSet controller
    copies templates into child Jobs only when it creates them, so children must not exist yet).
    Raises PodSetMergeConflict, which the caller turns into a failed start (reconciler.go: Finish FailedToStart)."""
    spec: dict[str, Any] = copy.deepcopy(owner["spec"])
    assignments = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}
    templates = (
        [("main", spec["template"])]
        if owner["kind"] == "Job"
        else [(rj["name"], rj["template"]["spec"]["template"]) for rj in spec["replicatedJobs"]]
    )
    for name, template in templates:
        names = list(dict.fromkeys(assignments[name].get("flavors", {}).values()))
        merge_podset_info(template, podset_info(name, [flavors[n] for n in names], workload))
    spec["suspend"] = False
    return spec


def finished(owner: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the Workload's Finished condition, from (Job).Finished / (JobSet).Finished and
    reconciler.go: Succeeded or Failed with the owner's condition message."""
    done = {"Job": (("Complete", "Succeeded"), ("Failed", "Failed")), "JobSet": (("Completed", "Succeeded"), ("Failed", "Failed"))}[
        owner["kind"]
    ]
    for cond in (owner.get("status") or {}).get("conditions") or []:
        for kind, reason in done:
            if cond.get("type") == kind and cond.get("status") == "True":
                return reason, cond.get("message", "")
    return None


# -- schemas ------------------------------------------------------------------------------------------------


@functools.cache
def _validators() -> dict[str, jsonschema.Draft7Validator]:
    schemas = {**json.loads(_DEPLOY_SCHEMAS.read_text()), **json.loads(_WORKLOAD_SCHEMA.read_text())}
    out = {}
    for kind, schema in schemas.items():
        schema = strict_crd_schema(copy.deepcopy(schema))
        schema["properties"]["metadata"] = {"type": "object"}
        out[kind] = jsonschema.Draft7Validator(schema)
    return out


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """What Kueue v0.19.2's v1beta2 CRD schema rejects in obj (CEL rules are not evaluated)."""
    if obj.get("apiVersion") != GROUP_VERSION:
        return [f"apiVersion {obj.get('apiVersion')!r}: the emulator serves {GROUP_VERSION} only"]
    validator = _validators().get(obj["kind"])
    if validator is None:
        return [f"kind {obj['kind']}: no v0.19.2 schema vendored"]
    return [f"{obj['kind']}/{obj['metadata'].get('name')}: {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]


def quantity(value: Any) -> Decimal:
    return parse_quantity(str(value))
