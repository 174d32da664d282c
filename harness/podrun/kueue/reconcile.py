"""One pass of the Kueue emulator, pure: reads a KueueState, returns what to write (KueueDecision).
The rules are kueue/controller.py's and kueue/workload.py's; this module orders them as Kueue's
controllers would run them: admission checks, queues, Workloads for new owners, Finished, admission.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.podrun.controllers.job_controller import iso
from harness.podrun.pods.volumes import NotEmulated

from .config import KueueConfiguration, owner_managed_by_kueue, reconciles
from .controller import (
    Assignment,
    assign_flavors,
    check_condition,
    cluster_queue_active,
    cluster_queue_checks,
    cond,
    find,
    holds_quota,
    is_true,
    local_queue_active,
    queue_order,
    set_cond,
    usage_of,
)
from .podsready import evicted_status, stopped_owner_spec, timed_out, unscheduled_timeout, waiting_for_backoff
from .versions import blocker_reason, no_fit_reason
from .workload import FAILED_TO_START, PodSetMergeConflict, PriorityClassMissing, build_workload, finished, started_owner_spec


@dataclass
class KueueState:
    """What the emulator reads each pass (cluster-scoped objects by name, namespaced ones as lists)."""

    flavors: dict[str, dict[str, Any]]
    cluster_queues: dict[str, dict[str, Any]]
    checks: dict[str, dict[str, Any]]
    priority_classes: dict[str, dict[str, Any]]
    prov_configs: set[str]
    local_queues: list[dict[str, Any]]
    workloads: list[dict[str, Any]]
    owners: list[dict[str, Any]]  # Jobs and JobSets
    config: KueueConfiguration = field(default_factory=KueueConfiguration)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> its labels
    pods: list[dict[str, Any]] = field(default_factory=list)  # for waitForPodsReady (kueue/podsready.py)


@dataclass
class KueueDecision:
    status: list[tuple[str, str | None, str, dict[str, Any]]] = field(default_factory=list)  # kind, ns, name, status
    create: list[dict[str, Any]] = field(default_factory=list)  # Workloads
    start: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)  # (owner, its new spec)
    release: list[dict[str, Any]] = field(default_factory=list)  # Workloads whose owner is gone
    events: list[tuple[dict[str, Any], str, str, str, str]] = field(default_factory=list)  # obj, kind, type, reason, msg


def _status_if_changed(out: KueueDecision, obj: dict[str, Any], ns: str | None, status: dict[str, Any]) -> None:
    old = obj.get("status") or {}
    if any(old.get(k) != v for k, v in status.items()):
        out.status.append((obj["kind"], ns, obj["metadata"]["name"], status))


def _owner_uid(workload: dict[str, Any]) -> str | None:
    return next((r["uid"] for r in workload["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def decide_kueue(st: KueueState, *, rule: str, serves_provisioning: bool, now: dt.datetime, version: str = "v0.19.2") -> KueueDecision:
    out = KueueDecision()
    checks = {}
    for name, ac in st.checks.items():
        c = check_condition(ac, serves_provisioning=serves_provisioning, prov_configs=st.prov_configs, now=now)
        conds = list((ac.get("status") or {}).get("conditions") or [])
        if c is not None:
            set_cond(conds, c)
            _status_if_changed(out, ac, None, {"conditions": conds})
        checks[name] = {**ac, "status": {"conditions": conds}}
    cq_active = {name: cluster_queue_active(cq, st.flavors, checks) for name, cq in st.cluster_queues.items()}
    lq_of: dict[tuple[str, str], tuple[bool, str, str, str]] = {}
    for lq in st.local_queues:
        cq_name = lq["spec"]["clusterQueue"]
        active, reason, message = local_queue_active(lq, st.cluster_queues.get(cq_name), cq_active.get(cq_name, (False,))[0])
        lq_of[(lq["metadata"]["namespace"], lq["metadata"]["name"])] = (active, reason, message, cq_name)
        conds = list((lq.get("status") or {}).get("conditions") or [])
        set_cond(conds, cond("Active", active, reason, message, now))
        _status_if_changed(out, lq, lq["metadata"]["namespace"], {"conditions": conds})

    owners = {o["metadata"]["uid"]: o for o in st.owners}
    workloads = {_owner_uid(w): w for w in st.workloads}
    for uid, each_owner in owners.items():
        _ensure_workload(out, each_owner, workloads.get(uid), st, now)
    live = []
    for w in st.workloads:
        owner = owners.get(_owner_uid(w) or "")
        if owner is None:  # the owner is gone: its Workload goes too (garbage collector, finalizer released)
            out.release.append(w)
            continue
        done = finished(owner)
        if done and not is_true(w, "Finished"):  # reconciler.go: Finished releases the quota
            conds = list(w["status"].get("conditions") or [])
            set_cond(conds, cond("Finished", True, done[0], done[1], now))
            out.status.append(("Workload", w["metadata"]["namespace"], w["metadata"]["name"], {"conditions": conds}))
            continue
        if not done:
            live.append((w, owner))

    # waitForPodsReady (kueue/podsready.py): an admitted Workload past its timeout is evicted, its owner stopped,
    # its quota released, and it is requeued after backoff.
    wfpr = st.config.wait_for_pods_ready
    unscheduled_s = unscheduled_timeout(version, wfpr, dict(st.config.feature_gates))
    still = []
    for w, owner in live:
        cause = timed_out(w, owner, st.pods, wfpr, unscheduled_s, now)
        if cause is None:
            still.append((w, owner))
            continue
        status = evicted_status(w, cause, wfpr, now)
        meta = w["metadata"]
        out.status.append(("Workload", meta["namespace"], meta["name"], status))
        evicted = next(c for c in status["conditions"] if c["type"] == "Evicted")
        out.events.append((w, "Workload", "Normal", "EvictedDueToPodsReadyTimeout", evicted["message"]))
        if not owner["spec"].get("suspend"):
            out.start.append((owner, stopped_owner_spec(owner, w)))
    live = still

    used: dict[str, dict[tuple[str, str], Decimal]] = {name: {} for name in st.cluster_queues}
    for w, owner in live:
        if holds_quota(w):
            cq_name = w["status"]["admission"]["clusterQueue"]
            for key, q in usage_of(w).items():
                used.setdefault(cq_name, {})[key] = used.setdefault(cq_name, {}).get(key, Decimal(0)) + q
            if is_true(w, "Admitted") and owner["spec"].get("suspend"):
                _start(out, owner, w, st, now)
    pending = [w for w, _ in live if not is_true(w, "QuotaReserved") and not waiting_for_backoff(w, now)]
    blocked_cqs: set[str] = set()
    for w in queue_order(pending):
        ns = w["metadata"]["namespace"]
        queue = lq_of.get((ns, w["spec"]["queueName"]))
        blocker = _queue_blocker(w, queue, st, cq_active)
        if blocker is not None:  # workload_controller.go syncQuotaReservedFalseCondition
            _set_pending(out, w, blocker_reason(version, blocker), blocker, now)
            continue
        assert queue is not None
        cq_name = queue[3]
        cq = st.cluster_queues[cq_name]
        if cq_name in blocked_cqs:  # StrictFIFO: the head blocks the rest
            continue
        a = assign_flavors(w, cq, st.flavors, used[cq_name], rule)
        if a.message:
            _set_pending(out, w, no_fit_reason(version, a.no_fit_reason), a.message, now)  # scheduler.go requeueAndUpdate
            if (cq["spec"].get("queueingStrategy") or "BestEffortFIFO") == "StrictFIFO":
                blocked_cqs.add(cq_name)
            continue
        for key, q in a.usage.items():
            used[cq_name][key] = used[cq_name].get(key, Decimal(0)) + q
        _admit(out, w, cq_name, a, cluster_queue_checks(cq), now)

    for name, cq in st.cluster_queues.items():
        active, reason, message = cq_active[name]
        conds = list((cq.get("status") or {}).get("conditions") or [])
        set_cond(conds, cond("Active", active, reason, message, now))
        _status_if_changed(out, cq, None, {"conditions": conds})
    return out


def _ensure_workload(out: KueueDecision, owner: dict[str, Any], existing: dict[str, Any] | None, st: KueueState, now: dt.datetime) -> None:
    """reconciler.go ReconcileGenericJob: a queued owner without a Workload gets one, when the Configuration
    lets Kueue reconcile it at all (config.py reconciles); a Job whose owner Kueue manages (a JobSet, with its
    framework enabled) is its parent's business (IsOwnerManagedByKueue)."""
    meta = owner["metadata"]
    if existing is not None or finished(owner) or owner_managed_by_kueue(owner, st.config):
        return
    if not reconciles(owner, st.config, st.namespace_labels.get(meta["namespace"], {})):
        return  # config.py reconciles: framework off, namespace not selected, or no queue-name
    if not owner["spec"].get("suspend"):
        raise NotEmulated(
            f"{owner['kind']} {meta['namespace']}/{meta['name']}: Kueue's webhook suspends a queued "
            "owner on create; create it with spec.suspend: true"
        )
    try:
        wl = build_workload(owner, st.priority_classes)
    except PriorityClassMissing:
        return  # a reconcile error upstream: retried until the class exists
    out.create.append(wl)
    out.events.append(
        (owner, owner["kind"], "Normal", "CreatedWorkload", f"Created Workload: {meta['namespace']}/{wl['metadata']['name']}")
    )


def _queue_blocker(
    w: dict[str, Any], lq: tuple[bool, str, str, str] | None, st: KueueState, cq_active: dict[str, tuple[bool, str, str]]
) -> str | None:
    """workload_controller.go getQueueBlocker's messages."""
    if lq is None:
        return f"LocalQueue {w['spec']['queueName']} doesn't exist"
    if lq[1] == "Stopped":
        return f"LocalQueue {w['spec']['queueName']} is inactive"
    if lq[3] not in st.cluster_queues:
        return f"ClusterQueue {lq[3]} doesn't exist"
    if not cq_active[lq[3]][0]:
        return f"ClusterQueue {lq[3]} is inactive"
    return None


def _set_pending(out: KueueDecision, w: dict[str, Any], reason: str, message: str, now: dt.datetime) -> None:
    """workload.go UnsetQuotaReservationWithCondition; an event only when the message changes."""
    old = find(w, "QuotaReserved")
    if old is not None and (old["status"], old["reason"], old["message"]) == ("False", reason, message):
        return
    conds = list((w.get("status") or {}).get("conditions") or [])
    set_cond(conds, cond("QuotaReserved", False, reason, message, now))
    out.status.append(("Workload", w["metadata"]["namespace"], w["metadata"]["name"], {"conditions": conds, "admission": None}))
    out.events.append((w, "Workload", "Warning", reason, message))


def _admit(out: KueueDecision, w: dict[str, Any], cq_name: str, a: Assignment, checks: list[str], now: dt.datetime) -> None:
    """scheduler.go admit -> prepareWorkload: workload.go SetQuotaReservation, then admissionchecks.go
    SyncAdmittedCondition once every check is Ready (never, here: no check controller is emulated)."""
    conds = list((w.get("status") or {}).get("conditions") or [])
    evicted = find(w, "Evicted")
    if evicted is not None and evicted["status"] == "True":  # workload.go SetQuotaReservation
        set_cond(conds, cond("Evicted", False, "QuotaReserved", f"Previously: {evicted['reason']}", now))
    set_cond(conds, cond("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}", now))
    status: dict[str, Any] = {"admission": {"clusterQueue": cq_name, "podSetAssignments": a.pod_sets}, "conditions": conds}
    out.events.append(
        (w, "Workload", "Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was 0s")
    )
    if checks:
        status["admissionChecks"] = [{"name": n, "state": "Pending", "message": "", "lastTransitionTime": iso(now)} for n in checks]
    else:
        set_cond(conds, cond("Admitted", True, "Admitted", "The workload is admitted", now))
        out.events.append((w, "Workload", "Normal", "Admitted", f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s"))
    out.status.append(("Workload", w["metadata"]["namespace"], w["metadata"]["name"], status))


def _start(out: KueueDecision, owner: dict[str, Any], w: dict[str, Any], st: KueueState, now: dt.datetime) -> None:
    """reconciler.go ReconcileGenericJob step 7 -> startJob: unsuspend with the podsets' info merged; a merge
    conflict is permanent (podset.IsPermanent), so the Workload is finished (workload/finish/finish.go Finish,
    reason FailedToStart, the error as message) and the owner stays suspended. Finished releases the quota."""
    try:
        spec = started_owner_spec(owner, w, st.flavors)
    except PodSetMergeConflict as e:
        conds = list(w["status"].get("conditions") or [])
        set_cond(conds, cond("Finished", True, FAILED_TO_START, str(e), now))
        out.status.append(("Workload", w["metadata"]["namespace"], w["metadata"]["name"], {"conditions": conds}))
        return
    out.start.append((owner, spec))
    out.events.append((owner, owner["kind"], "Normal", "Started", f"Admitted by clusterQueue {w['status']['admission']['clusterQueue']}"))
