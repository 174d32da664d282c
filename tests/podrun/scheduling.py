"""The one node of the emulated cluster, and the scheduler's fit check against it (pure).

This machine is the node. By default it carries the labels every node has and its real CPU count and
memory as allocatable, no taints and no accelerators, so a TPU pod stays Pending/Unschedulable, as it
would on a cluster without a TPU pool. Tests that want TPU-shaped pods scheduled (with fake commands)
pass a node that carries a TPU pool's labels, taint and google.com/tpu.
Checked: nodeSelector, taints/tolerations (NoSchedule, NoExecute), resource requests (limits where a
request is unset, as the API defaults them) against allocatable minus the pods already running.
Not emulated: node affinity, pod (anti-)affinity, topology spread, priorities and preemption.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from .volumes import NotEmulated

NODE_NAME = "podrun-node"


def _memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 8 * 1024**3


@dataclass(frozen=True)
class Node:
    name: str = NODE_NAME
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    allocatable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def local(cls, **overrides: Any) -> Node:
        values: dict[str, Any] = {
            "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
            "allocatable": {"cpu": str(os.cpu_count() or 1), "memory": str(_memory_bytes()), "pods": "110"},
        }
        values.update(overrides)
        return cls(**values)


def requests_of(pod_spec: dict[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        wanted = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, qty in wanted.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(str(qty))
    return total


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def unschedulable(pod_spec: dict[str, Any], node: Node, running: list[dict[str, Any]]) -> str | None:
    """The scheduler's message when the pod cannot go on the node now; None when it fits."""
    prefix = "0/1 nodes are available: 1 "
    if (pod_spec.get("affinity") or {}).get("nodeAffinity") or pod_spec.get("topologySpreadConstraints"):
        raise NotEmulated("node affinity and topology spread are not emulated by the scheduler")
    selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return prefix + "node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: " \
                        "1 Preemption is not helpful for scheduling."
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod_spec.get("tolerations") or [], taint):
            return prefix + f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}."
    used: dict[str, Decimal] = {}
    for other in running:
        for k, v in requests_of(other).items():
            used[k] = used.get(k, Decimal(0)) + v
    short = [name for name, qty in requests_of(pod_spec).items()
             if qty > 0 and qty + used.get(name, Decimal(0)) > parse_quantity(node.allocatable.get(name, "0"))]
    if short:
        return "0/1 nodes are available: " + ", ".join(f"1 Insufficient {name}" for name in sorted(short)) + "."
    return None
