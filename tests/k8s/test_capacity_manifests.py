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


def _hardware(capacity: str | list[str]) -> dict[str, Any]:
    kinds = [capacity] if isinstance(capacity, str) else capacity
    return {"capacity": capacity, "reservation": "tpu-res-1" if "reservation" in kinds else None}


def _spec(accelerator: str, capacity: str | list[str], **extra: Any) -> JobSpec:
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
GOLDEN_CASES: dict[str, tuple[str, str | list[str]]] = {
    "v6e-8-spot": ("v6e-8", "spot"),
    "v6e-8-reservation-spot-on-demand": ("v6e-8", ["reservation", "spot", "on-demand"]),
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


SETS: list[str | list[str]] = [["spot", "on-demand"], ["reservation", "on-demand", "flex-start"], list(CAPACITIES)]


@pytest.mark.parametrize(
    ("accelerator", "capacity"), [(a, c) for a in ("v6e-8", "v6e-16") for c in [*CAPACITIES, *SETS]] + [("cpu", "on-demand")]
)
def test_every_capacity_renders_strictly_valid_manifests(accelerator: str, capacity: str | list[str]) -> None:
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


def _terms(pod: dict[str, Any]) -> list[dict[str, str]]:
    """Each required node affinity term as {key: value} (every expression is `In` one value)."""
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    out = []
    for term in terms:
        assert all(e["operator"] == "In" and len(e["values"]) == 1 for e in term["matchExpressions"]), term
        out.append({e["key"]: e["values"][0] for e in term["matchExpressions"]})
    return out


@pytest.mark.parametrize("accelerator", ["v6e-8", "v6e-16"])
def test_a_capacity_set_selects_each_kind_in_its_own_affinity_term(accelerator: str) -> None:
    """One term per kind, in the spec's order: a reservation node must also carry the reservation's name and a
    spot node GKE's spot label, which one `rljob.dev/capacity In [...]` could not say. The slice's selectors stay."""
    pod = _pod(render_manifests(_spec(accelerator, ["reservation", "spot", "on-demand"]), JOB_ID, make_settings())[1])
    assert _terms(pod) == [
        {"rljob.dev/capacity": "reservation", "cloud.google.com/reservation-name": "tpu-res-1"},
        {"rljob.dev/capacity": "spot", "cloud.google.com/gke-spot": "true"},
        {"rljob.dev/capacity": "on-demand"},
    ]
    assert "rljob.dev/capacity" not in pod["nodeSelector"] and "cloud.google.com/gke-tpu-topology" in pod["nodeSelector"]
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in pod["tolerations"]


def test_a_capacity_set_keeps_the_long_grace_and_flex_starts_limit() -> None:
    """Both are fixed before Kueue picks the flavor: the long grace (GKE ends a Spot VM's pods at its own limit
    anyway), and with flex-start in the set the trainer's 7-day stop on any kind."""
    settings = make_settings(termination_grace_s=300, flex_start_margin_s=1800)
    spot_or_od = _pod(render_manifests(_spec("v6e-8", ["spot", "on-demand"]), JOB_ID, settings)[1])
    assert spot_or_od["terminationGracePeriodSeconds"] == 300 and "RLJOB_MAX_RUN_S" not in _env(spot_or_od)
    with_flex = _pod(render_manifests(_spec("v6e-8", ["on-demand", "flex-start"]), JOB_ID, settings)[1])
    assert _env(with_flex)["RLJOB_MAX_RUN_S"] == str(FLEX_START_MAX_RUN_S - 1800)
    assert not any(t["key"] == "cloud.google.com/gke-spot" for t in with_flex["tolerations"])


def test_a_one_kind_list_is_the_kind_alone() -> None:
    """Same spec, same hash, same manifests: a list of one kind is stored as the kind."""
    alone, listed = _spec("v6e-8", "spot"), _spec("v6e-8", ["spot"])
    assert listed.hardware.capacity == "spot" and listed.content_hash() == alone.content_hash()
    assert render_manifests_yaml(listed, JOB_ID, make_settings()) == render_manifests_yaml(alone, JOB_ID, make_settings())


@pytest.mark.parametrize(
    ("capacity", "why"),
    [
        ([], "an empty list offers no capacity"),
        (["spot", "on-demand", "spot"], "spot listed more than once"),
        (["reservation", "spot"], "needs the reservation"),
    ],
)
def test_a_bad_capacity_set_is_refused_with_the_reason(capacity: list[str], why: str) -> None:
    base = make_spec("v6e-8", 8).model_dump()
    with pytest.raises(ValueError, match=why):
        JobSpec.model_validate({**base, "hardware": {**base["hardware"], "capacity": capacity}})


def test_a_cpu_job_with_a_set_beyond_on_demand_is_refused() -> None:
    with pytest.raises(ManifestError, match="capacity spot is a kind of TPU node pool"):
        render_manifests(_spec("cpu", ["on-demand", "spot"]), JOB_ID, make_settings(host_paths=["/data/rljob"]))
