"""kube-scheduler for a cluster of several nodes: binds each unbound pod to the first feasible node
(scheduling.pick_node), or marks it Unschedulable with the "0/N nodes are available: ..." message.

With one node (EmulatedCluster's default) the kubelet schedules onto its own node, as before. With
`nodes=[...]` each node gets its own Kubelet (its runners run on this machine) and this scheduler binds
first; a kubelet then only sees bound pods, so it never schedules itself.
"""

from __future__ import annotations

import time
from typing import Any

from harness.podrun.api.kapi import KApi, now_iso

from .kubelet import RESCHEDULE_S, Kubelet
from .scheduling import Node, pick_node


class Scheduler:
    def __init__(self, api: KApi, kubelets: dict[str, Kubelet], nodes: list[Node]) -> None:
        self.api, self.kubelets, self.nodes = api, kubelets, nodes
        self._unschedulable: dict[tuple[str, str, str], tuple[str, float]] = {}
        # When each pod's PodScheduled became False: kube-scheduler writes the condition through
        # pkg/api/v1/pod/util.go UpdatePodCondition, which moves lastTransitionTime only when the status changes.
        self._unschedulable_since: dict[tuple[str, str, str], str] = {}

    async def schedule(self, pods: list[dict[str, Any]]) -> None:
        running: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                running.setdefault(node, []).append(p["spec"])
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            node = await self._schedule_one(pod, running)
            if node is not None:  # later pods of this pass see it as running there
                running.setdefault(node.name, []).append(pod["spec"])

    async def _schedule_one(self, pod: dict[str, Any], running: dict[str, list[dict[str, Any]]]) -> Node | None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"], meta.get("uid", ""))
        last = self._unschedulable.get(key)
        if last and time.monotonic() - last[1] < RESCHEDULE_S:
            return None
        node, why = pick_node(pod["spec"], self.nodes, running)
        ns, name, _ = key
        if node is not None:
            self._unschedulable.pop(key, None)
            self._unschedulable_since.pop(key, None)
            kubelet = self.kubelets[node.name]
            kubelet.set_condition(pod, {"type": "PodScheduled", "status": "True"})  # kept by that node's kubelet
            await self.api.patch(
                "Pod",
                ns,
                name,
                {
                    "spec": {"nodeName": node.name},
                    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
                },
            )
            await self.api.event(
                pod, "Pod", "Scheduled", f"Successfully assigned {ns}/{name} to {node.name}", component="default-scheduler"
            )
            return node
        assert why is not None
        if last is None or last[0] != why:
            await self.api.event(pod, "Pod", "FailedScheduling", why, "Warning", component="default-scheduler")
        self._unschedulable[key] = (why, time.monotonic())
        since = self._unschedulable_since.setdefault(key, now_iso())
        await self.api.patch(
            "Pod",
            ns,
            name,
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why, "lastTransitionTime": since}
                    ],
                }
            },
        )
        return None
