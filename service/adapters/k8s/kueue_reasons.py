"""Why Kueue has not admitted a Workload, in one vocabulary on Kueue v0.19 and v0.20, and in words a user can act on.

Kueue v0.20 turns UnadmittedWorkloadsObservability on by default (CHANGELOG/CHANGELOG-0.20.md, #13063): the
QuotaReserved=False reason becomes WaitingForQuota, ExceedsMaxQuota or NoMatchingFlavor (the scheduler's
flavorassigner.go resolveNoFitReason) and Misconfigured or Suspended (workload_controller.go getQueueBlocker), where
v0.19.2 says Pending and Inadmissible for all of them. The messages did not change, so a v0.19 reason is read into
v0.20's from its message by the same rules (v0.19.2 flavorassigner.go fitsResourceQuota / checkFlavorForPodSets,
workload_controller.go getQueueBlocker): the job's status, the dashboard and the CLI say the same on both.
"""

from __future__ import annotations

import re

# flavorassigner.go reasonSeverity (v0.20): within a resource group the least severe flavor's reason is reported.
_SEVERITY = {"WaitingForQuota": 2, "ExceedsMaxQuota": 3, "NoMatchingFlavor": 4}
_FLAVOR_REASON = re.compile(
    r"(?:^|, )(?:insufficient unused quota|insufficient quota|untolerated taint|flavor \S+ doesn't match|flavor \S+ not found)"
)


def _flavor_reason(part: str) -> str:
    if part.startswith("insufficient unused quota"):
        return "WaitingForQuota"
    if part.startswith("insufficient quota"):
        return "ExceedsMaxQuota"  # "... > maximum capacity (...)"
    return "NoMatchingFlavor"


def normalized_reason(reason: str, message: str) -> str:
    """Kueue's QuotaReserved=False reason as v0.20 names it, from a v0.19 one and its message; others unchanged."""
    if reason == "Inadmissible":
        if message.endswith("doesn't exist"):
            return "Misconfigured"
        if message.endswith("is inactive") or message.endswith("is stopped"):
            return "Suspended"
        return reason
    if reason == "Waiting":  # v0.19.2 scheduler.go, under waitForPodsReady.blockAdmission
        return "WaitingForPodsReady"
    if reason != "Pending" or not message.startswith("couldn't assign flavors"):
        return reason
    parts = [p.strip() for p in message.split(": ", 1)[-1].split(", ") if p.strip()]
    found = [_flavor_reason(p) for p in parts if _FLAVOR_REASON.match(p)]
    if not found:
        return "NoMatchingFlavor" if any("unavailable in ClusterQueue" in p for p in parts) else reason
    return min(found, key=_SEVERITY.__getitem__)


def reason_words(reason: str, message: str, queue: str) -> str:
    """For people: what the wait means and what to do, then Kueue's own message (by normalized reason)."""
    words = {
        "WaitingForQuota": "waiting for quota: the jobs admitted before it hold the flavors it may use, and it starts "
        "when one of them finishes (nothing to do)",
        "ExceedsMaxQuota": f"asks for more than LocalQueue {queue}'s whole quota in every flavor it may use, so it is never "
        "admitted as it is: cancel it and submit a smaller slice, or ask an admin to raise the ClusterQueue's nominalQuota",
        "NoMatchingFlavor": f"no flavor behind LocalQueue {queue} takes its hardware (accelerator, topology, capacity), so it "
        "is never admitted as it is: cancel it and change hardware, or ask an admin for such a flavor (docs/deploy-gke.md)",
        "Misconfigured": f"LocalQueue {queue} or its ClusterQueue does not exist: an admin creates it (k8s/kueue/); "
        "`rljob doctor` checks the chain",
        "Suspended": f"LocalQueue {queue} or its ClusterQueue is stopped or inactive: it waits until an admin starts it "
        "again; `rljob doctor` says why it is inactive",
        "WaitingForPodsReady": "Kueue admits nothing new until the jobs admitted before it have all their pods ready "
        "(waitForPodsReady.blockAdmission); it is next once they are",
        "WaitingForPreemptedWorkloads": "Kueue preempted lower-priority jobs for it and waits for them to release their quota",
        "PendingEvaluation": f"in LocalQueue {queue}, not yet evaluated by Kueue's scheduler",
        "PodsReadyTimeout": "Kueue evicted it because its pods were not scheduled or ready in time (waitForPodsReady); "
        "it is back in the queue and tried again after a backoff",
    }.get(reason)
    if words is None:
        return message or f"Kueue has not admitted it ({reason})"
    return f"{words}. Kueue: {message}" if message else words
