"""K8sJobLauncher: the JobLauncher port on GKE (a Job per single-host slice, a JobSet per multi-host).

The launcher only creates, deletes, reads and labels workloads; the job service alone turns its
observations into phase transitions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from service.adapters.k8s_cluster.kueue_chain import ChainCache, read_chain
from service.adapters.k8s_cluster.reads import ClusterReads
from service.background_loop import BackgroundLoop, stop_all
from service.domain.records.errors import InvalidRequest, LaunchFailed
from service.domain.records.ports import LaunchResult, Observation, ObservationSink, ObservedState
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import CPU_ACCELERATOR
from trainer.contract.spec.hardware import capacity_text

from . import kueue, names, observe, pods
from .capacity import CAPACITY_LABEL, EVAL_POOL, cpu_capacity_problem
from .client import K8sClient
from .errors import K8sBackendError, ManifestError
from .kueue import KueueRead
from .kueue_setup import demand_of, refusal
from .manifests import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, build_workload, kueue_queue_of, resolve_hardware
from .pod_template import reward_container_problem, runtime_class_problem
from .settings import K8sSettings
from .stranded import stranded
from .watcher import Reconciler, ResourceWatch, WatchOptions

log = logging.getLogger(__name__)
BACKEND = "kubernetes"
SUBMIT_CHECK_JOB_ID = "rl-000000000000"  # renders a job's pod template at submit, before it has an id
# kubernetes.config ships without annotations; both fill the given Configuration in place.
_load_incluster_config = cast(Callable[..., None], k8s_config.load_incluster_config)
_load_kube_config = cast(Callable[..., None], k8s_config.load_kube_config)


class K8sJobLauncher:
    backend = BACKEND

    def __init__(self, client: K8sClient, settings: K8sSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client, self._settings, self._clock = client, settings, clock
        self._kinds: dict[str, str] = {}  # job id -> "Job" | "JobSet", learned on launch or first read
        self._flavors: dict[str, str] = {}  # workload uid -> the ResourceFlavor that admitted it (read once)
        self._stop = threading.Event()  # shared by the watches' and the reconciler's loops
        self._loops: list[BackgroundLoop] = []
        self._watches: list[ResourceWatch] = []
        self._reconciler: Reconciler | None = None
        # The submit check's view of each LocalQueue's chain, read at most every CHAIN_CACHE_S.
        self._chains = ChainCache(lambda queue: read_chain(client, ClusterReads(client), queue), clock=clock)
        self._lock = threading.Lock()
        self._warned: set[str] = set()  # unreadable-Kueue reasons already logged

    # -- background watching -------------------------------------------------------------------

    def start(self, sink: ObservationSink) -> None:
        if self._loops:
            raise RuntimeError("K8sJobLauncher.start called twice")
        self._stop.clear()
        self._reconciler = Reconciler(
            self.observe, sink, interval_s=self._settings.watch_resync_interval_s, stop=self._stop, clock=self._clock
        )
        c, ns = self._client, self._settings.namespace
        common = WatchOptions(
            on_job=self._reconciler.mark,
            stop=self._stop,
            watch_timeout_s=self._settings.watch_timeout_s,
            connect_timeout_s=min(10.0, self._settings.request_timeout_s),
        )
        self._watches = [
            ResourceWatch("jobs", c.batch.list_namespaced_job, (ns,), **common),
            ResourceWatch("pods", c.core.list_namespaced_pod, (ns,), **common),
        ]
        if self._settings.watch_jobsets:
            self._watches.append(
                ResourceWatch(
                    "jobsets",
                    c.custom.list_namespaced_custom_object,
                    (JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL),
                    **common,
                )
            )
        self._loops = [self._reconciler.loop] + [w.loop for w in self._watches]
        for loop in self._loops:
            loop.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        for loop in self._loops:
            loop.request_stop()
        for w in self._watches:
            w.interrupt()  # a watch request in flight would hold its loop until the server ends it
        stop_all(self._loops, timeout_s)  # one deadline for them all
        self._loops = []
        self._watches = []

    @property
    def client(self) -> K8sClient:
        """The API client (the start-up checks reuse it)."""
        return self._client

    @property
    def settings(self) -> K8sSettings:
        return self._settings

    @property
    def watches(self) -> list[ResourceWatch]:
        return list(self._watches)

    # -- the port --------------------------------------------------------------------------------

    def check_submittable(self, spec: JobSpec) -> None:
        """SubmitCheck: refuse what Kueue or the scheduler would hold forever.

        A cpu job asking for TPU capacity (spot, flex-start, a reservation: field `hardware.capacity`, capacity.py),
        and a list of capacities for a job Kueue does not queue (nothing would order or report the choice). A multi-host
        slice when pods run under a sandbox RuntimeClass (gVisor runs single-host TPU shapes only: pod_template.py).

        A team with no LocalQueue (when team queues are configured); a LocalQueue or ClusterQueue that does
        not exist or a ClusterQueue Kueue marks inactive (field `team`: the queue is the team's, not the
        spec's); a job no ResourceFlavor of the ClusterQueue can take, by node labels (its nodeSelector and, for a
        list of capacities, each node affinity term, as Kueue's flavorSelector cuts them) or by the nominal quota of
        any resource its pods request, or one requesting a resource no resource group covers (field `hardware`,
        kueue_setup.py). When Kueue's objects cannot be read at all, the job is NOT refused: the reason
        is logged once and `rljob doctor` reports it (k8s_cluster/kueue_chain.py says why).
        """
        if spec.hardware.accelerator == CPU_ACCELERATOR and (problem := cpu_capacity_problem(spec.hardware.capacities)):
            raise InvalidRequest(("body", "hardware", "capacity"), problem)
        with contextlib.suppress(ManifestError):  # not renderable: launch fails with the manifest's own message
            if problem := runtime_class_problem(resolve_hardware(spec), self._settings):
                raise InvalidRequest(("body", "hardware", "accelerator"), problem)
            if problem := reward_container_problem(spec, resolve_hardware(spec), self._settings):
                field = ("evaluation", "suite", "reward_memory_mib") if spec.evaluation else ("grpo", "rewards", "memory_mib")
                raise InvalidRequest(("body", *field), problem)
        try:
            kueue.local_queue_for(spec.team, self._settings.kueue_team_queues, self._settings.kueue_queue)
        except kueue.NoQueueForTeam as exc:
            raise InvalidRequest(("team",), str(exc)) from None
        queue = kueue_queue_of(spec, self._settings)
        if not queue and len(spec.hardware.capacities) > 1:
            # Without Kueue nothing orders the kinds, and the kind a pod landed on is not seen: the scheduler would
            # pick any node of the set and the job's status and price could not follow it.
            raise InvalidRequest(
                ("body", "hardware", "capacity"),
                f"a list of capacities ({capacity_text(spec.hardware.capacities)}) needs a Kueue queue to choose among them "
                "in the pool's order, and this service sends this team's jobs to none: name one kind, or ask an admin "
                "for a LocalQueue (RLJOB_K8S_KUEUE_QUEUE / RLJOB_K8S_KUEUE_TEAM_QUEUES)",
            )
        if not queue:
            return
        read = self._chains.get(queue)
        if read.unreadable:
            with self._lock:
                first = read.unreadable not in self._warned
                self._warned.add(read.unreadable)
            if first:
                log.warning(
                    "cannot check jobs against Kueue's flavors (%s); submitting without that check, `rljob doctor` says more",
                    read.unreadable,
                )
            return
        if read.problem:
            raise InvalidRequest(("team",), read.problem)
        assert read.chain is not None
        try:
            workload = build_workload(spec, SUBMIT_CHECK_JOB_ID, self._settings)
        except ManifestError:
            return  # not renderable: launch fails with the manifest's own message
        refused = refusal(read.chain, demand_of(workload))
        if refused is not None:
            raise InvalidRequest(("hardware",), refused)

    def queue_position_for(self, spec: JobSpec) -> int | None:
        """QueuePreview: behind every workload pending in the job's LocalQueue (Kueue's visibility API), so 1 with
        none pending (the queue's quota may still admit it at once); None without a queue or when unreadable.
        A job of higher priority than those pending would go ahead of them: for it this is the far end."""
        try:
            queue = kueue_queue_of(spec, self._settings)
        except ManifestError:
            return None
        pending = self._client.kueue_pending_workloads(queue) if queue else None
        if pending is None:
            return None
        return len(pending.get("items") or []) + 1

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        workload = build_workload(spec, job_id, self._settings)  # ManifestError: the spec's fault
        ns = self._settings.namespace
        try:
            self._client.create_config_map(job_id, workload.config_map)
            if workload.job is not None:
                obj, _ = self._client.create_job(job_id, workload.job)
                uid, api_version = obj.metadata.uid, "batch/v1"
            else:
                assert workload.jobset is not None
                obj, _ = self._client.create_jobset(job_id, workload.jobset)
                uid, api_version = (obj.get("metadata") or {}).get("uid"), f"{JOBSET_GROUP}/{JOBSET_VERSION}"
        except K8sBackendError:
            raise
        except Exception as exc:
            raise LaunchFailed(f"create {workload.kind} {ns}/{workload.name} for job {job_id}: {exc}") from exc
        self._kinds[job_id] = workload.kind
        if uid:
            self._adopt_config_map(job_id, workload.kind, workload.name, api_version, uid)
        if self._reconciler is not None:
            self._reconciler.mark(job_id)
        return LaunchResult(backend=BACKEND, object_name=f"{workload.kind.lower()}/{workload.name}")

    def _adopt_config_map(self, job_id: str, kind: str, name: str, api_version: str, uid: str) -> None:
        # The ConfigMap goes when its Job does (cancel, TTL): an ownerReference, best effort, because
        # a leftover spec ConfigMap is harmless and cancel deletes it explicitly anyway.
        owner = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": False}
        try:
            self._client.patch_metadata("ConfigMap", names.spec_configmap_name(job_id), {"ownerReferences": [owner]})
        except Exception:
            log.warning("could not set the owner of %s's spec ConfigMap; cancel still deletes it", job_id, exc_info=True)

    def cancel(self, job_id: str) -> None:
        name = names.workload_name(job_id)
        kind = self._kind(job_id)
        if kind == "JobSet":
            self._client.delete("JobSet", name)
        elif kind == "Job":
            self._client.delete("Job", name)
        self._client.delete("ConfigMap", names.spec_configmap_name(job_id), propagation="Background")
        if self._reconciler is not None:
            self._reconciler.mark(job_id)

    def requeue(self, job_id: str) -> None:
        """Give a running job's workload back to its queue: the Job (or JobSet) and its spec ConfigMap go, as on
        cancel, and the job service relaunches once it is gone. Kueue then makes a new Workload from the spec's
        pod template (its capacity set, not the flavor the old one was admitted into), queued behind the jobs
        already waiting. Kueue itself cannot requeue it onto another flavor: a suspended Job is restarted into
        its admitted Workload, and a deleted Workload leaves the merged node selectors on the Job
        (jobframework/reconciler.go ensureOneWorkload, v0.19.2: "Missing Workload; unable to restore pod templates")."""
        self.cancel(job_id)
        self._flavors.clear()

    def observe(self, job_id: str) -> Observation:
        read_at = time.monotonic()  # before the first read: see ObservationOrder
        name = names.workload_name(job_id)
        kind = self._kind(job_id)
        if kind is None:
            obs = observe.gone(job_id, f"job/{name}")
        elif kind == "Job":
            obs = self._observe_job(job_id, self._client.get_job(name))
        else:
            obs = self._observe_jobset(job_id, self._client.get_jobset(name))
        if obs.state not in (ObservedState.SUCCEEDED, ObservedState.FAILED, ObservedState.GONE):
            if self._reconciler is not None:
                self._reconciler.remember(job_id)
        return dataclasses.replace(obs, read_at=read_at)

    def _observe_job(self, job_id: str, job: Any | None) -> Observation:
        if job is None:
            self._kinds.pop(job_id, None)
            return observe.observe_job(job_id, None, [], [])
        pod_list = self._client.list_pods(job_id)
        events = self._events_for(pod_list)
        held = self._read_kueue(job.metadata.labels or {}, job.metadata.uid) if job.spec.suspend else None
        obs = observe.observe_job(job_id, job, pod_list, events, held)
        if job.spec.suspend:
            return obs
        selector = (job.spec.template.spec.node_selector if job.spec.template and job.spec.template.spec else None) or {}
        return self._stranded(self._placed(obs, selector, job.metadata.labels or {}, job.metadata.uid), pod_list)

    def _observe_jobset(self, job_id: str, jobset: dict[str, Any] | None) -> Observation:
        if jobset is None:
            self._kinds.pop(job_id, None)
            return observe.observe_jobset(job_id, None, [], [])
        pod_list = self._client.list_pods(job_id)
        meta, spec = jobset.get("metadata") or {}, jobset.get("spec") or {}
        held = self._read_kueue(meta.get("labels") or {}, meta.get("uid")) if spec.get("suspend") else None
        obs = observe.observe_jobset(job_id, jobset, pod_list, self._events_for(pod_list), held)
        if spec.get("suspend"):
            return obs
        template = ((spec.get("replicatedJobs") or [{}])[0].get("template") or {}).get("spec") or {}
        selector = ((template.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        return self._stranded(self._placed(obs, selector, meta.get("labels") or {}, meta.get("uid")), pod_list)

    def _stranded(self, obs: Observation, pod_list: list[Any]) -> Observation:
        return stranded(obs, pod_list, after_s=self._settings.stranded_after_s, now=datetime.now(UTC))

    def _placed(self, obs: Observation, selector: dict[str, str], labels: dict[str, str], uid: str | None) -> Observation:
        """A started workload's kind of capacity and flavor. The kind is the pod template's rljob.dev/capacity:
        rendered for one kind, merged in by Kueue from the admitting flavor's nodeLabels for a set (podset.Merge,
        v0.19.2). The flavor is the Workload's admission, read once per workload (its uid) and remembered."""
        capacity = selector.get(CAPACITY_LABEL)
        if capacity is None:
            return obs  # a cpu training job: no kind of TPU capacity
        if capacity == EVAL_POOL:
            capacity = "on-demand"  # the eval pool is a pool of on-demand cpu VMs (capacity.py); its flavor says which
        flavor = self._flavors.get(uid or "")
        if flavor is None and uid and labels.get(names.KUEUE_QUEUE_LABEL):
            items = self._client.kueue_workloads(uid)
            workload = kueue.workload_of(items, uid) if not isinstance(items, str) else None
            flavor = kueue.admitted_flavor(workload) if workload is not None else None
            if flavor is not None:
                self._flavors[uid] = flavor
        return dataclasses.replace(obs, capacity=capacity, flavor=flavor)

    def _read_kueue(self, labels: dict[str, str], uid: str | None) -> KueueRead | None:
        """A suspended workload in a LocalQueue: its Workload and its place in line, as far as readable."""
        queue = labels.get(names.KUEUE_QUEUE_LABEL)
        if not queue or not uid:
            return None
        items = self._client.kueue_workloads(uid)
        if isinstance(items, str):
            return KueueRead(readable=False, why_unreadable=items)
        workload = kueue.workload_of(items, uid)
        if workload is None:
            return KueueRead(readable=True)
        view = kueue.read_workload(workload)
        position = None
        if not view.admitted:
            pending = self._client.kueue_pending_workloads(queue)
            position = kueue.position_in(pending, view.name) if pending is not None else None
        return KueueRead(readable=True, workload=view, position=position)

    def _events_for(self, pod_list: list[Any]) -> list[Any]:
        # Events only explain waiting pods; skip the extra call while everything is running.
        waiting = {p.metadata.name for p in pod_list if p.status and p.status.phase == "Pending"}
        return self._client.list_events(waiting) if waiting else []

    def _kind(self, job_id: str) -> str | None:
        """Job or JobSet, from memory or by looking (the service may have restarted since launch)."""
        kind = self._kinds.get(job_id)
        if kind is not None:
            return kind
        name = names.workload_name(job_id)
        if self._client.get_job(name) is not None:
            kind = "Job"
        elif self._settings.watch_jobsets and len(name) <= names.MAX_JOBSET_NAME and self._client.get_jobset(name):
            kind = "JobSet"
        if kind is not None:
            self._kinds[job_id] = kind
        return kind

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        pod_list = pods.newest_first(self._client.list_pods(job_id))
        if not pod_list:
            return
        # The newest attempt is the one worth reading; multi-host: worker 0 (the first by name).
        newest = pod_list[0]
        yield from self._client.pod_log_lines(newest.metadata.name, follow=follow, tail_lines=tail_lines)

    # -- mirroring the service's view into the cluster ---------------------------------------------

    def mirror_status(
        self,
        job_id: str,
        phase: str,
        stage: str | None = None,
        step: int | None = None,
        total: int | None = None,
        *,
        queue_position: int | None = None,
        queue_reason: str | None = None,
        placement: str | None = None,
    ) -> bool:
        """Patch phase (label), stage, progress and, while queued, the place in line and why, (annotations), once admitted
        the flavor it was admitted into (label) onto the Job/JobSet; False if gone.

        So `kubectl get jobs -l app.kubernetes.io/managed-by=rljob -L rljob.dev/phase` tells the story,
        and `kubectl describe job` why a queued one waits.
        """
        kind = self._kind(job_id)
        if kind is None:
            return False
        annotations: dict[str, str | None] = {}
        if stage is not None:
            annotations[names.ANNOTATION_STAGE] = stage
        if step is not None and total:
            annotations[names.ANNOTATION_PROGRESS] = f"{step}/{total}"
        # A merge patch deletes a key set to null: a job that left the queue (or whose place is no
        # longer known) keeps no stale place in line.
        queued = queue_reason is not None
        annotations[names.ANNOTATION_QUEUE_REASON] = queue_reason if queued else None
        annotations[names.ANNOTATION_QUEUE_POSITION] = str(queue_position) if queued and queue_position else None
        labels = {names.LABEL_PHASE: names.label_value(phase)}
        if placement is not None:
            labels[names.LABEL_ADMITTED_TO] = names.label_value(placement)
        metadata: dict[str, Any] = {"labels": labels, "annotations": annotations}
        return self._client.patch_metadata(kind, names.workload_name(job_id), metadata)


def build_k8s_launcher(
    settings: K8sSettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    configuration: k8s.Configuration | None = None,
) -> K8sJobLauncher:
    """Load in-cluster config or a kubeconfig (per settings) and wire the launcher.

    `configuration` skips loading: tests pass one pointed at kmock.
    """
    client = build_k8s_client(settings, sleep=sleep, clock=clock, configuration=configuration)
    return K8sJobLauncher(client, settings, clock=clock)


def load_configuration(settings: K8sSettings) -> k8s.Configuration:
    """The pod's service account (in_cluster) or a kubeconfig (file and context per settings)."""
    configuration = k8s.Configuration()
    if settings.in_cluster:
        _load_incluster_config(client_configuration=configuration)
    else:
        _load_kube_config(config_file=settings.kubeconfig, context=settings.context, client_configuration=configuration)
    return configuration


def build_k8s_client(
    settings: K8sSettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    configuration: k8s.Configuration | None = None,
) -> K8sClient:
    api = k8s.ApiClient(configuration or load_configuration(settings))
    return K8sClient(
        core=k8s.CoreV1Api(api),
        batch=k8s.BatchV1Api(api),
        custom=k8s.CustomObjectsApi(api),
        namespace=settings.namespace,
        sleep=sleep,
        clock=clock,
        attempts=settings.retry_attempts,
        backoff_s=settings.retry_backoff_s,
        backoff_max_s=settings.retry_backoff_max_s,
        request_timeout_s=settings.request_timeout_s,
    )
