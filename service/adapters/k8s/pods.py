"""Reading pods: which attempt is newest, why it waits, how it ended. Pure functions over models."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.contract import describe_exit_code

from . import names
from .accelerators import TPU_RESOURCE

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Event

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})


@dataclass(frozen=True)
class Ending:
    """How one attempt (pod) ended."""

    exit_code: int | None
    reason: str | None  # the kubelet's: OOMKilled, Error, Completed, ... or a DisruptionTarget reason
    message: str


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str


def newest_first(pods: list[Any]) -> list[Any]:
    def newest_first(p: Any) -> tuple[bool, Any, str]:
        return p.metadata.creation_timestamp is not None, p.metadata.creation_timestamp or 0, p.metadata.name

    return sorted(pods, key=newest_first, reverse=True)


def trainer_status(pod: Any) -> Any | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == names.TRAINER_CONTAINER:
            return status
    return None


def condition(pod: Any, kind: str) -> Any | None:
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == kind:
            return cond
    return None


def disruption(pod: Any) -> Ending | None:
    """The pod was (or is being) disrupted: preemption, maintenance, eviction; not the trainer's fault."""
    cond = condition(pod, "DisruptionTarget")
    if cond is None or cond.status != "True":
        return None
    return Ending(exit_code=None, reason=cond.reason or "DisruptionTarget", message=cond.message or "")


def ending(pod: Any) -> Ending | None:
    """The trainer container's termination, if it terminated."""
    status = trainer_status(pod)
    if status is None:
        return None
    terminated = (status.state.terminated if status.state else None) or (status.last_state.terminated if status.last_state else None)
    if terminated is None:
        return None
    return Ending(exit_code=terminated.exit_code, reason=terminated.reason, message=terminated.message or "")


def is_failed_attempt(pod: Any) -> bool:
    return (pod.status and pod.status.phase == "Failed") or disruption(pod) is not None


def requirements_text(pod: Any) -> str:
    """What the pod asks of a node, for 'cannot schedule' messages."""
    selector = pod.spec.node_selector or {} if pod.spec else {}
    parts = [f"{k}={v}" for k, v in sorted(selector.items())]
    for container in (pod.spec.containers or []) if pod.spec else []:
        limits = (container.resources.limits if container.resources else None) or {}
        if TPU_RESOURCE in limits:
            parts.append(f"{TPU_RESOURCE}: {limits[TPU_RESOURCE]}")
    return ", ".join(parts) or "no node selector"


def waiting(pod: Any, events: list[Any]) -> Waiting | None:
    """Why a Pending pod is not running yet, with what to check; None if simply starting normally."""
    status = trainer_status(pod)
    wait = status.state.waiting if status and status.state else None
    image = pod.spec.containers[0].image if pod.spec and pod.spec.containers else "?"
    if wait is not None and wait.reason in IMAGE_PULL_REASONS:
        return Waiting(
            "ImagePullBackOff",
            f"cannot pull the trainer image {image} ({wait.reason}: {wait.message or 'no detail'}); check that the "
            "image and tag exist and that the nodes' service account can read the registry "
            "(roles/artifactregistry.reader), then set RLJOB_K8S_IMAGE",
        )
    if wait is not None and wait.reason in CONFIG_REASONS:
        return Waiting(
            wait.reason,
            f"the trainer container cannot be created: {wait.message or wait.reason}; check that the Secret and "
            f"ConfigMap the pod references exist in namespace {pod.metadata.namespace}",
        )
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        detail = scheduled.message or _last_event_message(events, pod, "FailedScheduling") or scheduled.reason or ""
        scale_up = _last_event_message(events, pod, "NotTriggerScaleUp")
        extra = f" Cluster autoscaler: {scale_up}." if scale_up else ""
        return Waiting(
            "Unschedulable",
            f"no node can run the trainer pod ({detail.strip()}). It needs {requirements_text(pod)}: check that a "
            "TPU node pool with exactly that accelerator, topology and machine type exists (or node "
            "auto-provisioning is on), that it is not full, and that the project has TPU quota in the cluster's "
            f"zone.{extra}",
        )
    failed_mount = _last_event_message(events, pod, "FailedMount")
    if failed_mount:
        return Waiting("FailedMount", f"a volume cannot be mounted: {failed_mount}")
    return None


def _last_event_message(events: list[CoreV1Event], pod: Any, reason: str) -> str | None:
    for event in reversed(events):
        if event.reason == reason and event.involved_object and event.involved_object.name == pod.metadata.name:
            return event.message
    return None


_EXIT_CODE_RE = re.compile(r"exit code (\d+)")


def exit_code_from_message(message: str | None) -> int | None:
    """The Job controller's PodFailurePolicy message names the exit code; used when the pod is gone."""
    match = _EXIT_CODE_RE.search(message or "")
    return int(match.group(1)) if match else None


def describe_ending(end: Ending, memory_limit: str | None) -> str:
    if end.reason == "OOMKilled":
        return (
            f"the trainer ran out of memory (OOMKilled at the {memory_limit or 'configured'} limit); raise "
            "RLJOB_K8S_MEMORY_REQUEST or lower the rollout batch (grpo.batch_size, grpo.num_generations)"
        )
    return describe_exit_code(end.exit_code)


def memory_limit(pod: Any) -> str | None:
    for container in (pod.spec.containers or []) if pod.spec else []:
        if container.name == names.TRAINER_CONTAINER and container.resources and container.resources.limits:
            limit: str | None = container.resources.limits.get("memory")
            return limit
    return None
