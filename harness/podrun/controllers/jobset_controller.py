"""The JobSet controller's decisions (jobset.x-k8s.io/v1alpha2), pure: one child Job per replicated
job replica (`<jobset>-<replicatedJob>-<index>`), labelled and annotated as JobSet v0.12.0 does
(labelAndAnnotateObject: jobset name, replicatedJob, job index and key, restart attempt, and the
exclusive-placement annotations the pod webhook reads, jobset_pod_webhook.py); the child Jobs' pods come
from the Job controller. Every child Complete -> Completed; a child Failed -> FailJobSet when a
failurePolicy rule matches its failure reason, else a restart (all children deleted and recreated,
status.restarts + 1) while restarts < maxRestarts, else Failed. suspend propagates to the children;
ttlSecondsAfterFinished deletes the JobSet. Not emulated: successPolicy, startupPolicy, the exclusive
placement webhook (node affinity), DNS hostnames.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

from .job_controller import condition, iso, parse_time
from .jobset_pod_webhook import EXCLUSIVE_KEY, NODE_SELECTOR_STRATEGY_KEY

GROUP_VERSION = "jobset.x-k8s.io/v1alpha2"


@dataclass
class JobSetDecision:
    create: list[dict[str, Any]] = field(default_factory=list)  # child Jobs
    delete: list[str] = field(default_factory=list)  # child Job names
    suspend: dict[str, bool] = field(default_factory=dict)  # child Job name -> spec.suspend to set
    status: dict[str, Any] | None = None
    delete_jobset: bool = False


def child_jobs(jobset: dict[str, Any], restarts: int) -> list[dict[str, Any]]:
    meta, spec = jobset["metadata"], jobset["spec"]
    out = []
    for rjob in spec["replicatedJobs"]:
        for index in range(int(rjob.get("replicas", 1))):
            name = f"{meta['name']}-{rjob['name']}-{index}"
            extra = {
                "jobset.sigs.k8s.io/jobset-name": meta["name"],
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
                "jobset.sigs.k8s.io/restart-attempt": str(restarts),
            }
            template = copy.deepcopy(rjob["template"])
            labels = {**((template.get("metadata") or {}).get("labels") or {}), **extra}
            annotations = {**((template.get("metadata") or {}).get("annotations") or {}), **extra, **_exclusive(jobset, rjob)}
            job_spec = template["spec"]
            pod_meta = job_spec["template"].setdefault("metadata", {})
            pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **extra}
            pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **extra, **_exclusive(jobset, rjob)}
            job_spec["suspend"] = bool(spec.get("suspend"))
            out.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": name,
                        "namespace": meta["namespace"],
                        "labels": labels,
                        "annotations": annotations,
                        "ownerReferences": [
                            {
                                "apiVersion": GROUP_VERSION,
                                "kind": "JobSet",
                                "name": meta["name"],
                                "uid": meta["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": job_spec,
                }
            )
    return out


def _exclusive(jobset: dict[str, Any], rjob: dict[str, Any]) -> dict[str, str]:
    """labelAndAnnotateObject: the exclusive-placement annotations, from the JobSet or else the replicatedJob."""
    out: dict[str, str] = {}
    for source in (jobset["metadata"].get("annotations") or {}, (rjob["template"].get("metadata") or {}).get("annotations") or {}):
        if EXCLUSIVE_KEY in source:
            out = {k: source[k] for k in (EXCLUSIVE_KEY, NODE_SELECTOR_STRATEGY_KEY) if k in source}
    return out


def _cond(kind: str, reason: str, message: str, now: dt.datetime) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": iso(now)}


def decide_jobset(jobset: dict[str, Any], children: list[dict[str, Any]], *, now: dt.datetime) -> JobSetDecision:
    spec, status = jobset["spec"], copy.deepcopy(jobset.get("status") or {})
    before = copy.deepcopy(status)
    out = JobSetDecision()
    conds = status.setdefault("conditions", [])
    restarts = int(status.get("restarts", 0))
    if status.get("terminalState"):
        ttl = spec.get("ttlSecondsAfterFinished")
        ended = parse_time(next((c["lastTransitionTime"] for c in conds if c["type"] in ("Completed", "Failed")), None))
        out.delete_jobset = ttl is not None and ended is not None and now >= ended + dt.timedelta(seconds=ttl)
        return out
    attempt = [j for j in children if j["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(restarts)]
    stale = [j for j in children if j not in attempt]
    out.delete = [j["metadata"]["name"] for j in stale]
    failed = next((j for j in attempt if condition(j, "Failed")), None)
    wanted = child_jobs(jobset, restarts)
    if failed is not None:
        reason = (condition(failed, "Failed") or {}).get("reason", "")
        policy = spec.get("failurePolicy") or {}
        fail_now = any(
            rule.get("action") == "FailJobSet" and reason in (rule.get("onJobFailureReasons") or [reason])
            for rule in policy.get("rules") or []
        )
        if fail_now or restarts >= int(policy.get("maxRestarts", 0)):
            why = f"job {failed['metadata']['name']} failed ({reason})" + (
                "; a failure policy rule says do not restart" if fail_now else "; reached maxRestarts"
            )
            conds.append(_cond("Failed", "FailedJobs", why, now))
            status["terminalState"] = "Failed"
            out.delete = [j["metadata"]["name"] for j in children if not condition(j, "Failed")]
        else:
            status["restarts"] = restarts + 1
            out.delete = [j["metadata"]["name"] for j in children]
    elif attempt and len(attempt) == len(wanted) and all(condition(j, "Complete") for j in attempt):
        conds.append(_cond("Completed", "AllJobsCompleted", "jobset completed successfully", now))
        status["terminalState"] = "Completed"
    else:
        have = {j["metadata"]["name"]: j for j in attempt}
        out.create = [j for j in wanted if j["metadata"]["name"] not in have]
        suspend = bool(spec.get("suspend"))
        out.suspend = {name: suspend for name, j in have.items() if bool(j["spec"].get("suspend")) != suspend}
        suspended = [c for c in conds if c["type"] == "Suspended"]
        if suspend and not suspended:
            conds.append(_cond("Suspended", "SuspendedJobs", "jobset is suspended", now))
        elif not suspend and suspended:
            conds[:] = [c for c in conds if c["type"] != "Suspended"]
    if status != before:
        out.status = status
    return out
