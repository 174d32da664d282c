"""Kueue: which LocalQueue a job goes to, and what its Workload says about it. Pure functions.

A trainer Job/JobSet is created suspended with the LocalQueue and WorkloadPriorityClass labels;
Kueue makes a Workload for it, reserves quota in a flavor (ClusterQueue), runs the flavor's
admission checks, if a cluster adds any (rljob's k8s/kueue/ has none), and then unsuspends it. Evicted (preempted by
a higher-priority job, a failed admission check, a stopped queue) it suspends the Job again and
requeues the Workload. The visibility API says where a pending Workload stands in its LocalQueue.

Written against Kueue v0.19.2's v1beta2 API (served since 0.15, where v1beta1 became deprecated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
KUEUE_LOCAL_QUEUES = "localqueues"  # namespaced: the Role may read them (k8s/base/rbac.yaml)
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # Kueue's label on the Workload of a Job/JobSet
PRIORITY_CLASS_PREFIX = "rljob-"  # + spec.priority: the WorkloadPriorityClasses in k8s/kueue/


class NoQueueForTeam(ValueError):
    """Team queues are configured, but none for this team and no default queue."""


def priority_class_name(priority: str) -> str:
    """The WorkloadPriorityClass of a spec.priority (low, normal, high)."""
    return f"{PRIORITY_CLASS_PREFIX}{priority}"


def local_queue_for(team: str | None, team_queues: dict[str, str], default_queue: str | None) -> str | None:
    """The team's LocalQueue, else the default one; None: Kueue is not used.

    With team queues configured, a team without an entry and no default has nowhere to go: refused
    (the caller turns it into a 422 at submit), never silently run outside Kueue's quota.
    """
    if team and team in team_queues:
        return team_queues[team]
    if default_queue:
        return default_queue
    if team_queues:
        known = ", ".join(sorted(team_queues))
        raise NoQueueForTeam(
            f"team {team!r} has no Kueue LocalQueue (teams with one: {known}) and there is no default queue; "
            "an admin adds the team to RLJOB_K8S_KUEUE_TEAM_QUEUES (and creates its LocalQueue) or sets "
            "RLJOB_K8S_KUEUE_QUEUE"
        )
    return None


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type")}


def _true(conds: dict[str, dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The condition `kind` when its status is True, else None."""
    cond = conds.get(kind)
    return cond if cond is not None and cond.get("status") == "True" else None


@dataclass(frozen=True)
class WorkloadView:
    """What a Job's Workload says, reduced to what the launcher reports."""

    name: str
    admitted: bool  # quota reserved and every admission check passed
    reason: str  # Kueue's machine-readable cause: WaitingForQuota, Preempted, UnsatisfiedAdmissionChecks, ...
    message: str  # Kueue's own words
    evicted: bool = False  # sent back to the queue after it had been admitted


@dataclass(frozen=True)
class KueueRead:
    """What the launcher could learn about a suspended job from Kueue."""

    readable: bool  # False: the v1beta2 API is not served, or no RBAC to read Workloads
    workload: WorkloadView | None = None  # None while readable: Kueue has not made one yet
    position: int | None = None  # 1-based, from the visibility API; None when it does not say
    why_unreadable: str = ""  # when not readable: what is wrong and what to do (unreadable_reason)


def unreadable_reason(status: int | None, error: str = "") -> str:
    """Why the Workloads of kueue.x-k8s.io/v1beta2 cannot be listed, and what to do, by HTTP status.

    A list never answers 404 for a missing object: 404 means the API server does not serve the group
    version at all (Kueue not installed, or older than 0.15, which introduced v1beta2). 403 is RBAC.
    """
    api = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
    if status == 404:
        return f"the {api} API is not served (Kueue is missing or older than 0.15): install Kueue >= 0.15; `rljob doctor` checks"
    if status == 403:
        return (
            f"the service may not list {KUEUE_WORKLOADS}.{KUEUE_GROUP} (RBAC: the Role rljob-launcher needs "
            f"apiGroups [{KUEUE_GROUP}] resources [{KUEUE_WORKLOADS}] verbs [list], k8s/base/rbac.yaml); "
            "`rljob doctor` checks"
        )
    return f"listing {KUEUE_WORKLOADS}.{KUEUE_GROUP} failed ({error or status}); `rljob doctor` checks the cluster"


def read_workload(workload: dict[str, Any]) -> WorkloadView:
    """Decide from the Workload's conditions (kueue.x-k8s.io/v1beta2 Workload.status.conditions)."""
    name = str((workload.get("metadata") or {}).get("name") or "")
    conds = _conditions(workload)
    evicted = _true(conds, "Evicted")
    if evicted is not None:
        # Evicted's reason says why (Preempted, PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped);
        # Preempted, when also set, has the fuller message (which workload, which policy).
        message = str((_true(conds, "Preempted") or evicted).get("message") or "")
        reason = str(evicted.get("reason") or "Evicted")
        if reason.startswith("Deactivated"):
            # Not requeued: it waits until someone reactivates it (or cancels the job), so say how.
            message = (
                f"{message}; Kueue will not admit it again until it is reactivated: kubectl patch "
                f'workloads.kueue.x-k8s.io {name} --type=merge -p \'{{"spec":{{"active":true}}}}\', '
                "or cancel the job"
            )
        return WorkloadView(name, False, reason, message, evicted=True)
    admitted = _true(conds, "Admitted")
    if admitted is not None:
        return WorkloadView(name, True, "Admitted", str(admitted.get("message") or ""))
    reserved = conds.get("QuotaReserved")
    if _true(conds, "QuotaReserved") is not None:
        # Quota is held but an admission check (one a cluster added, e.g. a ProvisioningRequest) has not passed yet.
        return WorkloadView(
            name,
            False,
            "UnsatisfiedAdmissionChecks",
            _check_messages(workload) or "quota reserved; waiting for the flavor's admission checks",
        )
    if reserved is None:
        return WorkloadView(name, False, "PendingEvaluation", "Kueue has not evaluated the workload yet")
    return WorkloadView(name, False, str(reserved.get("reason") or "Pending"), str(reserved.get("message") or ""))


def _check_messages(workload: dict[str, Any]) -> str:
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    pending = [c for c in checks if c.get("state") != "Ready"]
    return "; ".join(f"{c.get('name')}: {c.get('state')}{': ' + c['message'] if c.get('message') else ''}" for c in pending)


def workload_of(items: list[dict[str, Any]], job_uid: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job/JobSet with this uid (labels checked again client-side)."""
    for item in items:
        if ((item.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == job_uid:
            return item
    return None


def position_in(pending: dict[str, Any], workload_name: str) -> int | None:
    """1-based place in its LocalQueue from a visibility API PendingWorkloadsSummary; None if absent."""
    for item in pending.get("items") or []:
        if (item.get("metadata") or {}).get("name") == workload_name:
            position = item.get("positionInLocalQueue")
            return int(position) + 1 if isinstance(position, int) else None
    return None


def admitted_flavor(workload: dict[str, Any]) -> str | None:
    """The ResourceFlavor that holds the workload's TPUs (status.admission.podSetAssignments[].flavors, v1beta2);
    the first podset's first flavor when no podset has google.com/tpu; None when not admitted."""
    assignments = ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    flavors = [dict(a.get("flavors") or {}) for a in assignments]
    tpu = next((f["google.com/tpu"] for f in flavors if "google.com/tpu" in f), None)
    if tpu is not None:
        return str(tpu)
    first = next((v for f in flavors for v in f.values()), None)
    return None if first is None else str(first)
