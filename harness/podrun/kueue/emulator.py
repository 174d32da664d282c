"""KueueEmulator: Kueue's controllers on kmock, run by EmulatedCluster's reconcile loop before the JobSet
and Job controllers (decisions: kueue/reconcile.py, kueue/controller.py, kueue/workload.py).

    kueue = KueueEmulator(rule="flavor-keys", serves_provisioning_request=False, config=KueueConfiguration(), version="v0.20.0")
    async with EmulatedCluster(kmock, tmp_path, nodes=[...], kueue=kueue) as cluster:
        for obj in (flavor, cluster_queue, local_queue):
            await cluster.create(obj)      # Kueue kinds go through the emulator: schema-checked, then stored
        await cluster.create(suspended_job_with_queue_name_label)
        job = cluster.get("Job", "ns", "job")
        await cluster.wait_for(lambda: (kueue.workload_for(job) or {}).get("status", {}).get("admission"), "admission")
        pod = cluster.pods("ns", **{"job-name": "job"})[0]   # pod["spec"]["nodeName"]: where it landed

Kueue objects live in kmock as an API server would keep them (cluster-scoped ResourceFlavor, ClusterQueue,
AdmissionCheck, ProvisioningRequestConfig, WorkloadPriorityClass; namespaced LocalQueue, Workload), so
the service reads them through the same HTTP API. Every object the emulator is given or writes is checked
against Kueue v0.19.2's v1beta2 CRD schema (workload.py schema_errors) and refused when it fails.

The manager's Configuration (config.py KueueConfiguration; by default what the released manifests install)
decides which Jobs and JobSets Kueue manages; it is also stored as the kueue-system/kueue-manager-config
ConfigMap, where Kueue's manager reads it, so the doctor can read it too. Kueue's job webhooks run on every
Job/JobSet create (admission.py); `kueue.stop()` takes Kueue's controller down: its webhooks then refuse every
create with the API server's "no endpoints available" error and nothing is reconciled until `kueue.start()`.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from kmock._internal.rendering import Response

from harness.podrun.api.admission import KUEUE_WEBHOOK_SERVICE, Admission, install_admission
from harness.podrun.api.kapi import ApiError, KApi

from . import versions as kueue_versions
from . import visibility as kueue_visibility
from .config import (
    DEFAULT_LOCAL_QUEUE,
    MANAGER_CONFIGMAP,
    KueueConfiguration,
    default_on_create,
    namespace_labels,
    owner_managed_by_kueue,
)
from .controller import RULES
from .reconcile import KueueDecision, KueueState, decide_kueue
from .workload import GROUP_VERSION, PRIORITY_CLASS_LABEL, QUEUE_LABEL, schema_errors, workload_name

# kind -> (plural, namespaced), kueue.x-k8s.io/v1beta2
KUEUE_KINDS: dict[str, tuple[str, bool]] = {
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "AdmissionCheck": ("admissionchecks", False),
    "ProvisioningRequestConfig": ("provisioningrequestconfigs", False),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "LocalQueue": ("localqueues", True),
    "Workload": ("workloads", True),
}


class InvalidKueueObject(ValueError):
    """What the API server would answer 422 to: the object fails the CRD's schema."""


def kueue_path(kind: str, namespace: str | None, name: str | None = None) -> str:
    plural, namespaced = KUEUE_KINDS[kind]
    base = f"/apis/{GROUP_VERSION}/" + (f"namespaces/{namespace}/{plural}" if namespaced else plural)
    return f"{base}/{name}" if name else base


def _without_nulls(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v is not None}


class KueueEmulator:
    def __init__(
        self,
        *,
        rule: str = "flavor-keys",
        serves_provisioning_request: bool = False,
        config: KueueConfiguration | None = None,
        version: str = "v0.19.2",
    ) -> None:
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}: flavor-keys is v0.17.6+/v0.18.2+/v0.19.x, union-keys older")
        self.rule = rule
        self.version = kueue_versions.check(version)  # where v0.19.2 and v0.20.0 differ: kueue/versions.py
        self.serves_provisioning_request = serves_provisioning_request
        self.config = config or KueueConfiguration.installed()
        self.kmock: Any = None
        self.admission: Admission | None = None
        self.running = True

    def register(self, kmock: Any) -> None:
        self.kmock = kmock
        for plural, namespaced in KUEUE_KINDS.values():
            kmock.resources[f"{GROUP_VERSION}/{plural}"] = {
                "namespaced": namespaced,
                "verbs": ["list", "watch", "get", "create", "patch", "delete"],
            }
        kmock.objects["v1/configmaps", self.config.namespace, MANAGER_CONFIGMAP] = self.config.configmap()
        self.admission = install_admission(kmock)
        self.admission.mutators.setdefault(KUEUE_WEBHOOK_SERVICE, []).append(self.default_on_create)
        kmock.resources[f"{kueue_visibility.GROUP_VERSION}/localqueues/pendingworkloads"] = {"namespaced": True, "verbs": ["get"]}
        kmock[lambda req: req.url.path.startswith(f"/apis/{kueue_visibility.GROUP_VERSION}/")] << self._pending_workloads

    def _pending_workloads(self, request: Any) -> Any:
        """The visibility API's LocalQueue endpoint (kueue/visibility.py), served by the emulated Kueue."""
        parts = request.url.path.strip("/").split("/")  # apis, group, version, namespaces, NS, localqueues, NAME, pendingworkloads
        found = None
        if len(parts) == 8 and (parts[3], parts[5], parts[7]) == ("namespaces", "localqueues", "pendingworkloads"):
            query = request.url.query
            found = kueue_visibility.pending_workloads(
                self.list("Workload"),
                self.list("LocalQueue"),
                parts[4],
                parts[6],
                limit=int(query.get("limit", 0) or 0),
                offset=int(query.get("offset", 0) or 0),
            )
        if found is None:
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            return Response(status=404, payload={**status, "message": f"localqueue {'/'.join(parts[4:7])} not found"})
        return found

    def stop(self) -> None:
        """Kueue's controller manager is down: no webhook endpoints (creates refused), no reconciling."""
        assert self.admission is not None, "register first (EmulatedCluster does)"
        self.running = False
        self.admission.down.add(KUEUE_WEBHOOK_SERVICE)

    def start(self) -> None:
        assert self.admission is not None, "register first (EmulatedCluster does)"
        self.running = True
        self.admission.down.discard(KUEUE_WEBHOOK_SERVICE)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        stored = next(
            (
                o.raw
                for (res, _ns, name), o in list(self.kmock.objects.items())
                if res.plural == "namespaces" and name == namespace and not o.deleted
            ),
            None,
        )
        return namespace_labels(namespace, stored)

    def default_on_create(self, obj: dict[str, Any]) -> None:
        """Kueue's job webhook on a Job/JobSet create (config.py default_on_create), as admission calls it."""
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        exists = self.get("LocalQueue", ns, DEFAULT_LOCAL_QUEUE) is not None
        default_on_create(obj, self.config, default_queue_exists=exists, ns_labels=self.namespace_labels(ns))
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if (
            kueue_versions.defaults_priority_class(self.version)
            and QUEUE_LABEL in labels
            and PRIORITY_CLASS_LABEL not in labels
            and not owner_managed_by_kueue(obj, self.config)
            and self.get("WorkloadPriorityClass", None, kueue_versions.DEFAULT_PRIORITY_CLASS) is not None
        ):  # jobframework/defaults.go ApplyDefaultWorkloadPriorityClass (v0.20)
            labels[PRIORITY_CLASS_LABEL] = kueue_versions.DEFAULT_PRIORITY_CLASS

    # -- reads --------------------------------------------------------------------------------------------

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        plural, _ = KUEUE_KINDS[kind]
        group, version = GROUP_VERSION.split("/")
        return [
            copy.deepcopy(obj.raw)
            for (res, ns, _name), obj in list(self.kmock.objects.items())
            if res.plural == plural
            and res.group == group
            and res.version == version
            and not obj.deleted
            and (namespace is None or ns == namespace)
        ]

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next((o for o in self.list(kind, namespace) if o["metadata"]["name"] == name), None)

    def workload_for(self, owner: dict[str, Any]) -> dict[str, Any] | None:
        meta = owner["metadata"]
        return self.get("Workload", meta["namespace"], workload_name(owner["kind"], meta["name"], meta["uid"]))

    # -- writes -------------------------------------------------------------------------------------------

    async def create(self, api: KApi, obj: dict[str, Any]) -> dict[str, Any]:
        errors = schema_errors(obj)
        if errors:
            raise InvalidKueueObject("\n".join(errors))
        result: dict[str, Any] = await api.send("POST", kueue_path(obj["kind"], obj["metadata"].get("namespace")), obj)
        return result

    async def _patch_status(self, api: KApi, kind: str, ns: str | None, name: str, status: dict[str, Any]) -> None:
        current = self.get(kind, ns, name)
        if current is None:
            return
        merged = {**current, "status": _without_nulls({**(current.get("status") or {}), **status})}
        errors = schema_errors(merged)
        if errors:
            raise InvalidKueueObject("the emulator wrote an invalid object:\n" + "\n".join(errors))
        await api.send("PATCH", kueue_path(kind, ns, name), {"status": status})

    async def reconcile(self, api: KApi, now: dt.datetime) -> None:
        if not self.running:
            return
        for w in self.list("Workload"):
            if w["metadata"].get("deletionTimestamp") and w["metadata"].get("finalizers"):
                await api.send(
                    "PATCH", kueue_path("Workload", w["metadata"]["namespace"], w["metadata"]["name"]), {"metadata": {"finalizers": []}}
                )

        def by_name(kind: str) -> dict[str, dict[str, Any]]:
            return {o["metadata"]["name"]: o for o in self.list(kind)}

        owners = [*api.list("Job"), *api.list("JobSet")]
        state = KueueState(
            flavors=by_name("ResourceFlavor"),
            cluster_queues=by_name("ClusterQueue"),
            checks=by_name("AdmissionCheck"),
            priority_classes=by_name("WorkloadPriorityClass"),
            prov_configs=set(by_name("ProvisioningRequestConfig")),
            local_queues=self.list("LocalQueue"),
            workloads=self.list("Workload"),
            owners=owners,
            config=self.config,
            namespace_labels={ns: self.namespace_labels(ns) for ns in {o["metadata"]["namespace"] for o in owners}},
            pods=api.list("Pod"),
        )
        decision = decide_kueue(state, rule=self.rule, serves_provisioning=self.serves_provisioning_request, now=now, version=self.version)
        await self._apply(api, decision)

    async def _apply(self, api: KApi, d: KueueDecision) -> None:
        for wl in d.create:
            await self.create(api, wl)
        for kind, ns, name, status in d.status:
            await self._patch_status(api, kind, ns, name, status)
        for owner, spec in d.start:
            meta = owner["metadata"]
            await api.patch(owner["kind"], meta["namespace"], meta["name"], {"spec": spec})
        for wl in d.release:
            path = kueue_path("Workload", wl["metadata"]["namespace"], wl["metadata"]["name"])
            try:
                await api.send("PATCH", path, {"metadata": {"finalizers": []}})
                if not wl["metadata"].get("deletionTimestamp"):
                    await api.send("DELETE", path, {"propagationPolicy": "Background"})
            except ApiError as e:
                if e.status != 404:  # gone already: what the garbage collector wanted
                    raise
        for obj, kind, type_, reason, message in d.events:
            if obj["metadata"].get("namespace"):
                await api.event(obj, kind, reason, message, type_, component="kueue-admission")

    # -- what tests read ----------------------------------------------------------------------------------

    def condition(self, kind: str, namespace: str | None, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(kind, namespace, name)
        return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)
