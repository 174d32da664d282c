"""A healthy Kueue-on-GKE cluster on kmock, for the doctor and the submit-time flavor check: discovery,
a team LocalQueue -> ClusterQueue -> on-demand and spot ResourceFlavors (k8s/kueue/'s shapes, Kueue v0.19.2
v1beta2), nodes behind both flavors, the HF token Secret, and SelfSubjectAccessReview answers. Tests plant
one failure each on top.

Kueue's side of a create (harness/podrun/api/admission.py and kueue/config.py, Kueue v0.19.2): dryRun=All is admitted
and not stored; Kueue's and JobSet's webhooks fail closed when `down` names their Service; Kueue's job webhook
defaults a Job to the LocalQueue `default`; and a Job/JobSet the Configuration (`set_config`, stored as
kueue-system/kueue-manager-config) lets Kueue reconcile gets its Workload at once (podrun/kueue/workload.py build_workload)."""

from __future__ import annotations

from typing import Any

from kmock._internal.rendering import Response  # not re-exported by kmock's typed API

from harness.podrun.api.admission import KUEUE_WEBHOOK_SERVICE, install_admission
from harness.podrun.kueue.config import (
    DEFAULT_LOCAL_QUEUE,
    MANAGER_CONFIGMAP,
    KueueConfiguration,
    default_on_create,
    namespace_labels,
    reconciles,
)
from harness.podrun.kueue.workload import build_workload

NS = "rljob"
KUEUE = "kueue.x-k8s.io/v1beta2"
TPU_LABELS = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4"}
FLAVORS = {
    "tpu-v6e-2x4-on-demand": ({**TPU_LABELS, "rljob.dev/capacity": "on-demand"}, [], 8),
    "tpu-v6e-2x4-spot": (
        {**TPU_LABELS, "rljob.dev/capacity": "spot", "cloud.google.com/gke-spot": "true"},
        [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        16,
    ),
}
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}


def not_found(plural: str, name: str) -> Response:
    """What a real API server answers for a missing object of a served resource (a NotFound Status)."""
    return Response(
        status=404,
        payload={
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": "NotFound",
            "code": 404,
            "message": f'{plural}.kueue.x-k8s.io "{name}" not found',
            "details": {"name": name, "group": "kueue.x-k8s.io", "kind": plural},
        },
    )


def forbidden(message: str = "forbidden") -> Response:
    """What a real API server answers when RBAC refuses the request (a Forbidden Status)."""
    return Response(
        status=403,
        payload={
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": message,
        },
    )


def active(status: str = "True", reason: str = "Ready", message: str = "Can admit new workloads") -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "Active", "status": status, "reason": reason, "message": message, "lastTransitionTime": "2026-11-30T20:00:00Z"}
        ]
    }


class KueueCluster:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.denied: set[tuple[str, str]] = set()  # (resource, verb) the SelfSubjectAccessReview refuses
        self.reviews: list[dict[str, Any]] = []
        for res, namespaced in (
            ("batch/v1/jobs", True),
            ("v1/pods", True),
            ("v1/events", True),
            ("v1/configmaps", True),
            ("v1/secrets", True),
            ("v1/nodes", False),
            ("jobset.x-k8s.io/v1alpha2/jobsets", True),
            (f"{KUEUE}/workloads", True),
            (f"{KUEUE}/localqueues", True),
            (f"{KUEUE}/clusterqueues", False),
            (f"{KUEUE}/resourceflavors", False),
            (f"{KUEUE}/admissionchecks", False),
            ("visibility.kueue.x-k8s.io/v1beta2/localqueues", True),
        ):
            server.resources[res] = {"namespaced": namespaced, "verbs": ["get", "list", "watch", "create", "patch", "delete"]}
        server["post /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"] << self._review
        self.admission = install_admission(server)
        self.admission.mutators.setdefault(KUEUE_WEBHOOK_SERVICE, []).append(self._kueue_webhook)
        self.config = KueueConfiguration.installed()
        self.set_config(self.config)
        self.namespace_labels: dict[str, str] = {}  # the rljob Namespace's own labels (tests set them)
        # kmock reads GET /api/v1/namespaces/NAME as a namespace with no resource: the Namespace is answered here.
        server[f"get /api/v1/namespaces/{NS}"] << (
            lambda _request: {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NS, "labels": namespace_labels(NS, {"metadata": {"labels": self.namespace_labels}})},
            }
        )
        for path in (f"/apis/batch/v1/namespaces/{NS}/jobs", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"):
            server[f"post {path}"] << self._created
        self.put(f"{KUEUE}/localqueues", "team-ml", {"spec": {"clusterQueue": "rljob-v6e"}, "status": active()}, NS)
        self.put_cluster_queue()
        for name, (labels, tolerations, _) in FLAVORS.items():
            self.put(f"{KUEUE}/resourceflavors", name, {"spec": {"nodeLabels": labels, "tolerations": tolerations}})
        self.put_node("gke-tpu-od-1", FLAVORS["tpu-v6e-2x4-on-demand"][0], [TPU_TAINT])
        self.put_node(
            "gke-tpu-spot-1",
            FLAVORS["tpu-v6e-2x4-spot"][0],
            [TPU_TAINT, {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
        )
        self.put("v1/secrets", "rljob-hf-token", {"type": "Opaque", "data": {"token": "aGYtc2VjcmV0LXZhbHVl"}}, NS)

    def _review(self, request: Any) -> Any:
        attrs = request.data["spec"]["resourceAttributes"]
        resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        self.reviews.append(attrs)
        # kmock stores every create; a review is not stored by a real API server (and the next would conflict).
        self.server.objects[request.resource, None, None].delete()
        allowed = (resource, attrs["verb"]) not in self.denied
        return Response(
            status=201,
            payload={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": request.data["spec"],
                "status": {"allowed": allowed, **({} if allowed else {"reason": "no RBAC policy matched"})},
            },
        )

    def set_config(self, config: KueueConfiguration, *, readable: bool = True) -> None:
        """Kueue's manager Configuration; readable=False: its ConfigMap answers 403 (no RBAC to read it)."""
        self.config = config
        self.put("v1/configmaps", MANAGER_CONFIGMAP, {"data": config.configmap()["data"]}, config.namespace)
        if not readable:
            path = f"get /api/v1/namespaces/{config.namespace}/configmaps/{MANAGER_CONFIGMAP}"
            self.server[path] << forbidden()

    def _ns_labels(self, namespace: str) -> dict[str, str]:
        return namespace_labels(namespace, {"metadata": {"labels": self.namespace_labels if namespace == NS else {}}})

    def _kueue_webhook(self, obj: dict[str, Any]) -> None:
        ns = (obj.get("metadata") or {}).get("namespace") or NS
        exists = any(
            k[0].plural == "localqueues" and k[1] == ns and k[2] == DEFAULT_LOCAL_QUEUE and not o.deleted
            for k, o in self.server.objects.items()
        )
        default_on_create(obj, self.config, default_queue_exists=exists, ns_labels=self._ns_labels(ns))

    def _created(self, request: Any) -> Any:
        """After kmock stored a Job/JobSet: stamp a uid, and give it its Workload when Kueue reconciles it."""
        meta = request.data["metadata"]
        obj = self.server.objects[request.resource, request.namespace or meta.get("namespace"), meta["name"]]
        if not obj.get("metadata", {}).get("uid"):
            obj.patch({"metadata": {"uid": f"uid-{meta['name']}", "namespace": request.namespace}})
        owner = dict(obj.raw)
        if reconciles(owner, self.config, self._ns_labels(request.namespace)):
            wl = build_workload(owner, {})
            self.put(
                f"{KUEUE}/workloads",
                wl["metadata"]["name"],
                {k: v for k, v in wl.items() if k not in ("apiVersion", "kind", "metadata")} | {"metadata": wl["metadata"]},
                request.namespace,
            )
        return Response(status=201, payload=owner)

    def put(self, resource: str, name: str, body: dict[str, Any], namespace: str | None = None) -> None:
        group_version, kind = resource.rsplit("/", 1)
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        self.server.objects[resource, namespace, name] = {"apiVersion": group_version, "kind": kind, "metadata": meta, **body}

    def drop(self, resource: str, name: str, namespace: str | None = None) -> None:
        self.server.objects[resource, namespace, name].delete()

    def put_cluster_queue(self, status: dict[str, Any] | None = None, checks: list[str] = ()) -> None:  # type: ignore[assignment]
        flavors = [
            {
                "name": name,
                "resources": [
                    {"name": "cpu", "nominalQuota": 170},
                    {"name": "memory", "nominalQuota": "1300Gi"},
                    {"name": "google.com/tpu", "nominalQuota": quota},
                ],
            }
            for name, (_, _, quota) in FLAVORS.items()
        ]
        spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["cpu", "memory", "google.com/tpu"], "flavors": flavors}]}
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
        self.put(f"{KUEUE}/clusterqueues", "rljob-v6e", {"spec": spec, "status": status or active()})

    def put_node(self, name: str, labels: dict[str, str], taints: list[dict[str, str]]) -> None:
        self.put("v1/nodes", name, {"spec": {"taints": taints}, "status": {}, "metadata": {"name": name, "labels": labels}})
