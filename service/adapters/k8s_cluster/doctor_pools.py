"""`rljob doctor` without Kueue: the TPU node pools a trainer pod can land on, read from the nodes themselves.

With Kueue, doctor_kueue.py checks the nodes behind each ResourceFlavor. Without it nothing names the pools,
so this reads the nodes the service can list and checks the label every TPU pod selects, `rljob.dev/capacity`
(service/adapters/k8s/capacity.py; the node-pool commands in docs/deploy-gke.md):

- each kind (on-demand, spot, flex-start, reservation) has nodes, else a warning: the guide's pools all
  autoscale from zero (flex-start starts there), so an empty kind is a pool at zero or a pool never created,
  which the nodes cannot tell apart;
- a node of a kind also carries GKE's label the pod selects with it: a spot node `cloud.google.com/gke-spot=true`,
  a reservation node `cloud.google.com/reservation-name`; one without it takes no pod of its kind (fail);
- a TPU node without `rljob.dev/capacity`, or with a value that is no kind, takes no trainer pod (warn).
"""

from __future__ import annotations

from collections import defaultdict

from kubernetes.client import V1Node
from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.accelerators import GKE_NODE_POOL_LABEL
from service.adapters.k8s.capacity import CAPACITY_LABEL, EVAL_POOL, RESERVATION_NAME_LABEL, SPOT_LABEL
from service.adapters.k8s.client import api_status
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.settings import K8sSettings
from service.domain.self_check import CheckLine

from .doctor_kueue import configured_queues
from .reads import ClusterReads

TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
KINDS = ("on-demand", "spot", "flex-start", "reservation")  # trainer.contract HardwareSpec.capacity's values
GUIDE = "docs/deploy-gke.md step 3"
SEE_NODES = f"kubectl get nodes -L {CAPACITY_LABEL},{SPOT_LABEL},{RESERVATION_NAME_LABEL},{GKE_NODE_POOL_LABEL}"


def _labels(node: V1Node) -> dict[str, str]:
    return dict((node.metadata.labels if node.metadata else None) or {})


def _name(node: V1Node) -> str:
    return str((node.metadata.name if node.metadata else None) or "?")


def _pools(nodes: list[V1Node]) -> str:
    pools = sorted({_labels(n).get(GKE_NODE_POOL_LABEL, "?") for n in nodes})
    return ", ".join(pools)


def _few(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def capacity_pool_checks(nodes: list[V1Node]) -> list[CheckLine]:
    """One line per capacity kind, plus one for TPU nodes no trainer pod can select; pure over the node list."""
    by_kind: dict[str, list[V1Node]] = defaultdict(list)
    unlabelled, strange, eval_pool = [], [], []
    for node in nodes:
        labels = _labels(node)
        kind = labels.get(CAPACITY_LABEL)
        if kind in KINDS:
            by_kind[kind].append(node)
        elif kind == EVAL_POOL:
            eval_pool.append(node)
        elif kind is not None:
            strange.append(node)
        elif TPU_ACCELERATOR_LABEL in labels:
            unlabelled.append(node)
    lines = [_kind_check(kind, by_kind[kind]) for kind in KINDS]
    if unlabelled:
        lines.append(
            CheckLine(
                "warn",
                f"nodes without {CAPACITY_LABEL}",
                f"TPU node(s) {_few([_name(n) for n in unlabelled])} (pool {_pools(unlabelled)}) have no {CAPACITY_LABEL} "
                "label: every trainer pod selects it, so they take no trainer pod",
                f"recreate the pool with --node-labels={CAPACITY_LABEL}=<on-demand|spot|flex-start|reservation> ({GUIDE}); "
                f"a pool's labels can also be updated: gcloud container node-pools update POOL --node-labels=...",
            )
        )
    if eval_pool:
        lines.append(
            CheckLine(
                "warn",
                f"nodes {CAPACITY_LABEL}={EVAL_POOL}",
                f"node(s) {_few([_name(n) for n in eval_pool])} (pool {_pools(eval_pool)}) are the eval pool, which only eval "
                "jobs queued by Kueue select: without a Kueue queue eval jobs run on any node with room and this pool takes none",
                f"configure RLJOB_K8S_KUEUE_QUEUE with the cpu-eval flavor (k8s/kueue/), or delete the pool ({GUIDE}, Eval pool)",
            )
        )
    if strange:
        values = sorted({_labels(n)[CAPACITY_LABEL] for n in strange})
        lines.append(
            CheckLine(
                "warn",
                f"nodes {CAPACITY_LABEL}",
                f"node(s) {_few([_name(n) for n in strange])} carry {CAPACITY_LABEL}={', '.join(values)}, which is no kind "
                f"({', '.join(KINDS)}): no trainer pod selects them",
                f"relabel the pool with one of {', '.join(KINDS)} ({GUIDE})",
            )
        )
    return lines


def _kind_check(kind: str, nodes: list[V1Node]) -> CheckLine:
    name = f"nodes {CAPACITY_LABEL}={kind}"
    if not nodes:
        create = f"create a {kind} TPU pool with --node-labels={CAPACITY_LABEL}={kind} ({GUIDE})"
        if kind == "flex-start":
            why = "none now, as expected between jobs: a flex-start pool starts at 0 nodes and scales up for a pending pod"
            return CheckLine("warn", name, f"{why}; without such a pool, jobs asking for flex-start stay Pending", create)
        why = (
            "no node: its pool may have scaled to zero (it comes back for a pending pod), or none exists and jobs asking "
            f"for {kind}{' (the default)' if kind == 'on-demand' else ''} stay Pending"
        )
        return CheckLine("warn", name, why, f"{create}; see them with: {SEE_NODES}")
    required = {"spot": SPOT_LABEL, "reservation": RESERVATION_NAME_LABEL}.get(kind)
    if required is not None:
        missing = [n for n in nodes if not _labels(n).get(required) or (kind == "spot" and _labels(n)[required] != "true")]
        if missing:
            want = f"{required}=true" if kind == "spot" else required
            fix = (
                "create the pool with --spot (GKE sets the label itself)"
                if kind == "spot"
                else "create the pool with --reservation-affinity=specific --reservation=NAME (GKE sets the label)"
            )
            return CheckLine(
                "fail",
                name,
                f"node(s) {_few([_name(n) for n in missing])} (pool {_pools(missing)}) lack {want}, which a {kind} pod also "
                f"selects: they take no {kind} pod",
                f"{fix} ({GUIDE})",
            )
    found = f"{len(nodes)} node(s) in pool(s) {_pools(nodes)}"
    if kind == "reservation":
        found += f"; reservation(s) {', '.join(sorted({_labels(n)[RESERVATION_NAME_LABEL] for n in nodes}))} (hardware.reservation)"
    return CheckLine("ok", name, found)


def pool_checks_without_kueue(reads: ClusterReads, settings: K8sSettings) -> list[CheckLine]:
    """The capacity pools, read from the nodes, when no Kueue queue is configured (doctor_kueue.py does it then)."""
    if configured_queues(settings):
        return []
    try:
        # Asked first: without Kueue the service's Role grants no nodes (the ClusterRole comes with the gke-kueue
        # overlay), and a forbidden call is a call its Role does not grant (tests/deploy/test_deployment_runs.py).
        may_list, _ = reads.allowed("", "nodes", "list", namespace=None)
        if not may_list:
            why = (
                "the service's account may not list nodes (no ClusterRole rljob-cluster-reader): "
                "the TPU pools' capacity labels are not checked"
            )
            return [CheckLine("warn", f"nodes {CAPACITY_LABEL}", why, f"check by hand: {SEE_NODES}")]
        nodes = reads.nodes_with({})
    except (ApiException, K8sBackendError) as exc:
        why = f"cannot list nodes ({api_status(exc) or exc.__class__.__name__}): the TPU pools' capacity labels are not checked"
        return [CheckLine("warn", f"nodes {CAPACITY_LABEL}", why, f"check by hand: {SEE_NODES}")]
    return capacity_pool_checks(nodes)
