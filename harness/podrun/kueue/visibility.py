"""Kueue's visibility API for the emulator, pure: a LocalQueue's pending Workloads in line, as
`GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/NS/localqueues/NAME/pendingworkloads` answers.

Read in kubernetes-sigs/kueue v0.19.2: pkg/visibility/storage/pending_workloads_lq.go Get takes the LocalQueue's
ClusterQueue (404 NotFound for an unknown LocalQueue), walks queue.Manager.PendingWorkloadsInfo(cq) (cluster_queue.go
Snapshot: the heap and the inadmissible Workloads together, sorted by the queue ordering, here
kueue/controller.py queue_order) and keeps the Workloads of that namespace and LocalQueue, `offset` of them skipped and
at most `limit` kept (utils.go boundedLimitOffset: limit in [0, 100000], 1000 when not given, defaults.go), each
with its positionInClusterQueue (its index in the whole ClusterQueue's order) and positionInLocalQueue (its index
among the kept ones, offset included), 0-based (utils.go newPendingWorkload). Between v0.19.2 and v0.20.0-devel
(the stored mirror's newest v0.20 tag) pkg/visibility changed only the ClusterQueue endpoint's local positions
(pending_workloads_cq.go), which rljob does not read: the LocalQueue endpoint is the same under both.
"""

from __future__ import annotations

from typing import Any

from .controller import holds_quota, is_true, queue_order

GROUP_VERSION = "visibility.kueue.x-k8s.io/v1beta2"
DEFAULT_LIMIT, MAX_LIMIT = 1000, 100_000  # apis/visibility/v1beta2/defaults.go, pkg/constants/constants.go


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("spec") or {}


def is_pending(workload: dict[str, Any]) -> bool:
    """In its ClusterQueue's queue: active, not holding quota, not finished, not being deleted."""
    spec = workload.get("spec") or {}
    return (
        spec.get("active", True) is not False
        and not holds_quota(workload)
        and not is_true(workload, "Finished")
        and not workload["metadata"].get("deletionTimestamp")
    )


def pending_workloads(
    workloads: list[dict[str, Any]],
    local_queues: list[dict[str, Any]],
    namespace: str,
    name: str,
    *,
    limit: int | None = None,
    offset: int = 0,
) -> dict[str, Any] | None:
    """The PendingWorkloadsSummary for LocalQueue namespace/name; None when there is no such LocalQueue."""
    cluster_queue_of = {(q["metadata"]["namespace"], q["metadata"]["name"]): _spec(q).get("clusterQueue") for q in local_queues}
    cq = cluster_queue_of.get((namespace, name))
    if cq is None:
        return None
    limit = min(max(DEFAULT_LIMIT if limit in (None, 0) else limit, 0), MAX_LIMIT)
    offset = max(offset, 0)
    in_cq = [w for w in workloads if is_pending(w) and cluster_queue_of.get((w["metadata"]["namespace"], _spec(w).get("queueName"))) == cq]
    items: list[dict[str, Any]] = []
    skipped = 0
    for index, w in enumerate(queue_order(in_cq)):
        if len(items) >= limit:
            break
        if w["metadata"]["namespace"] != namespace or _spec(w).get("queueName") != name:
            continue
        if skipped < offset:
            skipped += 1
            continue
        meta = w["metadata"]
        items.append(
            {
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "creationTimestamp": meta.get("creationTimestamp"),
                    "ownerReferences": [
                        {k: r[k] for k in ("apiVersion", "kind", "name", "uid") if k in r} for r in meta.get("ownerReferences") or []
                    ],
                },
                "priority": int((w.get("spec") or {}).get("priority") or 0),
                "localQueueName": name,
                "positionInClusterQueue": index,
                "positionInLocalQueue": len(items) + offset,
            }
        )
    return {"kind": "PendingWorkloadsSummary", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
