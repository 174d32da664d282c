"""An admitted workload whose pod no node of its flavor can take: "stranded", past a limit, in words a user can act on.

Kueue admits a Workload to a flavor by quota alone; the pod can still find no node there (a reservation pool made
without the label its flavor names, a spot pool that is gone, a taint the pod does not tolerate). It then holds its
quota and waits. Kueue's waitForPodsReady (on by default in v0.19.2 and v0.20: 30 min from admission) and v0.20's
unscheduledTimeout evict it, but Kueue readmits an evicted Workload from the first flavor of its resource group
(harness/podrun/kueue/podsready.py cites where), so a job stranded on its set's first flavor comes back to it. The
service says so once the pod has been unschedulable for RLJOB_K8S_STRANDED_AFTER_S, counted from the
pod's own PodScheduled=False condition (the cluster's clock, so a restarted service counts from the same moment).
The message names no changing figure (the scheduler's node counts), so it is written, and sent as a `job.stranded`
webhook, once. A job whose hardware.capacity has another kind left is given back to the queue without this one
instead (observation_policy.leaves_stranded, placement.launch_spec).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from service.domain.records.ports import STRANDED_REASON, Observation, ObservedState

from . import pods


def unschedulable_since(pod_list: list[Any]) -> tuple[Any, datetime] | None:
    """The newest pending pod that is unschedulable, and since when (its PodScheduled=False transition)."""
    for pod in pods.newest_first(pod_list):
        if not pod.status or pod.status.phase != "Pending":
            continue
        scheduled = pods.condition(pod, "PodScheduled")
        since = getattr(scheduled, "last_transition_time", None) if scheduled is not None else None
        if scheduled is not None and scheduled.status == "False" and isinstance(since, datetime):
            return pod, since if since.tzinfo else since.replace(tzinfo=UTC)
    return None


def stranded(obs: Observation, pod_list: list[Any], *, after_s: float, now: datetime) -> Observation:
    """`obs` as STRANDED when its pod has been unschedulable for `after_s` or longer; otherwise unchanged."""
    if obs.state is not ObservedState.PENDING or obs.reason != "Unschedulable":
        return obs
    found = unschedulable_since(pod_list)
    if found is None or (now - found[1]).total_seconds() < after_s:
        return obs
    pod, since = found
    where = f"admitted to Kueue flavor {obs.flavor}" if obs.flavor else "admitted"
    message = (
        f"stranded: {where}, but no node there can run its pod, unschedulable since {since:%Y-%m-%d %H:%M} UTC (limit "
        f"{after_s / 60:g} min, RLJOB_K8S_STRANDED_AFTER_S). It holds that flavor's quota, and when Kueue evicts it "
        "(waitForPodsReady) it readmits it from the first flavor of its set, so it can come back here. It needs "
        f"{pods.requirements_text(pod)}: give that pool the labels, taints and room the flavor promises, or cancel the "
        "job and submit it again without that kind in hardware.capacity"
    )
    return dataclasses.replace(obs, reason=STRANDED_REASON, message=message)
