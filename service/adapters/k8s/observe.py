"""Map what the cluster says (Job or JobSet, its pods, their events) to one Observation.

Pure functions: the launcher reads the objects, these decide. Messages say what is happening and,
on trouble, what to check next; `reason` is the short machine-readable cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.domain.records.models import QueueStatus
from service.domain.records.ports import Observation, ObservedState
from trainer.contract import describe_exit_code

from . import names, pods
from .kueue import KueueRead
from .kueue_reasons import normalized_reason, reason_words
from .pods import Ending

if TYPE_CHECKING:
    from kubernetes.client import V1Pod, V1PodFailurePolicyRule


@dataclass(frozen=True)
class Workload:
    """The Job or JobSet being read: what every observation of it carries besides what was seen."""

    job_id: str
    object_name: str  # job/<name> or jobset/<name>, as kubectl names it

    def observation(
        self,
        state: ObservedState,
        reason: str | None,
        message: str,
        *,
        exit_code: int | None = None,
        queue: QueueStatus | None = None,
        disrupted: bool = False,
    ) -> Observation:
        return Observation(
            job_id=self.job_id,
            state=state,
            reason=reason,
            message=message,
            exit_code=exit_code,
            object_name=self.object_name,
            queue=queue,
            disrupted=disrupted,
        )


def gone(job_id: str, object_name: str, *, reason: str = "NotFound", message: str | None = None) -> Observation:
    workload = Workload(job_id, object_name)
    return workload.observation(
        ObservedState.GONE,
        reason,
        message or f"{object_name} does not exist: it was deleted (cancel, ttlSecondsAfterFinished or by hand) or never created",
    )


def _true_conditions(conditions: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cond in conditions or []:
        kind, status = (cond.get("type"), cond.get("status")) if isinstance(cond, dict) else (cond.type, cond.status)
        if status == "True" and kind is not None:  # every condition has a type; lookups are by name
            out[kind] = cond
    return out


def _field(cond: Any, name: str) -> Any:
    return cond.get(name) if isinstance(cond, dict) else getattr(cond, name, None)


def _last_ending(pod_list: list[Any]) -> tuple[Ending | None, Any | None]:
    """The most telling ending among failed attempts: a non-zero exit of the newest failed pod."""
    for pod in pods.newest_first(pod_list):
        end = pods.ending(pod)
        if end is not None and end.exit_code not in (None, 0):
            return end, pod
    return None, None


def _failure(
    workload: Workload,
    cond: Any,
    pod_list: list[Any],
    *,
    backoff_limit: int | None,
    failed_count: int | None,
    deadline_s: int | None,
) -> Observation:
    cond_reason = _field(cond, "reason") or "Failed"
    cond_message = _field(cond, "message") or ""
    end, pod = _last_ending(pod_list)
    exit_code = end.exit_code if end else pods.exit_code_from_message(cond_message)
    reason = cond_reason
    if end is not None and end.reason == "OOMKilled":
        reason = "OOMKilled"
        detail = pods.describe_ending(end, pods.memory_limit(pod))
    elif cond_reason == "DeadlineExceeded":
        detail = (
            f"the workload ran past its deadline (activeDeadlineSeconds={deadline_s}) and was stopped; raise "
            "RLJOB_K8S_ACTIVE_DEADLINE_S or shorten the run (grpo.num_batches)"
        )
    elif cond_reason == "PodFailurePolicy":
        detail = f"{describe_exit_code(exit_code)} (not retried: the exit code is non-retryable)"
    elif cond_reason == "BackoffLimitExceeded":
        attempts = f"{failed_count} attempts" if failed_count else "every attempt"
        detail = f"the trainer failed {attempts} (backoffLimit {backoff_limit}); last attempt: {describe_exit_code(exit_code)}"
    else:
        detail = f"{cond_message or cond_reason}; last attempt: {describe_exit_code(exit_code)}"
    return workload.observation(ObservedState.FAILED, reason, f"{workload.object_name} failed: {detail}", exit_code=exit_code)


def _not_admitted(workload: Workload, labels: dict[str, str], kueue: KueueRead | None) -> Observation:
    """A suspended Job/JobSet: held by Kueue (QUEUED, with its LocalQueue, reason and place in line)
    or, without a queue label, suspended by someone else."""
    queue = labels.get(names.KUEUE_QUEUE_LABEL)
    if not queue:
        return workload.observation(
            ObservedState.PENDING,
            "Suspended",
            f"{workload.object_name} is suspended (spec.suspend=true) and no queue admits it; resume or cancel it",
        )
    view = kueue.workload if kueue is not None else None
    if view is not None and view.admitted:
        # Admitted a moment ago: Kueue is unsuspending it, which the next observation shows.
        return workload.observation(ObservedState.PENDING, "Admitted", f"admitted by Kueue from LocalQueue {queue}; starting")
    if view is not None:
        reason = normalized_reason(view.reason, view.message)  # v0.19's Pending/Inadmissible read as v0.20 names them
        message = reason_words(reason, view.message, queue) if view.message else f"Kueue has not admitted {workload.object_name} ({reason})"
    elif kueue is not None and kueue.readable:
        reason, message = (
            "NoWorkload",
            (
                f"Kueue has not made a Workload for {workload.object_name} yet; if this lasts, check that Kueue is running and "
                f"that LocalQueue {queue} exists (kubectl get localqueues)"
            ),
        )
    else:
        why = kueue.why_unreadable if kueue is not None and kueue.why_unreadable else "no Kueue API or no RBAC for it"
        reason, message = (
            "KueueNotAdmitted",
            f"Kueue has not admitted {workload.object_name} and its Workload cannot be read: {why}",
        )
    position = kueue.position if kueue is not None else None
    return workload.observation(
        ObservedState.QUEUED, reason, message, queue=QueueStatus(name=queue, position=position, reason=reason, message=message)
    )


def _from_pods(workload: Workload, pod_list: list[Any], events: list[Any], *, workers: int, restarts: int = 0) -> Observation:
    """Neither finished nor suspended: decide from the attempts (pods)."""
    ordered = pods.newest_first(pod_list)
    current = [p for p in ordered if not pods.is_failed_attempt(p) and p.status and p.status.phase in ("Pending", "Running", "Succeeded")]
    earlier_failures = [p for p in ordered if pods.is_failed_attempt(p)]
    interrupted = bool(earlier_failures) or restarts > 0

    def restarting(extra: str, reason: str | None) -> Observation:
        prior = earlier_failures[0] if earlier_failures else None
        disrupted = pods.disruption(prior) if prior is not None else None
        if disrupted is not None:
            detail = f"{disrupted.reason}: {disrupted.message}" if disrupted.message else disrupted.reason
            why = f"the previous attempt was disrupted ({detail}), which does not count as a failure"
            cause = disrupted.reason
        elif prior is not None:
            end = pods.ending(prior)
            why = f"the previous attempt ended: {pods.describe_ending(end, pods.memory_limit(prior)) if end else 'pod failed'}"
            cause = end.reason if end else "PodFailed"
        else:
            why, cause = f"the slice restarted ({restarts} so far)", "Restarted"
        return workload.observation(
            ObservedState.RESTARTING,
            reason or cause,
            f"{why}; Kubernetes is starting a new attempt that resumes from the last checkpoint. {extra}".strip(),
            disrupted=disrupted is not None,
        )

    if not current:
        if interrupted:
            return restarting("", None)
        return workload.observation(
            ObservedState.PENDING, "Creating", f"{workload.object_name} exists; waiting for its controller to create the trainer pod"
        )
    being_disrupted = [p for p in current if pods.disruption(p) is not None]
    if being_disrupted:
        d = pods.disruption(being_disrupted[0])
        assert d is not None
        return workload.observation(
            ObservedState.RESTARTING,
            d.reason,
            f"the trainer pod is being disrupted ({d.reason}); it will be replaced and resume from the last checkpoint",
            disrupted=True,
        )
    for pod in current:
        if pod.status.phase == "Pending":
            trouble = pods.waiting(pod, events)
            if trouble is not None:
                if interrupted:
                    return restarting(f"The new attempt cannot start: {trouble.message}", trouble.reason)
                return workload.observation(ObservedState.PENDING, trouble.reason, trouble.message)
    running = [p for p in current if p.status.phase in ("Running", "Succeeded")]
    if len(running) >= workers:
        return workload.observation(ObservedState.RUNNING, "Running", f"the trainer is running ({running[0].metadata.name})")
    if interrupted:
        return restarting("", None)
    return workload.observation(
        ObservedState.PENDING, "Starting", f"the trainer pod is scheduled and starting ({len(running)}/{workers} workers running)"
    )


def fail_job_rule_match(job: Any, pod_list: list[Any]) -> str | None:
    """The Job controller's FailJob verdict before it writes it: a failed attempt that matches a FailJob
    podFailurePolicy rule (first matching rule decides, disruptions excluded) dooms the Job, so report it
    failed now rather than "restarting" in the moment before the FailureTarget condition lands."""
    rules = (job.spec.pod_failure_policy.rules or []) if job.spec and job.spec.pod_failure_policy else []
    for pod in pods.newest_first(pod_list):
        if not (pod.status and pod.status.phase == "Failed") or pods.disruption(pod) is not None:
            continue
        end = pods.ending(pod)
        for index, rule in enumerate(rules):
            if _rule_matches(rule, pod, end):
                if rule.action != "FailJob":
                    break
                return (
                    f"Container {names.TRAINER_CONTAINER} for pod {pod.metadata.namespace}/{pod.metadata.name} "
                    f"failed with exit code {end.exit_code if end else '?'} matching FailJob rule at index {index}"
                )
    return None


def _rule_matches(rule: V1PodFailurePolicyRule, pod: V1Pod, end: Ending | None) -> bool:
    if rule.on_exit_codes is not None:
        req = rule.on_exit_codes
        if end is None or end.exit_code in (None, 0):
            return False
        if req.container_name not in (None, names.TRAINER_CONTAINER):
            return False
        return (end.exit_code in req.values) == (req.operator == "In")
    for pattern in rule.on_pod_conditions or []:
        cond = pods.condition(pod, pattern.type)
        if cond is not None and cond.status == (pattern.status or "True"):
            return True
    return False


def observe_job(job_id: str, job: Any | None, pod_list: list[Any], events: list[Any], kueue: KueueRead | None = None) -> Observation:
    """A batch/v1 Job (single-host slice)."""
    workload = Workload(job_id, f"job/{names.workload_name(job_id)}")
    object_name = workload.object_name
    if job is None:
        return gone(job_id, object_name)
    if job.metadata.deletion_timestamp is not None:
        return gone(job_id, object_name, reason="Deleting", message=f"{object_name} is being deleted; its pods are terminating")
    status = job.status
    conds = _true_conditions(status.conditions if status else None)
    if "Complete" in conds or "SuccessCriteriaMet" in conds:
        return workload.observation(ObservedState.SUCCEEDED, "Complete", f"{object_name} completed", exit_code=0)
    # FailureTarget comes first (pods still terminating), Failed after: the outcome is decided at either.
    failed = conds.get("Failed") or conds.get("FailureTarget")
    if failed is None and (message := fail_job_rule_match(job, pod_list)) is not None:
        failed = {"reason": "PodFailurePolicy", "message": message}
    if failed is not None:
        return _failure(
            workload,
            failed,
            pod_list,
            backoff_limit=job.spec.backoff_limit,
            failed_count=status.failed if status else None,
            deadline_s=job.spec.active_deadline_seconds,
        )
    if job.spec.suspend:
        return _not_admitted(workload, job.metadata.labels or {}, kueue)
    return _from_pods(workload, pod_list, events, workers=job.spec.parallelism or 1)


def observe_jobset(
    job_id: str, jobset: dict[str, Any] | None, pod_list: list[Any], events: list[Any], kueue: KueueRead | None = None
) -> Observation:
    """A JobSet (multi-host slice): its conditions decide the end, the pods everything before."""
    workload = Workload(job_id, f"jobset/{names.workload_name(job_id, multi_host=True)}")
    object_name = workload.object_name
    if jobset is None:
        return gone(job_id, object_name)
    meta, spec, status = jobset.get("metadata", {}), jobset.get("spec", {}), jobset.get("status") or {}
    if meta.get("deletionTimestamp"):
        return gone(job_id, object_name, reason="Deleting", message=f"{object_name} is being deleted; its pods are terminating")
    conds = _true_conditions(status.get("conditions"))
    if "Completed" in conds or status.get("terminalState") == "Completed":
        return workload.observation(ObservedState.SUCCEEDED, "Complete", f"{object_name} completed", exit_code=0)
    if "Failed" in conds or status.get("terminalState") == "Failed":
        cond = conds.get("Failed") or {"reason": "Failed", "message": ""}
        template = (spec.get("replicatedJobs") or [{}])[0].get("template", {}).get("spec", {})
        return _failure(
            workload,
            cond,
            pod_list,
            backoff_limit=(spec.get("failurePolicy") or {}).get("maxRestarts"),
            failed_count=status.get("restarts"),
            deadline_s=template.get("activeDeadlineSeconds"),
        )
    if spec.get("suspend") or "Suspended" in conds:
        return _not_admitted(workload, meta.get("labels") or {}, kueue)
    template = (spec.get("replicatedJobs") or [{}])[0]
    workers = int(template.get("replicas", 1)) * int(template.get("template", {}).get("spec", {}).get("parallelism", 1))
    # Pods of earlier restarts are deleted by the JobSet controller; count only this generation's.
    return _from_pods(workload, pod_list, events, workers=workers, restarts=int(status.get("restarts") or 0))
