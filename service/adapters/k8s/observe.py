"""Map what the cluster says (Job or JobSet, its pods, their events) to one Observation.

Pure functions: the launcher reads the objects, these decide. Messages say what is happening and,
on trouble, what to check next; `reason` is the short machine-readable cause.
"""

from __future__ import annotations

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


def gone(job_id: str, object_name: str, *, reason: str = "NotFound", message: str | None = None) -> Observation:
    return Observation(
        job_id=job_id,
        state=ObservedState.GONE,
        reason=reason,
        message=message or (f"{object_name} does not exist: it was deleted (cancel, ttlSecondsAfterFinished or by hand) or never created"),
        object_name=object_name,
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
    job_id: str,
    object_name: str,
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
    return Observation(
        job_id=job_id,
        state=ObservedState.FAILED,
        reason=reason,
        exit_code=exit_code,
        message=f"{object_name} failed: {detail}",
        object_name=object_name,
    )


def _not_admitted(job_id: str, object_name: str, labels: dict[str, str], kueue: KueueRead | None) -> Observation:
    """A suspended Job/JobSet: held by Kueue (QUEUED, with its LocalQueue, reason and place in line)
    or, without a queue label, suspended by someone else."""
    queue = labels.get(names.KUEUE_QUEUE_LABEL)
    if not queue:
        return Observation(
            job_id=job_id,
            state=ObservedState.PENDING,
            reason="Suspended",
            object_name=object_name,
            message=f"{object_name} is suspended (spec.suspend=true) and no queue admits it; resume or cancel it",
        )
    view = kueue.workload if kueue is not None else None
    if view is not None and view.admitted:
        # Admitted a moment ago: Kueue is unsuspending it, which the next observation shows.
        return Observation(
            job_id=job_id,
            state=ObservedState.PENDING,
            reason="Admitted",
            object_name=object_name,
            message=f"admitted by Kueue from LocalQueue {queue}; starting",
        )
    if view is not None:
        reason = normalized_reason(view.reason, view.message)  # v0.19's Pending/Inadmissible read as v0.20 names them
        message = reason_words(reason, view.message, queue) if view.message else f"Kueue has not admitted {object_name} ({reason})"
    elif kueue is not None and kueue.readable:
        reason, message = (
            "NoWorkload",
            (
                f"Kueue has not made a Workload for {object_name} yet; if this lasts, check that Kueue is running and "
                f"that LocalQueue {queue} exists (kubectl get localqueues)"
            ),
        )
    else:
        why = kueue.why_unreadable if kueue is not None and kueue.why_unreadable else "no Kueue API or no RBAC for it"
        reason, message = (
            "KueueNotAdmitted",
            f"Kueue has not admitted {object_name} and its Workload cannot be read: {why}",
        )
    position = kueue.position if kueue is not None else None
    return Observation(
        job_id=job_id,
        state=ObservedState.QUEUED,
        reason=reason,
        object_name=object_name,
        message=message,
        queue=QueueStatus(name=queue, position=position, reason=reason, message=message),
    )


def _from_pods(job_id: str, object_name: str, pod_list: list[Any], events: list[Any], *, workers: int, restarts: int = 0) -> Observation:
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
        return Observation(
            job_id=job_id,
            state=ObservedState.RESTARTING,
            reason=reason or cause,
            object_name=object_name,
            message=f"{why}; Kubernetes is starting a new attempt that resumes from the last checkpoint. {extra}".strip(),
            disrupted=disrupted is not None,
        )

    if not current:
        if interrupted:
            return restarting("", None)
        return Observation(
            job_id=job_id,
            state=ObservedState.PENDING,
            reason="Creating",
            object_name=object_name,
            message=f"{object_name} exists; waiting for its controller to create the trainer pod",
        )
    being_disrupted = [p for p in current if pods.disruption(p) is not None]
    if being_disrupted:
        d = pods.disruption(being_disrupted[0])
        assert d is not None
        return Observation(
            job_id=job_id,
            state=ObservedState.RESTARTING,
            reason=d.reason,
            object_name=object_name,
            message=f"the trainer pod is being disrupted ({d.reason}); it will be replaced and resume from the last checkpoint",
            disrupted=True,
        )
    for pod in current:
        if pod.status.phase == "Pending":
            trouble = pods.waiting(pod, events)
            if trouble is not None:
                if interrupted:
                    return restarting(f"The new attempt cannot start: {trouble.message}", trouble.reason)
                return Observation(
                    job_id=job_id,
                    state=ObservedState.PENDING,
                    reason=trouble.reason,
                    message=trouble.message,
                    object_name=object_name,
                )
    running = [p for p in current if p.status.phase in ("Running", "Succeeded")]
    if len(running) >= workers:
        return Observation(
            job_id=job_id,
            state=ObservedState.RUNNING,
            reason="Running",
            object_name=object_name,
            message=f"the trainer is running ({running[0].metadata.name})",
        )
    if interrupted:
        return restarting("", None)
    return Observation(
        job_id=job_id,
        state=ObservedState.PENDING,
        reason="Starting",
        object_name=object_name,
        message=f"the trainer pod is scheduled and starting ({len(running)}/{workers} workers running)",
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
    object_name = f"job/{names.workload_name(job_id)}"
    if job is None:
        return gone(job_id, object_name)
    if job.metadata.deletion_timestamp is not None:
        return gone(job_id, object_name, reason="Deleting", message=f"{object_name} is being deleted; its pods are terminating")
    status = job.status
    conds = _true_conditions(status.conditions if status else None)
    if "Complete" in conds or "SuccessCriteriaMet" in conds:
        return Observation(
            job_id=job_id,
            state=ObservedState.SUCCEEDED,
            reason="Complete",
            exit_code=0,
            message=f"{object_name} completed",
            object_name=object_name,
        )
    # FailureTarget comes first (pods still terminating), Failed after: the outcome is decided at either.
    failed = conds.get("Failed") or conds.get("FailureTarget")
    if failed is None and (message := fail_job_rule_match(job, pod_list)) is not None:
        failed = {"reason": "PodFailurePolicy", "message": message}
    if failed is not None:
        return _failure(
            job_id,
            object_name,
            failed,
            pod_list,
            backoff_limit=job.spec.backoff_limit,
            failed_count=status.failed if status else None,
            deadline_s=job.spec.active_deadline_seconds,
        )
    if job.spec.suspend:
        return _not_admitted(job_id, object_name, job.metadata.labels or {}, kueue)
    return _from_pods(job_id, object_name, pod_list, events, workers=job.spec.parallelism or 1)


def observe_jobset(
    job_id: str, jobset: dict[str, Any] | None, pod_list: list[Any], events: list[Any], kueue: KueueRead | None = None
) -> Observation:
    """A JobSet (multi-host slice): its conditions decide the end, the pods everything before."""
    object_name = f"jobset/{names.workload_name(job_id, multi_host=True)}"
    if jobset is None:
        return gone(job_id, object_name)
    meta, spec, status = jobset.get("metadata", {}), jobset.get("spec", {}), jobset.get("status") or {}
    if meta.get("deletionTimestamp"):
        return gone(job_id, object_name, reason="Deleting", message=f"{object_name} is being deleted; its pods are terminating")
    conds = _true_conditions(status.get("conditions"))
    if "Completed" in conds or status.get("terminalState") == "Completed":
        return Observation(
            job_id=job_id,
            state=ObservedState.SUCCEEDED,
            reason="Complete",
            exit_code=0,
            message=f"{object_name} completed",
            object_name=object_name,
        )
    if "Failed" in conds or status.get("terminalState") == "Failed":
        cond = conds.get("Failed") or {"reason": "Failed", "message": ""}
        template = (spec.get("replicatedJobs") or [{}])[0].get("template", {}).get("spec", {})
        return _failure(
            job_id,
            object_name,
            cond,
            pod_list,
            backoff_limit=(spec.get("failurePolicy") or {}).get("maxRestarts"),
            failed_count=status.get("restarts"),
            deadline_s=template.get("activeDeadlineSeconds"),
        )
    if spec.get("suspend") or "Suspended" in conds:
        return _not_admitted(job_id, object_name, meta.get("labels") or {}, kueue)
    template = (spec.get("replicatedJobs") or [{}])[0]
    workers = int(template.get("replicas", 1)) * int(template.get("template", {}).get("spec", {}).get("parallelism", 1))
    # Pods of earlier restarts are deleted by the JobSet controller; count only this generation's.
    return _from_pods(job_id, object_name, pod_list, events, workers=workers, restarts=int(status.get("restarts") or 0))
