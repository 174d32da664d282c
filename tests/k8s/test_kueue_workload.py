"""Pure Kueue decisions: which LocalQueue a team uses, what a Workload's conditions mean, and its place in
line. Conditions and messages are Kueue v0.19.2's own (pkg/scheduler, pkg/workload, pkg/scheduler/preemption)."""

from __future__ import annotations

from typing import Any

import pytest

from service.adapters.k8s import K8sSettings
from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.kueue import NoQueueForTeam, local_queue_for, position_in, read_workload
from service.adapters.k8s.manifests import build_trainer_job, build_trainer_jobset

from .conftest import JOB_ID, make_settings, make_spec

QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for google.com/tpu in flavor tpu-v6e-2x4-on-demand, 8 more needed"
)
PREEMPTED_MESSAGE = (
    "Preempted to accommodate a workload (UID: 5b1c, JobUID: 9e2f) due to prioritization in the "
    "ClusterQueue; preemptor path: /rljob-v6e; preemptee path: /rljob-v6e"
)


def workload(*conditions: dict[str, Any], checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"status": "True", **c} for c in conditions]}
    if checks is not None:
        status["admissionChecks"] = checks
    return {"metadata": {"name": "job-rl-0123456789ab-3f9a1"}, "status": status}


@pytest.mark.parametrize(
    ("team", "team_queues", "default", "expected"),
    [
        ("ml", {"ml": "ml-tpu", "research": "research-tpu"}, None, "ml-tpu"),
        ("ml", {"research": "research-tpu"}, "shared", "shared"),  # no entry: the default queue
        ("ml", {}, "shared", "shared"),
        ("ml", {}, None, None),  # neither: Kueue is not used
        (None, {}, "shared", "shared"),
    ],
)
def test_local_queue_of_a_team(team, team_queues, default, expected):
    assert local_queue_for(team, team_queues, default) == expected


def test_a_team_without_a_queue_is_refused_when_team_queues_are_configured():
    with pytest.raises(NoQueueForTeam, match="team 'ml' has no Kueue LocalQueue.*research.*RLJOB_K8S_KUEUE_TEAM_QUEUES"):
        local_queue_for("ml", {"research": "research-tpu"}, None)


def test_team_queue_names_are_validated_in_settings():
    with pytest.raises(ValueError, match="DNS labels"):
        K8sSettings(_env_file=None, kueue_team_queues={"ml": "ML Queue"})


def test_trainer_job_and_jobset_carry_the_team_queue_and_priority_class():
    settings = make_settings(kueue_team_queues={"ml": "ml-tpu"}, kueue_queue="shared")
    job = build_trainer_job(make_spec(team="ml", priority="high"), JOB_ID, settings)
    assert job.spec.suspend is True
    assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "ml-tpu"
    assert job.metadata.labels["kueue.x-k8s.io/priority-class"] == "rljob-high"
    jobset = build_trainer_jobset(make_spec("v6e-16", 4, team="vision", priority="low"), JOB_ID, settings)
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "shared"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "rljob-low"
    plain = build_trainer_job(make_spec(team="ml"), JOB_ID, make_settings())
    assert not plain.spec.suspend and "kueue.x-k8s.io/queue-name" not in plain.metadata.labels
    with pytest.raises(ManifestError, match="no Kueue LocalQueue"):
        build_trainer_job(make_spec(team="vision"), JOB_ID, make_settings(kueue_team_queues={"ml": "ml-tpu"}))


def test_waiting_for_quota():
    view = read_workload(workload({"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota", "message": QUOTA_MESSAGE}))
    assert (view.admitted, view.evicted, view.reason, view.message) == (False, False, "WaitingForQuota", QUOTA_MESSAGE)


def test_not_yet_evaluated():
    view = read_workload(workload())
    assert (view.admitted, view.reason) == (False, "PendingEvaluation")


def test_quota_reserved_but_flex_start_provisioning_pending():
    view = read_workload(
        workload(
            {"type": "QuotaReserved", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue rljob-v6e"},
            {"type": "Admitted", "status": "False", "reason": "UnsatisfiedAdmissionChecks"},
            checks=[
                {
                    "name": "rljob-flex-start",
                    "state": "Pending",
                    "message": "Waiting for resources. Currently there are not enough resources available",
                }
            ],
        )
    )
    assert (view.admitted, view.reason) == (False, "UnsatisfiedAdmissionChecks")
    assert view.message == "rljob-flex-start: Pending: Waiting for resources. Currently there are not enough resources available"


def test_admitted():
    view = read_workload(
        workload({"type": "QuotaReserved"}, {"type": "Admitted", "reason": "Admitted", "message": "The workload is admitted"})
    )
    assert view.admitted and not view.evicted


def test_evicted_by_preemption_uses_the_preempted_message():
    view = read_workload(
        workload(
            {"type": "Evicted", "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload"},
            {"type": "Preempted", "reason": "InClusterQueue", "message": PREEMPTED_MESSAGE},
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "The workload was evicted"},
            {"type": "Admitted", "status": "False", "reason": "NoReservation"},
        )
    )
    assert (view.admitted, view.evicted, view.reason, view.message) == (False, True, "Preempted", PREEMPTED_MESSAGE)


def test_readmitted_after_eviction_is_admitted():
    # Kueue sets Evicted/Preempted back to False ("Previously: ...") when it reserves quota again.
    view = read_workload(
        workload(
            {"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": "Previously: Preempted"},
            {"type": "QuotaReserved"},
            {"type": "Admitted"},
        )
    )
    assert view.admitted and not view.evicted


def test_position_in_local_queue_is_one_based():
    pending = {
        "items": [
            {"metadata": {"name": "job-rl-aaaaaaaaaaaa-11111"}, "positionInLocalQueue": 0, "positionInClusterQueue": 3},
            {"metadata": {"name": "job-rl-0123456789ab-3f9a1"}, "positionInLocalQueue": 1, "positionInClusterQueue": 5},
        ]
    }
    assert position_in(pending, "job-rl-0123456789ab-3f9a1") == 2
    assert position_in(pending, "job-rl-bbbbbbbbbbbb-22222") is None
    assert position_in({}, "job-rl-0123456789ab-3f9a1") is None


def test_a_deactivated_workload_says_how_to_reactivate_it():
    view = read_workload(
        workload(
            {
                "type": "Evicted",
                "reason": "DeactivatedDueToRequeuingLimitExceeded",
                "message": "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
            }
        )
    )
    assert (view.admitted, view.evicted, view.reason) == (False, True, "DeactivatedDueToRequeuingLimitExceeded")
    assert view.message.startswith("The workload is deactivated due to exceeding")
    assert """kubectl patch workloads.kueue.x-k8s.io job-rl-0123456789ab-3f9a1 --type=merge -p '{"spec":{"active":true}}'""" in view.message
