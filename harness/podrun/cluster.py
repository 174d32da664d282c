"""EmulatedCluster: kmock plus the controllers a real cluster runs, so that what the service creates runs.

    async with EmulatedCluster(kmock, tmp_path) as cluster:   # kmock: the pytest fixture
        ...  # create a Job through any client: its pods are created, scheduled and run as processes

One event loop task reconciles, every `tick_s`: the JobSet controller (child Jobs), the Job controller
(pods, counting, conditions, TTL), the garbage collector (objects whose controller owner is gone), and
the node's scheduler and kubelet (kubelet.py). Decisions are the pure functions in job_controller.py and
jobset_controller.py. Disruptions come from `evict()`: the DisruptionTarget condition and a graceful
delete, as the Eviction API does (PodDisruptionBudgets are not consulted).
With `tls=True`, pods reach the API over HTTPS with an automounted service-account token (api_tls.py).

Several nodes: `EmulatedCluster(..., nodes=[Node.gke_tpu("tpu-spot-0", "spot"), Node.gke_cpu("cpu-0")])`
gives each node its own kubelet and puts kube-scheduler's choice in front (scheduler.py); a pod's
`spec.nodeName` says where it landed. Kueue: `kueue=KueueEmulator(rule=..., serves_provisioning_request=...)`
runs Kueue's controllers first in every pass (kueue.py); `create()` takes Kueue kinds too.
JobSet's pod webhook: `jobset_pod_webhook="v0.12.0"` admits every pod the Job controller creates as that
release does (jobset_pod_webhook.py; "1dc6eec9" is the unreleased fix); a refused pod is a FailedCreate event on
its Job and is tried again after `retry_s`. `shut_down_node()` is the kubelet ending a node's pods itself
(graceful node shutdown, node-pressure eviction): DisruptionTarget, then Failed, never deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import kmock as kmock_lib

from harness.podrun.api.admission import JOBSET_WEBHOOK_SERVICE, install_admission
from harness.podrun.api.api_tls import tls_front
from harness.podrun.api.kapi import KApi, now_iso, register_resources
from harness.podrun.controllers.job_controller import TRACKING_FINALIZER, decide_job, is_finished, owned_by
from harness.podrun.controllers.jobset_controller import decide_jobset
from harness.podrun.controllers.jobset_pod_webhook import admit_pod
from harness.podrun.controllers.kubelet import Kubelet
from harness.podrun.controllers.scheduler import Scheduler
from harness.podrun.controllers.scheduling import Node
from harness.podrun.pods.envvars import ApiAccess
from harness.podrun.pods.runner import PodRunner

from .kueue.emulator import KUEUE_KINDS, KueueEmulator

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' generateName draws from


def install_api_defaults(kmock: Any) -> None:
    """What the API server stamps on create (uid, creationTimestamp); kmock stores bodies as sent."""

    def stamp(request: Any) -> Any:
        meta = request.data.get("metadata", {})
        obj = kmock.objects[request.resource, request.namespace or meta.get("namespace"), meta["name"]]
        if not obj.get("metadata", {}).get("uid"):
            obj.patch({"metadata": {"uid": str(uuid.uuid4()), "creationTimestamp": meta.get("creationTimestamp") or now_iso()}})
        return dict(obj.raw)

    kmock[kmock_lib.action.CREATE] << 201 << stamp


class EmulatedCluster:
    def __init__(
        self,
        kmock: Any,
        work_dir: Path,
        *,
        node: Node | None = None,
        nodes: list[Node] | None = None,
        kueue: KueueEmulator | None = None,
        tls: bool = False,
        jobset_pod_webhook: Literal["v0.12.0", "1dc6eec9"] | None = None,
        install_defaults: bool = True,
        tick_s: float = 0.05,
        pod_backoff_s: float = 0.2,
        restart_backoff_s: float = 0.5,
        retry_s: float = 0.5,
    ) -> None:
        if node is not None and nodes is not None:
            raise ValueError("pass node= (one node, the kubelet schedules) or nodes= (kube-scheduler in front), not both")
        if nodes is not None and len({n.name for n in nodes}) != len(nodes):
            raise ValueError("node names must be unique")
        self.nodes = nodes or [node or Node.local()]
        self.kmock, self.work_dir, self.node = kmock, work_dir, self.nodes[0]
        self._multi_node = nodes is not None
        self.kueue = kueue
        self.jobset_pod_webhook = jobset_pod_webhook
        self._refused_at: dict[str, float] = {}  # Job uid -> when the webhook last refused one of its pods
        self.api = KApi(kmock)
        self._tls, self._install_defaults = tls, install_defaults
        self._tick_s, self._pod_backoff_s = tick_s, pod_backoff_s
        self._restart_backoff_s, self._retry_s = restart_backoff_s, retry_s
        self.kubelet: Kubelet | None = None  # the first node's (the only one's, by default)
        self.kubelets: dict[str, Kubelet] = {}
        self.scheduler: Scheduler | None = None
        self.access: ApiAccess | None = None
        self._task: asyncio.Task[None] | None = None
        self._stack = contextlib.AsyncExitStack()
        self.failure: BaseException | None = None
        self.admission = install_admission(kmock)
        self.jobset_controller_running = True

    def stop_jobset_controller(self) -> None:
        """JobSet's controller manager is down: its webhook has no endpoints and no JobSet is reconciled."""
        self.jobset_controller_running = False
        self.admission.down.add(JOBSET_WEBHOOK_SERVICE)

    def start_jobset_controller(self) -> None:
        self.jobset_controller_running = True
        self.admission.down.discard(JOBSET_WEBHOOK_SERVICE)

    async def __aenter__(self) -> EmulatedCluster:
        register_resources(self.kmock)
        if self._install_defaults:
            install_api_defaults(self.kmock)
        if self._tls:
            server = self.kmock.servers[0]
            self.access = await self._stack.enter_async_context(tls_front(server.host, server.port))
        if self.kueue is not None:
            self.kueue.register(self.kmock)
        for node in self.nodes:
            work_dir = self.work_dir if not self._multi_node else self.work_dir / node.name
            self.kubelets[node.name] = Kubelet(
                self.api, work_dir, node, access=self.access, restart_backoff_s=self._restart_backoff_s, retry_s=self._retry_s
            )
        self.kubelet = self.kubelets[self.node.name]
        for kubelet in self.kubelets.values():
            kubelet.wake = self.kubelet.wake  # one loop wakes for any node's change
        if self._multi_node:
            self.scheduler = Scheduler(self.api, self.kubelets, self.nodes)
        self.kmock[lambda req: req.subresource == "log"] << self._serve_log
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._task is not None and self.kubelet is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        runners = [r for kubelet in self.kubelets.values() for r in kubelet.runners.values()]
        for runner in runners:
            runner.terminate(grace_s=min(runner.grace_s, 5.0))
        await asyncio.to_thread(lambda: [r.wait(10) for r in runners])
        for runner in runners:
            runner.cleanup()
        await self._stack.aclose()
        if self.failure is not None and exc[0] is None:
            raise self.failure

    # -- what tests call ------------------------------------------------------------------------------

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] in KUEUE_KINDS and obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            assert self.kueue is not None, "Kueue objects need EmulatedCluster(kueue=KueueEmulator(...))"
            return await self.kueue.create(self.api, obj)
        return await self.api.create(obj)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if kind in KUEUE_KINDS and self.kueue is not None:
            return self.kueue.get(kind, namespace, name)
        assert namespace is not None
        return self.api.get(kind, namespace, name)

    def node_of(self, namespace: str, pod_name: str) -> Node | None:
        """The node the pod was bound to (None while it is unscheduled)."""
        pod = self.api.get("Pod", namespace, pod_name)
        bound = ((pod or {}).get("spec") or {}).get("nodeName")
        return next((n for n in self.nodes if n.name == bound), None)

    def pods(self, namespace: str, **labels: str) -> list[dict[str, Any]]:
        return [
            p for p in self.api.list("Pod", namespace) if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def runner(self, namespace: str, name: str) -> PodRunner | None:
        return next((r for k in self.kubelets.values() for r in [k.runner(namespace, name)] if r is not None), None)

    def _kubelet_of(self, namespace: str, name: str) -> Kubelet:
        node = self.node_of(namespace, name)
        return self.kubelets[node.name] if node is not None else self.kubelets[self.node.name]

    def _serve_log(self, request: Any) -> Any:
        return self._kubelet_of(request.namespace, request.name).serve_log(request)

    async def evict(
        self,
        namespace: str,
        name: str,
        *,
        reason: str = "EvictionByEvictionAPI",
        message: str = "Eviction API: evicting",
        grace_s: float | None = None,
    ) -> None:
        """Disrupt a pod: DisruptionTarget=True, then a graceful delete (SIGTERM, SIGKILL after the grace)."""
        pod = self.get("Pod", namespace, name)
        assert pod is not None, f"no pod {namespace}/{name}"
        kubelet = self._kubelet_of(namespace, name)
        kubelet.set_condition(
            pod, {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message, "lastTransitionTime": now_iso()}
        )
        if grace_s is not None:
            kubelet.set_grace(pod, grace_s)
        await kubelet.sync(self._pods_for_kubelets())  # the condition lands before the deletion
        await self.api.delete("Pod", namespace, name)

    async def shut_down_node(self, node_name: str, *, grace_s: float | None = None) -> list[str]:
        """The kubelet ends every pod on the node itself (graceful node shutdown, as on a TPU host's maintenance):
        DisruptionTarget (TerminationByKubelet), SIGTERM, Failed; the pods are not deleted. Their names."""
        kubelet = self.kubelets[node_name]
        ended = []
        for pod in self.api.list("Pod"):
            meta = pod["metadata"]
            runner = kubelet.runner(meta["namespace"], meta["name"])
            if pod["spec"].get("nodeName") != node_name or runner is None or is_finished(pod):
                continue
            message = "Pod was terminated in response to imminent node shutdown."
            cond = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message}
            kubelet.set_condition(pod, {**cond, "lastTransitionTime": now_iso()})
            await kubelet.sync(self._pods_for_kubelets())  # the condition lands before the pod ends
            runner.terminate(grace_s)
            ended.append(meta["name"])
        return ended

    async def wait_for(self, check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.failure is not None:
                raise self.failure
            value = check()
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")

    # -- the reconcile loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self.kubelet is not None
        try:
            while True:
                await self.reconcile_once()
                errors = [e for kubelet in self.kubelets.values() for e in kubelet.errors()]
                if errors:
                    raise errors[0]
                self.kubelet.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.kubelet.wake.wait(), self._tick_s)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - surfaced by wait_for and on exit
            self.failure = e

    async def reconcile_once(self) -> None:
        assert self.kubelet is not None
        now = dt.datetime.now(dt.UTC)
        if self.kueue is not None:
            await self.kueue.reconcile(self.api, now)
        for jobset in self.api.list("JobSet") if self.jobset_controller_running else []:
            await self._reconcile_jobset(jobset, now)
        pods = self.api.list("Pod")
        for job in self.api.list("Job"):
            await self._reconcile_job(job, pods, now)
        await self._collect_garbage()
        if self.scheduler is not None:
            await self.scheduler.schedule(self.api.list("Pod"))
        pods = self._pods_for_kubelets()
        for kubelet in self.kubelets.values():
            await kubelet.sync(pods)

    def _pods_for_kubelets(self) -> list[dict[str, Any]]:
        """With a scheduler in front, kubelets see bound pods only, so they never schedule one themselves."""
        pods = self.api.list("Pod")
        return [p for p in pods if p["spec"].get("nodeName")] if self.scheduler is not None else pods

    async def _reconcile_jobset(self, jobset: dict[str, Any], now: dt.datetime) -> None:
        meta = jobset["metadata"]
        children = [j for j in self.api.list("Job", meta["namespace"]) if owned_by(j, meta["uid"])]
        d = decide_jobset(jobset, children, now=now)
        for name in d.delete:
            await self.api.delete("Job", meta["namespace"], name)
        for name, suspend in d.suspend.items():
            body: dict[str, Any] = {"spec": {"suspend": suspend}}
            if not suspend:
                body["spec"]["template"] = _resumed_template(jobset, children, name)
            await self.api.patch("Job", meta["namespace"], name, body)
        for job in d.create:
            await self.api.create(job)
        if d.status is not None:
            await self.api.patch("JobSet", meta["namespace"], meta["name"], {"status": d.status})
        if d.delete_jobset:
            await self.api.delete("JobSet", meta["namespace"], meta["name"])

    async def _reconcile_job(self, job: dict[str, Any], pods: list[dict[str, Any]], now: dt.datetime) -> None:
        meta = job["metadata"]
        ns = meta["namespace"]
        d = decide_job(
            job,
            [p for p in pods if p["metadata"]["namespace"] == ns],
            now=now,
            new_suffix=lambda: "".join(random.choices(_SUFFIX_ALPHABET, k=5)),
            backoff_base_s=self._pod_backoff_s,
        )
        for name in d.delete:
            await self.api.delete("Pod", ns, name)
        for name in d.release:
            await self.api.patch("Pod", ns, name, {"metadata": {"finalizers": []}})
        refused = 0
        if d.create and time.monotonic() - self._refused_at.get(meta["uid"], -1e9) < self._retry_s:
            refused, d.create = len(d.create), []  # the controller's rate limit after a failed create
        for pod in d.create:
            sa = pod["spec"].get("serviceAccountName") or "default"
            if sa != "default" and self.api.get("ServiceAccount", ns, sa) is None:
                await self.api.event(
                    job,
                    "Job",
                    "FailedCreate",
                    f'Error creating: pods "{meta["name"]}-" is forbidden: '
                    f'error looking up service account {ns}/{sa}: serviceaccount "{sa}" not found',
                    "Warning",
                    component="job-controller",
                )
                d.status = None  # nothing was created: the next pass tries again
                break
            if self.jobset_pod_webhook is not None:
                admission = admit_pod(
                    pod,
                    self.api.list("Pod", ns),
                    {n.name: n.labels for n in self.nodes},
                    leave_out_finished=self.jobset_pod_webhook == "1dc6eec9",
                )
                if admission.pod is None:
                    # pkg/controller/controller_utils.go CreatePodsWithGenerateName: "Error creating: <err>"
                    await self.api.event(
                        job, "Job", "FailedCreate", f"Error creating: {admission.refused}", "Warning", component="job-controller"
                    )
                    self._refused_at[meta["uid"]] = time.monotonic()
                    refused += 1
                    continue
                pod = admission.pod
            await self.api.create(pod)
        if refused:
            status = d.status if d.status is not None else dict(job.get("status") or {})
            status["active"] = max(0, int(status.get("active", 0)) - refused)
            d.status = status if status != job.get("status") else None
        for type_, reason, message in d.events:
            await self.api.event(job, "Job", reason, message, type_, component="job-controller")
        if d.status is not None:
            await self.api.patch("Job", ns, meta["name"], {"status": d.status})
        if d.delete_job:
            await self.api.delete("Job", ns, meta["name"])

    async def _collect_garbage(self) -> None:
        """Owned objects whose controller is gone: child Jobs of a deleted JobSet, pods of a deleted Job."""
        jobsets = {j["metadata"]["uid"] for j in self.api.list("JobSet")}
        for job in self.api.list("Job"):
            refs = [r for r in job["metadata"].get("ownerReferences") or [] if r.get("kind") == "JobSet"]
            if refs and refs[0]["uid"] not in jobsets:
                await self.api.delete("Job", job["metadata"]["namespace"], job["metadata"]["name"])
        jobs = {j["metadata"]["uid"] for j in self.api.list("Job")}
        for pod in self.api.list("Pod"):
            refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"]
            if not refs or refs[0]["uid"] in jobs:
                continue
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp"):
                await self.api.delete("Pod", meta["namespace"], meta["name"])
            elif TRACKING_FINALIZER in (meta.get("finalizers") or []) and (is_finished(pod) or not pod["spec"].get("nodeName")):
                # The job controller takes the finalizer off an orphan pod (job_controller.go syncOrphanPod); a pod no
                # node ever took has nothing to stop, and the API server removes it at once (pod strategy.go
                # CheckGracefulDelete: grace 0 for an unscheduled pod). A bound one waits until its kubelet has ended it.
                await self.api.patch("Pod", meta["namespace"], meta["name"], {"metadata": {"finalizers": []}})


def _resumed_template(jobset: dict[str, Any], children: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """jobset pkg/controllers/jobset_controller.go resumeJob: before a child Job is unsuspended, its pod template
    takes the replicatedJob's labels, annotations and nodeSelector (merged) and tolerations (added), which is
    how what Kueue writes into a suspended JobSet (node selectors of the admitted flavor) reaches the pods."""
    child = next(j for j in children if j["metadata"]["name"] == name)
    rjob_name = child["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rjob_name)
    source, template = rjob["template"]["spec"]["template"], child["spec"]["template"]
    meta, spec = source.get("metadata") or {}, source.get("spec") or {}
    tolerations = list(template["spec"].get("tolerations") or [])
    tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
    return {
        "metadata": {
            "labels": {**(template.get("metadata") or {}).get("labels", {}), **(meta.get("labels") or {})},
            "annotations": {**(template.get("metadata") or {}).get("annotations", {}), **(meta.get("annotations") or {})},
        },
        "spec": {
            "nodeSelector": {**(template["spec"].get("nodeSelector") or {}), **(spec.get("nodeSelector") or {})},
            "tolerations": tolerations,
        },
    }
