"""`rljob doctor`'s Kueue checks: each configured LocalQueue's chain, its admission checks, and the nodes
behind each flavor (present? tainted in a way the trainer does not tolerate?)."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.accelerators import TPU_RESOURCE
from service.adapters.k8s.client import api_status, is_missing_object
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.kueue_setup import Flavor, admission_checks, inactive_reason
from service.adapters.k8s.settings import K8sSettings
from service.domain.self_check import CheckLine, CheckStatus

from .doctor_quota import quota_checks
from .kueue_chain import ADMISSION_CHECKS, ChainRead, read_chain
from .reads import ClusterReads

PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
PROVISIONING_GROUP = "autoscaling.x-k8s.io"
# The trainer's own toleration of TPU nodes (pod_template.py); a flavor's tolerations are added by Kueue.
TRAINER_TOLERATIONS = ({"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},)
CLUSTER_READER_FIX = "bind the ClusterRole rljob-cluster-reader to the service's account (k8s/overlays/gke-kueue)"


def configured_queues(settings: K8sSettings) -> list[str]:
    queues = ([settings.kueue_queue] if settings.kueue_queue else []) + list(settings.kueue_team_queues.values())
    return list(dict.fromkeys(queues))


def _tolerates(toleration: dict[str, Any], taint: Any) -> bool:
    """Kubernetes' rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration["effect"] != taint.effect:
        return False
    if toleration.get("key") and toleration["key"] != taint.key:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(toleration.get("value", "") == (taint.value or ""))


def _untolerated(node: Any, tolerations: list[dict[str, Any]]) -> list[str]:
    taints = (node.spec.taints if node.spec else None) or []
    return [
        f"{t.key}={t.value or ''}:{t.effect}"
        for t in taints
        if t.effect == "NoSchedule" and not any(_tolerates(tol, t) for tol in tolerations)
    ]


def node_check(reads: ClusterReads, flavor: Flavor) -> CheckLine:
    name = f"nodes for flavor {flavor.name}"
    labels = ", ".join(f"{k}={v}" for k, v in sorted(flavor.node_labels.items()))
    try:
        nodes = reads.nodes_with(flavor.node_labels)
    except (ApiException, K8sBackendError) as exc:
        return CheckLine("warn", name, f"cannot list nodes ({api_status(exc) or exc.__class__.__name__})", CLUSTER_READER_FIX)
    if not nodes:
        return CheckLine(
            "warn",
            name,
            f"no node carries {labels or 'its labels'} yet (a pool autoscaled to zero has none; flex-start pools start at 0)",
            "if no such node pool exists, create one with --node-labels for these labels (docs/deploy-gke.md); else ignore",
        )
    tolerations = [*flavor.tolerations, *TRAINER_TOLERATIONS]
    blocked = {(n.metadata.name if n.metadata else "") or "?": _untolerated(n, tolerations) for n in nodes}
    bad = {node: taints for node, taints in blocked.items() if taints}
    if not bad:
        return CheckLine("ok", name, f"{len(nodes)} node(s) with {labels}")
    detail = "; ".join(f"{node}: {', '.join(taints)}" for node, taints in sorted(bad.items()))
    fix = f"add a toleration for the taint to ResourceFlavor {flavor.name} (spec.tolerations) or remove the taint from the node pool"
    if len(bad) == len(nodes):
        return CheckLine("fail", name, f"every node carries a NoSchedule taint the trainer does not tolerate ({detail})", fix)
    return CheckLine("warn", name, f"{len(bad)} of {len(nodes)} node(s) carry an untolerated NoSchedule taint ({detail})", fix)


def _admission_check_lines(reads: ClusterReads, cq_name: str, cq: dict[str, Any], served: set[str]) -> list[CheckLine]:
    lines = []
    for check in admission_checks(cq):
        name = f"admission check {check} (ClusterQueue {cq_name})"
        try:
            ac = reads.kueue_object(ADMISSION_CHECKS, check)
        except ApiException as exc:
            if is_missing_object(exc):
                lines.append(CheckLine("fail", name, "does not exist", f"create AdmissionCheck {check} or drop it from the ClusterQueue"))
            else:
                lines.append(CheckLine("warn", name, f"cannot read it ({api_status(exc)})", CLUSTER_READER_FIX))
            continue
        except K8sBackendError as exc:
            lines.append(CheckLine("warn", name, f"cannot read it ({exc})"))
            continue
        inactive = inactive_reason(ac)
        if inactive is not None:
            lines.append(CheckLine("fail", name, f"inactive, Kueue says {inactive}", f"kubectl describe admissioncheck {check}"))
            continue
        lines.append(CheckLine("ok", name, "active"))
        if (ac.get("spec") or {}).get("controllerName") == PROVISIONING_CONTROLLER:
            versions = sorted(v for v in served if v.startswith(PROVISIONING_GROUP + "/"))
            if versions:
                lines.append(CheckLine("ok", f"api {PROVISIONING_GROUP} (ProvisioningRequest)", ", ".join(versions)))
            else:
                lines.append(
                    CheckLine(
                        "fail",
                        f"api {PROVISIONING_GROUP} (ProvisioningRequest)",
                        f"not served, but AdmissionCheck {check} uses the provisioning-request controller",
                        "enable ProvisioningRequest (GKE: a node pool with --enable-queued-provisioning) or drop the check",
                    )
                )
    return lines


def queue_checks(reads: ClusterReads, settings: K8sSettings, served: set[str]) -> list[CheckLine]:
    lines: list[CheckLine] = []
    flavors: dict[str, Flavor] = {}
    for queue in configured_queues(settings):
        name = f"queue {queue}"
        read: ChainRead = read_chain(reads.client, reads, queue)
        if read.unreadable:
            fix = "install Kueue >= 0.15 and apply k8s/base/rbac.yaml (and the gke-kueue overlay's ClusterRole)"
            lines.append(CheckLine("fail", name, f"cannot read it: {read.unreadable}", fix))
            continue
        if read.problem:
            lines.append(CheckLine("fail", name, read.problem, "see the message"))
        elif read.chain is not None:
            chain = read.chain
            missing = f"; missing flavors: {', '.join(chain.missing_flavors)}" if chain.missing_flavors else ""
            status: CheckStatus = "fail" if chain.missing_flavors else "ok"
            lines.append(
                CheckLine(
                    status,
                    name,
                    f"ClusterQueue {chain.cluster_queue} is active; flavors {', '.join(f.name for f in chain.flavors) or 'none'}{missing}",
                    "create the missing ResourceFlavors (k8s/kueue/resourceflavor.yaml)",
                )
            )
            flavors.update({f.name: f for f in chain.flavors})
            lines += [line for line in quota_checks(chain, settings) if line not in lines]
        if read.cluster_queue is not None:
            cq_name = str((read.cluster_queue.get("metadata") or {}).get("name") or "")
            lines += [line for line in _admission_check_lines(reads, cq_name, read.cluster_queue, served) if line not in lines]
    lines += [node_check(reads, flavor) for flavor in flavors.values()]
    return lines
