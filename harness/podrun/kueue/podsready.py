"""Kueue's waitForPodsReady for the emulator, pure: when an admitted Workload whose pods are not ready (or, with
v0.20's unscheduledTimeout, not scheduled) is evicted, how it is requeued with backoff, and its owner stopped.

Read in kubernetes-sigs/kueue:
- On by default in both v0.19.2 and v0.20: apis/config/v1beta2/defaults.go SetDefaults_Configuration gives every
  Configuration a waitForPodsReady (timeout 30m, recoveryTimeout = timeout, blockAdmission false, requeuingStrategy
  backoffBaseSeconds 60, backoffMaxSeconds 3600, backoffLimitCount nil = requeue forever); PR #11855, in v0.19.2.
- pkg/controller/core/workload_controller.go (v0.19.2 and main after v0.20.0-devel) admittedNotReadyWorkload: an
  Admitted Workload whose PodsReady is not True, measured from the Admitted condition's lastTransitionTime, is
  timed out after `timeout` (underlying cause WaitForStart); reconcileNotReadyTimeout then evicts it
  (workloadevict.Evict, reason PodsReadyTimeout, message "Exceeded the PodsReady timeout NS/NAME") with
  pkg/workload/workload.go UpdateRequeueState: requeueState.count + 1 and requeueAt = now + backoff, backoff =
  backoffBaseSeconds * 2^(count-1) capped at backoffMaxSeconds (wait.NewBackoff factor 2; the 0.0001 jitter is
  left out). triggerDeactivation: once count + 1 would pass backoffLimitCount the Workload is deactivated instead
  (not emulated here: NotEmulated).
- v0.20.0 only (CHANGELOG/CHANGELOG-0.20.md, #15402 and #15434; PRs #15372, #15468, #15627): with the
  WaitForPodsReadyUnscheduledTimeout feature gate on and a positive waitForPodsReady.unscheduledTimeout, a
  Workload whose required pods are not all scheduled (PodScheduled=True) is evicted after unscheduledTimeout,
  measured from admission, same reason PodsReadyTimeout, underlying cause WaitForScheduling, requeued after the
  same backoff. The gate is not on by default (Kueue's own guide sets `featureGates:
  WaitForPodsReadyUnscheduledTimeout: true`, PR #15627). The v0.20.0 source of it was not available to read (the
  stored mirror ends before it); the rule is the CHANGELOG's and the PRs' descriptions.
- The requeued Workload is a new queue entry: workload_controller.go Update (FromQuotaReservedOrAdmittedToPending)
  calls queues.AddOrUpdateWorkloadWithoutLock, whose workload.NewInfo has no LastAssignment, and the Workload left
  the ClusterQueue's heap when it reserved quota (Update: Pending -> QuotaReserved calls queues.DeleteWorkload), so
  pkg/cache/queue/manager.go's FlavorFungibilityPreserveScanProgress carry-over (cq.trackedInfo) finds nothing;
  flavorassigner.go then starts at NextFlavorToTryForPodSetResource = 0: the first flavor of the group again.
  The emulator's assign_flavors always starts at the first flavor, which is what this case does upstream.

Simplifications: the eviction, the owner's stop (jobframework reconciler.go stopJob: suspend, the pod templates
restored from the Workload's podSets, RestorePodSetsInfo) and the reservation's release happen in one pass, where
upstream they take a few reconciles; recoveryTimeout (a pod failing after PodsReady) is not emulated.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from harness.podrun.controllers.job_controller import iso
from harness.podrun.pods.volumes import NotEmulated

from .controller import cond, find, is_true, set_cond

POD_OWNER_LABEL = {"Job": "job-name", "JobSet": "jobset.sigs.k8s.io/jobset-name"}
UNSCHEDULED_GATE = "WaitForPodsReadyUnscheduledTimeout"


def parse_duration(text: str | int | float) -> float:
    """A metav1.Duration as Go writes it ("30m", "1h30m", "90s", "0s") -> seconds."""
    if isinstance(text, int | float):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * unit[u] for n, u in parts)


@dataclass(frozen=True)
class WaitForPodsReady:
    """config.kueue.x-k8s.io/v1beta2 waitForPodsReady with defaults.go's defaults."""

    timeout_s: float = 1800.0
    unscheduled_timeout_s: float = 0.0  # v0.20, behind the gate; 0 / unset: off
    backoff_base_s: int = 60
    backoff_max_s: int = 3600
    backoff_limit_count: int | None = None

    @classmethod
    def from_dict(cls, doc: dict[str, Any] | None) -> WaitForPodsReady:
        doc = doc or {}
        rs = doc.get("requeuingStrategy") or {}
        return cls(
            timeout_s=parse_duration(doc.get("timeout") or "30m"),
            unscheduled_timeout_s=parse_duration(doc.get("unscheduledTimeout") or "0s"),
            backoff_base_s=int(rs.get("backoffBaseSeconds") or 60),
            backoff_max_s=int(rs.get("backoffMaxSeconds") or 3600),
            backoff_limit_count=rs.get("backoffLimitCount"),
        )


def unscheduled_timeout(version: str, wfpr: WaitForPodsReady, gates: dict[str, bool]) -> float:
    """The unscheduledTimeout in force: v0.20 only, the gate on, positive."""
    if version == "v0.19.2" or not gates.get(UNSCHEDULED_GATE, False):
        return 0.0
    return wfpr.unscheduled_timeout_s


def backoff_s(wfpr: WaitForPodsReady, count: int) -> float:
    """workload.go UpdateRequeueState for the count-th requeue (count >= 1), without jitter."""
    return float(min(wfpr.backoff_base_s * 2 ** (count - 1), wfpr.backoff_max_s))


def _pod_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _pod_scheduled(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return bool((pod.get("spec") or {}).get("nodeName")) or any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conds
    )


def owner_pods(owner: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    label = POD_OWNER_LABEL[owner["kind"]]
    meta = owner["metadata"]
    return [
        p
        for p in pods
        if p["metadata"].get("namespace") == meta["namespace"]
        and (p["metadata"].get("labels") or {}).get(label) == meta["name"]
        and not p["metadata"].get("deletionTimestamp")
    ]


def _since(c: dict[str, Any] | None, now: dt.datetime) -> float:
    if c is None:
        return 0.0
    return (now - dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))).total_seconds()


def timed_out(
    workload: dict[str, Any],
    owner: dict[str, Any],
    pods: list[dict[str, Any]],
    wfpr: WaitForPodsReady,
    unscheduled_s: float,
    now: dt.datetime,
) -> str | None:
    """admittedNotReadyWorkload: the underlying cause (WaitForScheduling, WaitForStart) once a timeout has passed."""
    if not is_true(workload, "Admitted") or is_true(workload, "Evicted") or is_true(workload, "Finished"):
        return None
    if workload["spec"].get("active") is False:
        return None
    expected = sum(int(ps.get("count", 1)) for ps in workload["spec"]["podSets"])
    mine = owner_pods(owner, pods)
    if sum(_pod_ready(p) for p in mine) >= expected:
        return None
    elapsed = _since(find(workload, "Admitted"), now)
    if unscheduled_s > 0 and sum(_pod_scheduled(p) for p in mine) < expected and elapsed >= unscheduled_s:
        return "WaitForScheduling"
    if elapsed >= wfpr.timeout_s:
        return "WaitForStart"
    return None


def evicted_status(workload: dict[str, Any], cause: str, wfpr: WaitForPodsReady, now: dt.datetime) -> dict[str, Any]:
    """workloadevict.Evict (PodsReadyTimeout) + UpdateRequeueState, and the reservation released."""
    meta = workload["metadata"]
    count = int(((workload.get("status") or {}).get("requeueState") or {}).get("count") or 0) + 1
    if wfpr.backoff_limit_count is not None and count > int(wfpr.backoff_limit_count):
        raise NotEmulated("waitForPodsReady.requeuingStrategy.backoffLimitCount reached: deactivation (triggerDeactivation)")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    message = f"Exceeded the PodsReady timeout {meta['namespace']}/{meta['name']}"
    set_cond(conds, cond("Evicted", True, "PodsReadyTimeout", message, now))
    set_cond(conds, cond("QuotaReserved", False, "Pending", "The workload was evicted", now))
    set_cond(conds, cond("Admitted", False, "NoReservation", "The workload has no reservation", now))
    requeue_at = now + dt.timedelta(seconds=backoff_s(wfpr, count))
    return {
        "conditions": conds,
        "admission": None,
        "requeueState": {"count": count, "requeueAt": iso(requeue_at)},
        "schedulingStats": {"evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": cause, "count": count}]},
    }


def waiting_for_backoff(workload: dict[str, Any], now: dt.datetime) -> bool:
    """workload_controller.go Reconcile: a Workload whose requeueAt is in the future is not queued until then."""
    at = ((workload.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    return isinstance(at, str) and dt.datetime.fromisoformat(at.replace("Z", "+00:00")) > now


def stopped_owner_spec(owner: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """reconciler.go stopJob: suspend, and each pod template's nodeSelector and tolerations restored from the
    Workload's podSets (RestorePodSetsInfo; labels and annotations are left), as a merge patch (keys the flavor
    added -> null)."""
    spec: dict[str, Any] = copy.deepcopy(owner["spec"])
    originals = {ps["name"]: ps["template"] for ps in workload["spec"]["podSets"]}
    templates = (
        [("main", spec["template"])]
        if owner["kind"] == "Job"
        else [(rj["name"], rj["template"]["spec"]["template"]) for rj in spec["replicatedJobs"]]
    )
    for name, template in templates:
        original = originals.get(name) or {}
        now_sel = (template.get("spec") or {}).get("nodeSelector") or {}
        want = (original.get("spec") or {}).get("nodeSelector") or {}
        template["spec"]["nodeSelector"] = {**{k: None for k in now_sel if k not in want}, **want}
        template["spec"]["tolerations"] = copy.deepcopy((original.get("spec") or {}).get("tolerations") or [])
    spec["suspend"] = True
    return spec
