"""hardware.capacity and the team's service account in the rendered trainer pods: goldens per capacity,
strict schema validation of every capacity on a Job, a JobSet and a cpu Job, and the facts each adds.

Regenerate the goldens with RLJOB_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from service.adapters.k8s.capacity import FLEX_START_MAX_RUN_S, SPOT_TERMINATION_GRACE_S
from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.render import render_manifests, render_manifests_yaml
from trainer.contract import JobSpec

from .conftest import JOB_ID, make_cpu_spec, make_settings, make_spec
from .test_manifests import validate_strict

GOLDEN = Path(__file__).parent / "golden"
CAPACITIES = ["on-demand", "spot", "flex-start", "reservation"]
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}


def _hardware(capacity: str) -> dict[str, Any]:
    return {"capacity": capacity, "reservation": "tpu-res-1" if capacity == "reservation" else None}


def _spec(accelerator: str, capacity: str, **extra: Any) -> JobSpec:
    if accelerator == "cpu":
        base = make_cpu_spec(**extra)
    else:
        base = make_spec(accelerator, {"v6e-8": 8}.get(accelerator, 4), **extra)
    hardware = {**base.hardware.model_dump(), **_hardware(capacity)}
    return JobSpec.model_validate({**base.model_dump(), "hardware": hardware})


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    job = doc["spec"]["replicatedJobs"][0]["template"] if doc["kind"] == "JobSet" else doc
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["containers"][0]["env"]}


# One golden per capacity, across the workload shapes: single-host Job, multi-host JobSet, cpu Job.
GOLDEN_CASES = {
    "v6e-8-spot": ("v6e-8", "spot"),
    "v6e-16-flex-start": ("v6e-16", "flex-start"),
    "v5p-8-reservation": ("v5p-8", "reservation"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_capacity_manifests(case: str) -> None:
    accelerator, capacity = GOLDEN_CASES[case]
    host_paths = ["/data/rljob"] if accelerator == "cpu" else []
    settings = make_settings(host_paths=host_paths, team_service_accounts={"ml-research": "rljob-trainer-ml-research"})
    text = render_manifests_yaml(_spec(accelerator, capacity, team="ml-research"), JOB_ID, settings)
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("RLJOB_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with RLJOB_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case} manifests changed; if intended, regenerate with RLJOB_UPDATE_GOLDEN=1"


@pytest.mark.parametrize(("accelerator", "capacity"), [(a, c) for a in ("v6e-8", "v6e-16") for c in CAPACITIES] + [("cpu", "on-demand")])
def test_every_capacity_renders_strictly_valid_manifests(accelerator: str, capacity: str) -> None:
    docs = render_manifests(_spec(accelerator, capacity), JOB_ID, make_settings(kueue_queue="q", host_paths=["/data/rljob"]))
    for doc in docs:
        validate_strict(doc)


def test_spot_selects_and_tolerates_spot_nodes_with_a_grace_period_inside_the_notice() -> None:
    pod = _pod(render_manifests(_spec("v6e-8", "spot"), JOB_ID, make_settings(termination_grace_s=300))[1])
    # The TPU slice's selectors stay; the spot label is added to them.
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert pod["tolerations"] == [
        TPU_TOLERATION,
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ]
    assert pod["terminationGracePeriodSeconds"] == 15 <= SPOT_TERMINATION_GRACE_S
    assert "RLJOB_MAX_RUN_S" not in _env(pod)


def test_spot_grace_never_exceeds_the_general_one_and_settings_refuse_more_than_the_notice() -> None:
    pod = _pod(render_manifests(_spec("v6e-8", "spot"), JOB_ID, make_settings(termination_grace_s=30, spot_termination_grace_s=30))[1])
    assert pod["terminationGracePeriodSeconds"] == 30
    with pytest.raises(ValueError, match="spot_termination_grace_s"):
        make_settings(spot_termination_grace_s=SPOT_TERMINATION_GRACE_S + 1)


def test_flex_start_selects_its_pools_and_tells_the_trainer_its_time() -> None:
    jobset = render_manifests(_spec("v6e-16", "flex-start"), JOB_ID, make_settings(flex_start_margin_s=1800))[1]
    pod = _pod(jobset)
    assert pod["nodeSelector"]["rljob.dev/capacity"] == "flex-start"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4"
    # Plain flex-start pools (no queued provisioning): GKE's gke-queued label and taint are not there.
    assert "cloud.google.com/gke-queued" not in pod["nodeSelector"] and pod["tolerations"] == [TPU_TOLERATION]
    assert _env(pod)["RLJOB_MAX_RUN_S"] == str(FLEX_START_MAX_RUN_S - 1800)
    assert pod["terminationGracePeriodSeconds"] == make_settings().termination_grace_s


def test_reservation_selects_the_named_reservation() -> None:
    pod = _pod(render_manifests(_spec("v6e-8", "reservation"), JOB_ID, make_settings())[1])
    assert pod["nodeSelector"]["cloud.google.com/reservation-name"] == "tpu-res-1"
    assert pod["nodeSelector"]["rljob.dev/capacity"] == "reservation"
    # Documented for Autopilot and compute classes, not Standard pools; xpk selects only reservation-name.
    assert "cloud.google.com/reservation-affinity" not in pod["nodeSelector"]
    assert pod["tolerations"] == [TPU_TOLERATION]


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_every_tpu_pod_selects_its_capacity_on_the_one_routing_key(capacity: str) -> None:
    """On-demand included: a TPU pod without the key would match a labelless flavor, or any flavor lacking it."""
    for accelerator in ("v6e-8", "v6e-16"):
        pod = _pod(render_manifests(_spec(accelerator, capacity), JOB_ID, make_settings())[1])
        assert pod["nodeSelector"]["rljob.dev/capacity"] == capacity, accelerator


def test_on_demand_tpu_pods_select_on_demand_pools_and_cpu_pods_nothing() -> None:
    tpu = _pod(render_manifests(_spec("v6e-8", "on-demand"), JOB_ID, make_settings())[1])
    assert set(tpu["nodeSelector"]) == {
        "cloud.google.com/gke-tpu-accelerator",
        "cloud.google.com/gke-tpu-topology",
        "node.kubernetes.io/instance-type",
        "rljob.dev/capacity",
    }
    assert tpu["tolerations"] == [TPU_TOLERATION]
    cpu = _pod(render_manifests(_spec("cpu", "on-demand"), JOB_ID, make_settings(host_paths=["/data/rljob"]))[1])
    assert "nodeSelector" not in cpu and "tolerations" not in cpu


@pytest.mark.parametrize("capacity", ["spot", "flex-start", "reservation"])
def test_a_cpu_job_on_tpu_capacity_renders_nothing_and_says_why(capacity: str) -> None:
    """Only TPU pools carry rljob.dev/capacity: such a pod could only select TPU nodes, whose taint it does not tolerate."""
    with pytest.raises(ManifestError, match=rf"hardware.capacity: capacity {capacity} is a kind of TPU node pool"):
        render_manifests(_spec("cpu", capacity), JOB_ID, make_settings(host_paths=["/data/rljob"]))


def test_a_cpu_job_is_never_queued_by_kueue() -> None:
    """Kueue's quota is TPU quota: admitted into a TPU flavor, a cpu pod would get its TPU node labels merged in."""
    settings = make_settings(host_paths=["/data/rljob"], kueue_queue="rljob-v6e", kueue_team_queues={"ml": "team-ml"})
    job = render_manifests(_spec("cpu", "on-demand", team="ml"), JOB_ID, settings)[1]
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    assert not job["spec"].get("suspend")
    tpu = render_manifests(_spec("v6e-8", "on-demand", team="ml"), JOB_ID, settings)[1]
    assert tpu["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml" and tpu["spec"]["suspend"] is True


@pytest.mark.parametrize("accelerator", ["v6e-8", "v6e-16"])
def test_each_team_runs_as_its_own_service_account(accelerator: str) -> None:
    settings = make_settings(
        service_account="rljob-trainer", team_service_accounts={"team-a": "rljob-trainer-team-a", "team-b": "rljob-trainer-team-b"}
    )
    for team, account in [
        ("team-a", "rljob-trainer-team-a"),
        ("team-b", "rljob-trainer-team-b"),
        ("team-c", "rljob-trainer"),
        (None, "rljob-trainer"),
    ]:
        extra = {"team": team} if team else {}
        pod = _pod(render_manifests(_spec(accelerator, "on-demand", **extra), JOB_ID, settings)[1])
        assert pod["serviceAccountName"] == account, team


@pytest.mark.parametrize("mapping", [{"Team A": "sa"}, {"team-a": "Not_A_Label"}])
def test_settings_refuse_team_service_accounts_that_are_not_dns_labels(mapping: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        make_settings(team_service_accounts=mapping)
