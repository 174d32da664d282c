"""docs/deploy-gke.md: says what is verified only statically, and every repository path it names exists."""

from __future__ import annotations

import re

from tests.deploy import guide_pools
from tests.deploy.deploy_support import ROOT

DOC = (ROOT / "docs" / "deploy-gke.md").read_text()


def test_guide_states_what_is_only_static_and_how_to_verify():
    assert "verified only on GKE" in DOC and "Nothing in this guide has been run end to end" in DOC
    for must in (
        "--machine-type=ct6e-standard-8t",
        "--workload-pool=",
        "roles/storage.objectUser",
        "roles/storage.legacyBucketReader",
        "roles/iam.workloadIdentityUser",
        "skaffold run -p gke",
        "rljob submit",
        "--follow",
        "examples/tutorial-llama31-8b-v6e8.yaml",
        "kubectl auth can-i",
        "-l app.kubernetes.io/managed-by=rljob -L rljob.dev/phase,rljob.dev/team",
        "scripts/maxtext_version.py exec --",
        "kubectl -n rljob create secret",
    ):
        assert must in DOC, must


def test_repository_paths_in_the_guide_exist():
    paths = set(re.findall(r"`((?:k8s|docker|scripts|tests|examples|docs)/[\w./-]+)`", DOC))
    paths |= set(re.findall(r"\b((?:examples|k8s/overlays)/[\w./-]+\.(?:yaml|env))\b", DOC))
    assert paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/deploy-gke.md names paths that do not exist: {missing}"


def test_secret_names_in_the_guide_match_the_manifests():
    deployment = (ROOT / "k8s/base/deployment.yaml").read_text()
    config = (ROOT / "k8s/base/kustomization.yaml").read_text()
    for secret, key in (("rljob-db", "url"), ("rljob-api-tokens", "bootstrap")):
        assert f"name: {secret}" in deployment and f"create secret generic {secret}" in DOC
        assert f"--from-literal={key}=" in DOC
    assert "RLJOB_K8S_HF_TOKEN_SECRET=rljob-hf-token" in config and "RLJOB_K8S_HF_TOKEN_SECRET_KEY=token" in config
    assert "create secret generic rljob-hf-token --from-literal=token=" in DOC


# --- step 3's node-pool commands against the code that routes pods to them -----------------------------------


def test_every_tpu_pool_command_matches_what_its_pods_select():
    """The v6e-8 VM has one pool command per kind of capacity, and v5e-1's and v5e-4's VMs an on-demand one each.
    Every TPU pool command is of a single-host slice's machine; it sets --num-nodes (0 for flex-start, the slice's VM
    count otherwise, as xpk) and puts on its nodes every label capacity_scheduling() selects, save the one GKE documents
    setting itself (spot: `cloud.google.com/gke-spot`); spot's taint is the one its pods tolerate; flex-start is
    plain flex-start; the reservation pool labels its nodes with the reservation the Kueue flavor names (no source
    says GKE labels a hand-made pool's nodes with it, so the pool must)."""
    import yaml

    from service.adapters.k8s.capacity import CAPACITY_LABEL, EVAL_POOL, RESERVATION_NAME_LABEL

    pools = guide_pools.tpu_pools(DOC)
    assert set(pools) == {"on-demand", "spot", "flex-start", "reservation"}
    machines = guide_pools.tpu_machine_types(DOC)
    assert {"ct6e-standard-8t", "ct5lp-hightpu-1t", "ct5lp-hightpu-4t"} <= machines
    for machine_type in sorted(machines):
        _check_pools(machine_type, guide_pools.tpu_pools(DOC, machine_type))
    # The Kueue flavors name the same label values, and the reservation flavor the guide's reservation.
    flavors = [d for d in yaml.safe_load_all((ROOT / "k8s/kueue/resourceflavor.yaml").read_text()) if d]
    by_capacity = {f["spec"]["nodeLabels"][CAPACITY_LABEL]: f["spec"]["nodeLabels"] for f in flavors}
    assert set(by_capacity) == {*pools, EVAL_POOL}
    assert by_capacity["reservation"][RESERVATION_NAME_LABEL] == guide_pools.doc_var(DOC, "RESERVATION")


def _check_pools(machine_type: str, pools: dict[str, tuple[str, dict[str, str]]]) -> None:
    from service.adapters.k8s.accelerators import ACCELERATORS
    from service.adapters.k8s.capacity import CAPACITY_LABEL, RESERVATION_NAME_LABEL, SPOT_LABEL, capacity_scheduling

    assert "on-demand" in pools, machine_type
    reservation = guide_pools.doc_var(DOC, "RESERVATION")
    set_by_gke = {"spot": {SPOT_LABEL}}  # GKE labels Spot VMs' nodes itself (its Spot VMs page)
    for capacity, (_, flags) in pools.items():
        sched = capacity_scheduling((capacity,), reservation, tpu=True)
        assert sched.node_selector[CAPACITY_LABEL] == capacity
        labels = guide_pools.node_labels(DOC, flags)
        wanted = {k: v for k, v in sched.node_selector.items() if k not in set_by_gke.get(capacity, set())}
        assert labels == wanted, capacity
        slices = [a for a in ACCELERATORS.values() if a.machine_type == machine_type and not a.multi_host]
        assert len(slices) == 1, f"{machine_type} is not the VM of one single-host slice rljob schedules: {slices}"
        hw = slices[0]
        assert flags.get("--num-nodes") == ("0" if capacity == "flex-start" else str(hw.vms_per_slice)), capacity
        assert "--enable-queued-provisioning" not in flags, "flex-start for TPUs is plain flex-start (xpk a3cfef70)"
        assert ("--spot" in flags) == (capacity == "spot")
        assert ("--flex-start" in flags) == (capacity == "flex-start")
        taints = [f"{t['key']}={t['value']}:{t['effect']}" for t in sched.tolerations]
        assert flags.get("--node-taints", "") == ",".join(taints), capacity
        if capacity == "spot":
            assert sched.node_selector[SPOT_LABEL] == "true"
        if capacity == "flex-start":
            for flag in ("--enable-autoscaling", "--no-enable-autorepair"):
                assert flag in flags
            assert flags["--reservation-affinity"] == "none" and flags["--location-policy"] == "ANY"
        if capacity == "reservation":
            assert flags["--reservation-affinity"] == "specific" and flags["--reservation"] == '"$RESERVATION"'
            assert labels[RESERVATION_NAME_LABEL] == sched.node_selector[RESERVATION_NAME_LABEL] == reservation


def test_the_eval_pool_command_matches_what_a_queued_eval_pod_selects_and_tolerates():
    """The eval pool (docs/deploy-gke.md "Eval pool") puts on its nodes exactly the label a queued eval pod selects
    and the taint it tolerates (so nothing else lands there), and is a cpu pool of on-demand VMs."""
    from service.adapters.k8s.capacity import eval_pool_scheduling

    _, flags = guide_pools.eval_pool(DOC)
    wanted = eval_pool_scheduling()
    assert guide_pools.node_labels(DOC, flags) == wanted.node_selector
    tolerated = [{k: t[k] for k in ("key", "value", "effect")} for t in wanted.tolerations]
    assert guide_pools.node_taints(flags) == tolerated
    assert not flags["--machine-type"].startswith("ct") and "--spot" not in flags and "--flex-start" not in flags
    assert "--enable-autoscaling" in flags


def test_pool_check_fails_when_the_guide_drifts(monkeypatch):
    """Guards the check above: a pool command that loses its label value, --num-nodes or the reservation pool's
    reservation-name label fails it, and so does a v5e pool of the wrong VM count or of a machine no slice has."""
    import sys

    import pytest

    mod = sys.modules[__name__]
    guide = DOC  # each drift on its own: a replacement of the guide as it is, not of the last drift
    for old, new in (
        ("--node-labels=rljob.dev/capacity=spot", "--node-labels=rljob.dev/capacity=preemptible"),
        ("--machine-type=ct6e-standard-8t --num-nodes=0", "--machine-type=ct6e-standard-8t"),
        (",cloud.google.com/reservation-name=$RESERVATION", ""),
        ("--machine-type=ct5lp-hightpu-1t --num-nodes=1", "--machine-type=ct5lp-hightpu-1t --num-nodes=2"),
        ("--machine-type=ct5lp-hightpu-4t", "--machine-type=ct5lp-hightpu-2t"),
    ):
        assert old in guide
        monkeypatch.setattr(mod, "DOC", guide.replace(old, new))
        with pytest.raises(AssertionError):
            test_every_tpu_pool_command_matches_what_its_pods_select()


def test_guide_states_versions_and_the_open_assumptions():
    for must in (
        "### What works with what",
        "1.33.0-gke.1712000",
        "v0.12.0",
        "v0.19.2",
        "tests/k8s/test_kueue_routing.py",
        "needs a real cluster",
        "harness/podrun/kueue/emulator.py",
        "automountServiceAccountToken: true",
        "gcloud auth list",
        "rljob doctor",
        "preemptible quota",
        "a3cfef70",
    ):
        assert must in DOC, must
    trainer_sa = (ROOT / "k8s/base/serviceaccounts.yaml").read_text().split("name: rljob-trainer", 1)[1]
    assert "automountServiceAccountToken: false" in trainer_sa and "`automountServiceAccountToken: false`" in DOC
    # The controllers installed in step 4 are the versions the schemas are vendored from.
    assert "jobset/releases/download/v0.12.0/" in DOC and "kueue/releases/download/v0.19.2/" in DOC
