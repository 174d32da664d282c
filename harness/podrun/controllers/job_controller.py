"""The batch/v1 Job controller's decisions, as pure functions over API dicts (Kubernetes 1.31+ behaviour).

Pods: `parallelism` at a time until `completions` succeed, named `<job>-<5 chars>` (Indexed:
`<job>-<index>-<5 chars>`, with the completion index label/annotation, JOB_COMPLETION_INDEX and hostname),
carrying the template's labels plus job-name/controller-uid (both spellings), a controller
ownerReference and the `batch.kubernetes.io/job-tracking` finalizer. A finished pod is counted once,
then its finalizer is released (that is how a deleted pod is still counted).
Failures: podFailurePolicy rules in order (FailJob, Ignore, Count on exit codes or pod conditions);
otherwise counted against backoffLimit, with a doubling delay before the replacement. podReplacementPolicy
Failed waits for a terminating pod to end before replacing it. The end: SuccessCriteriaMet or
FailureTarget first, Complete/Failed once no pod is left running. activeDeadlineSeconds, suspend
(pods deleted, Suspended condition; resumed: a new startTime) and ttlSecondsAfterFinished.
Not emulated: backoffLimitPerIndex, successPolicy, managedBy, pod-failure rule action FailIndex.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from harness.podrun.pods.volumes import NotEmulated

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
BACKOFF_MAX_S = 360.0


def parse_time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cast(dict[str, Any], cond)
    return None


def owned_by(pod: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid and ref.get("controller") for ref in pod["metadata"].get("ownerReferences") or [])


def is_finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) and not is_finished(pod)


def is_active(pod: dict[str, Any]) -> bool:
    return not is_finished(pod) and not pod["metadata"].get("deletionTimestamp")


@dataclass
class JobDecision:
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # pod names, deleted gracefully
    release: list[str] = field(default_factory=list)  # pods whose tracking finalizer is removed
    status: dict[str, Any] | None = None  # the new status, when it changed
    delete_job: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message) on the Job


def pod_for(job: dict[str, Any], index: int | None, suffix: str) -> dict[str, Any]:
    meta, template = job["metadata"], job["spec"]["template"]
    name, uid = meta["name"], meta["uid"]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update(
        {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
    )
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    spec = copy.deepcopy(template["spec"])
    pod_name = f"{name}-{suffix}"
    if index is not None:
        labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
        pod_name = f"{name}-{index}-{suffix}"
        spec.setdefault("hostname", f"{name}-{index}")
        index_env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX_KEY}']"}}}
        for kind in ("initContainers", "containers"):  # indexed_job_utils.go addCompletionIndexEnvVariables
            if spec.get(kind):
                spec[kind] = [{**c, "env": [index_env, *(c.get("env") or [])]} for c in spec[kind]]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "generateName": f"{name}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "finalizers": [TRACKING_FINALIZER],
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _exit_codes(pod: dict[str, Any]) -> dict[str, int]:
    """Terminated containers' exit codes, regular ones first, then init containers, sidecars included
    (pkg/controller/job/pod_failure_policy.go matchOnExitCodes at 95f08499)."""
    out = {}
    status = pod.get("status") or {}
    for cs in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            out[cs["name"]] = int(term["exitCode"])
    return out


def matching_rule(policy: dict[str, Any] | None, pod: dict[str, Any]) -> tuple[int, dict[str, Any], str] | None:
    """The first podFailurePolicy rule a failed pod matches: (index, rule, what matched)."""
    for i, rule in enumerate((policy or {}).get("rules") or []):
        if rule["action"] == "FailIndex":
            raise NotEmulated("podFailurePolicy action FailIndex")
        if "onExitCodes" in rule:
            req = rule["onExitCodes"]
            for container, code in _exit_codes(pod).items():
                if req.get("containerName") not in (None, container) or code == 0:
                    continue
                hit = code in req["values"]
                if hit == (req["operator"] == "In"):
                    return (
                        i,
                        rule,
                        f"Container {container} for pod {pod['metadata']['namespace']}/"
                        f"{pod['metadata']['name']} failed with exit code {code}",
                    )
        for pattern in rule.get("onPodConditions") or []:
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == pattern["type"] and cond.get("status") == pattern.get("status", "True"):
                    return i, rule, f"Pod {pod['metadata']['namespace']}/{pod['metadata']['name']} has condition {pattern['type']}"
    return None


def _cond(kind: str, reason: str, message: str, now: dt.datetime, status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastProbeTime": iso(now), "lastTransitionTime": iso(now)}


def _finished_at(pod: dict[str, Any]) -> dt.datetime | None:
    times = [
        parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def decide_job(
    job: dict[str, Any], pods: list[dict[str, Any]], *, now: dt.datetime, new_suffix: Callable[[], str], backoff_base_s: float = 10.0
) -> JobDecision:
    spec, status = job["spec"], copy.deepcopy(job.get("status") or {})
    out = JobDecision()
    before = copy.deepcopy(status)
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])

    def has(kind: str) -> bool:
        return any(c["type"] == kind and c["status"] == "True" for c in conds)

    owned = [p for p in pods if owned_by(p, job["metadata"]["uid"])]
    finished_held = [p for p in owned if is_finished(p) and TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])]

    if has("Complete") or has("Failed"):
        out.release = [p["metadata"]["name"] for p in finished_held]
        ttl = spec.get("ttlSecondsAfterFinished")
        ended = parse_time(status.get("completionTime")) or parse_time(
            next(c["lastTransitionTime"] for c in conds if c["type"] in ("Complete", "Failed") and c["status"] == "True")
        )
        out.delete_job = ttl is not None and ended is not None and now >= ended + dt.timedelta(seconds=ttl)
        return out

    mode_indexed = spec.get("completionMode") == "Indexed"
    completions = int(spec.get("completions") or 1)
    completed = {int(i) for i in (status.get("completedIndexes") or "").split(",") if i != ""}
    failure_target: tuple[str, str] | None = None
    for pod in finished_held:
        out.release.append(pod["metadata"]["name"])
        if pod["status"]["phase"] == "Succeeded":
            status["succeeded"] = status.get("succeeded", 0) + 1
            if mode_indexed:
                completed.add(int(pod["metadata"]["labels"][INDEX_KEY]))
            continue
        rule = matching_rule(spec.get("podFailurePolicy"), pod)
        action = rule[1]["action"] if rule else "Count"
        if action == "Ignore":
            continue
        status["failed"] = status.get("failed", 0) + 1
        if action == "FailJob" and failure_target is None and rule is not None:
            failure_target = ("PodFailurePolicy", f"{rule[2]} matching FailJob rule at index {rule[0]}")
    if mode_indexed:
        status["completedIndexes"] = ",".join(str(i) for i in sorted(completed))

    active = [p for p in owned if is_active(p)]
    terminating = [p for p in owned if is_terminating(p)]
    started = parse_time(status.get("startTime"))
    if not has("FailureTarget") and not has("SuccessCriteriaMet"):
        deadline = spec.get("activeDeadlineSeconds")
        if failure_target:
            conds.append(_cond("FailureTarget", *failure_target, now))
        elif status.get("failed", 0) > int(spec.get("backoffLimit", 6)):
            conds.append(_cond("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit", now))
        elif deadline and started and now >= started + dt.timedelta(seconds=deadline) and not spec.get("suspend"):
            conds.append(_cond("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline", now))
        elif (len(completed) >= completions) if mode_indexed else status.get("succeeded", 0) >= completions:
            conds.append(_cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods", now))

    ending = next((c for c in conds if c["type"] in ("FailureTarget", "SuccessCriteriaMet") and c["status"] == "True"), None)
    if ending is not None:
        out.delete = [p["metadata"]["name"] for p in active]
        if not active and not terminating:
            final = "Failed" if ending["type"] == "FailureTarget" else "Complete"
            conds.append(_cond(final, ending["reason"], ending["message"], now))
            if final == "Complete":
                status["completionTime"] = iso(now)
            out.events.append(
                ("Warning" if final == "Failed" else "Normal", ending["reason"] if final == "Failed" else "Completed", ending["message"])
            )
    elif spec.get("suspend"):
        out.delete = [p["metadata"]["name"] for p in active]
        if not has("Suspended"):
            conds[:] = [c for c in conds if c["type"] != "Suspended"] + [_cond("Suspended", "JobSuspended", "Job suspended", now)]
            out.events.append(("Normal", "Suspended", "Job suspended"))
    else:
        if any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
            conds[:] = [c for c in conds if c["type"] != "Suspended"] + [
                _cond("Suspended", "JobResumed", "Job resumed", now, status="False")
            ]
            status["startTime"] = iso(now)
            out.events.append(("Normal", "Resumed", "Job resumed"))
        status.setdefault("startTime", iso(now))
        out.create = _pods_to_create(job, status, active, terminating, owned, completed, now, new_suffix, backoff_base_s)
        out.events += [("Normal", "SuccessfulCreate", f"Created pod: {p['metadata']['name']}") for p in out.create]

    status["active"] = len(active) + len(out.create)  # pods being deleted count until they are terminating
    status["ready"] = sum(1 for p in active if condition(p, "Ready"))
    if spec.get("podReplacementPolicy"):
        status["terminating"] = len(terminating)
    status.setdefault("succeeded", 0)
    status.setdefault("failed", 0)
    if status != before:
        out.status = status
    return out


def _pods_to_create(
    job: dict[str, Any],
    status: dict[str, Any],
    active: list[dict[str, Any]],
    terminating: list[dict[str, Any]],
    owned: list[dict[str, Any]],
    completed: set[int],
    now: dt.datetime,
    new_suffix: Callable[[], str],
    backoff_base_s: float,
) -> list[dict[str, Any]]:
    spec = job["spec"]
    failed = status.get("failed", 0)
    if failed:
        last = max((t for p in owned if p["status"].get("phase") == "Failed" for t in [_finished_at(p)] if t), default=None)
        delay = min(BACKOFF_MAX_S, backoff_base_s * 2 ** (failed - 1))
        if last is not None and now < last + dt.timedelta(seconds=delay):
            return []  # the replacement waits out the pod failure back-off
    busy = active + (terminating if spec.get("podReplacementPolicy") == "Failed" else [])
    parallelism = int(spec.get("parallelism", 1))
    completions = int(spec.get("completions") or parallelism)
    if spec.get("completionMode") == "Indexed":
        taken = completed | {int(p["metadata"]["labels"][INDEX_KEY]) for p in busy}
        free = [i for i in range(completions) if i not in taken]
        return [pod_for(job, i, new_suffix()) for i in free[: max(0, parallelism - len(busy))]]
    remaining = completions - status.get("succeeded", 0)
    want = min(parallelism, remaining) - len(busy)
    return [pod_for(job, None, new_suffix()) for _ in range(max(0, want))]
