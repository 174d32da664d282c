"""JobSet's pod webhook as v0.12.0 decides it, pure: which new pods of an exclusive-placement JobSet are admitted.

kubernetes-sigs/jobset v0.12.0, `pkg/webhooks/pod_webhook.go` (mutating `mpod.kb.io`, validating `vpod.kb.io`,
both on pod create, failurePolicy Fail) with `pkg/util/placement/placement.go` (GenPodName, IsLeaderPod) and
`pkg/controllers/pod_controller.go` (IndexPodName, removePodNameSuffix). For a pod annotated
`jobset.sigs.k8s.io/jobset-name` and `alpha.jobset.sigs.k8s.io/exclusive-topology` (and not using the
node-selector strategy):

- the leader (completion index 0) is admitted (its exclusive pod (anti-)affinities are not added here: the
  emulated scheduler does not read pod affinity);
- a follower gets `nodeSelector[<topology key>]` = the leader's node's label value once the leader is
  scheduled, and is refused until then, or when its node selector lacks the key, or when the leader lookup
  fails. The lookup (leaderPodForFollower) lists the pods named `<jobset>-<replicatedJob>-<jobIndex>-0-*` that
  carry the exclusive annotation, leaves out those being deleted, and wants exactly one, owned by the
  follower's Job. At v0.12.0 a Failed (or Succeeded) leader is still counted: a leader retried in place by its
  Job leaves two, and every new follower is refused ("expected 1 leader pod ... but got 2"). jobset main fixed
  that in 1dc6eec9 (terminal pods left out too), in no release yet: `leave_out_finished=True` is that fix.

A refusal is the API server's answer to the pod create (403 from the webhook), which the Job controller
reports as a FailedCreate event and retries. Not emulated: the `jobset.sigs.k8s.io/priority` label (pods have
no spec.priority here) and the pod reconciler that deletes followers placed off their leader's domain.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
EXCLUSIVE_KEY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY_KEY = "alpha.jobset.sigs.k8s.io/node-selector"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
MUTATING, VALIDATING = "mpod.kb.io", "vpod.kb.io"


@dataclass(frozen=True)
class Admission:
    """The pod as admitted (mutated), or the API server's refusal message."""

    pod: dict[str, Any] | None
    refused: str | None = None


class _Refused(Exception):
    pass


def _denied(webhook: str, why: str) -> Admission:
    return Admission(pod=None, refused=f'admission webhook "{webhook}" denied the request: {why}')


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def _controller_uid(pod: dict[str, Any]) -> str | None:
    return next((r.get("uid") for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def _pod_name_index(pod: dict[str, Any]) -> str | None:
    """IndexPodName: the pod name without its random suffix, for pods of exclusive-placement JobSets only."""
    if EXCLUSIVE_KEY not in _annotations(pod):
        return None
    parts = pod["metadata"]["name"].split("-")
    return "-".join(parts[:-1]) if len(parts) >= 5 else None  # <jobset>-<rjob>-<jobIndex>-<podIndex>-<suffix>


def leader_for_follower(pod: dict[str, Any], pods: list[dict[str, Any]], *, leave_out_finished: bool = False) -> dict[str, Any]:
    """leaderPodForFollower: the one leader pod of the follower's Job, or _Refused with upstream's message."""
    labels = pod["metadata"].get("labels") or {}
    for key in (JOBSET_NAME_KEY, REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY):
        if key not in labels:
            raise _Refused(f"pod missing label: {key}")
    leader_name = f"{labels[JOBSET_NAME_KEY]}-{labels[REPLICATED_JOB_NAME_KEY]}-{labels[JOB_INDEX_KEY]}-0"  # GenPodName
    namespace = pod["metadata"]["namespace"]
    found = [
        p
        for p in pods
        if p["metadata"]["namespace"] == namespace
        and _pod_name_index(p) == leader_name
        and not p["metadata"].get("deletionTimestamp")
        and not (leave_out_finished and (p.get("status") or {}).get("phase") in ("Failed", "Succeeded"))
    ]
    if len(found) != 1:
        raise _Refused(f"expected 1 leader pod ({leader_name}), but got {len(found)}. this is an expected, transient error")
    leader = found[0]
    follower_uid, leader_uid = _controller_uid(pod), _controller_uid(leader)
    if follower_uid is None:
        raise _Refused("follower pod has no owner reference")
    if leader_uid is None:
        raise _Refused(f'leader pod "{leader["metadata"]["name"]}" has no owner reference')
    if follower_uid != leader_uid:
        raise _Refused(f"follower pod owner UID ({follower_uid}) != leader pod owner UID ({leader_uid})")
    return leader


def admit_pod(
    pod: dict[str, Any], pods: list[dict[str, Any]], node_labels: Mapping[str, Mapping[str, str]], *, leave_out_finished: bool = False
) -> Admission:
    """Default (mutating) then ValidateCreate, over the namespace's pods and each node's labels."""
    annotations = _annotations(pod)
    topology_key = annotations.get(EXCLUSIVE_KEY)
    if JOBSET_NAME_KEY not in annotations or NODE_SELECTOR_STRATEGY_KEY in annotations or topology_key is None:
        return Admission(pod=pod)
    if annotations.get(COMPLETION_INDEX_ANNOTATION) == "0":  # placement.IsLeaderPod
        return Admission(pod=pod)
    pod = copy.deepcopy(pod)
    # Default -> patchPod -> setNodeSelector: a lookup error or an unscheduled leader leaves the pod as it is.
    try:
        leader: dict[str, Any] | None = leader_for_follower(pod, pods, leave_out_finished=leave_out_finished)
    except _Refused:
        leader = None
    node_name = ((leader or {}).get("spec") or {}).get("nodeName")
    if node_name:
        if node_name not in node_labels:
            return _denied(MUTATING, f'nodes "{node_name}" not found')
        value = node_labels[node_name].get(topology_key)
        if value is None:
            return _denied(MUTATING, f"node does not have topology label: {topology_key}")
        pod["spec"].setdefault("nodeSelector", {})[topology_key] = value
    # ValidateCreate.
    selector = pod["spec"].get("nodeSelector")
    if selector is None:
        return _denied(VALIDATING, "follower pod node selector not set")
    if topology_key not in selector:
        return _denied(VALIDATING, f"follower pod node selector for topology domain not found. missing selector: {topology_key}")
    try:
        leader = leader_for_follower(pod, pods, leave_out_finished=leave_out_finished)
    except _Refused as e:
        return _denied(VALIDATING, str(e))
    if not (leader.get("spec") or {}).get("nodeName"):
        return _denied(VALIDATING, "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error")
    return Admission(pod=pod)
