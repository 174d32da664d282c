"""docs/deploy-gke.md: says what is verified only statically, and every repository path it names exists."""

from __future__ import annotations

import re

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


def _commands(prefix: str) -> list[str]:
    """Every command of the guide's bash blocks that starts with `prefix`, continuation lines joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", DOC, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith(prefix):
                out.append(" ".join(cmd.split()))
    return out


def _flags(cmd: str) -> dict[str, str]:
    return {m[0]: m[1] for m in re.findall(r"(--[\w-]+)(?:=(\"[^\"]*\"|\S+))?", cmd)}


def _doc_var(name: str) -> str:
    (value,) = re.findall(rf"^{name}=(\S+)$", DOC, re.M)
    return value


def _tpu_pools() -> dict[str, dict[str, str]]:
    """capacity -> flags of the guide's TPU node-pool command for it (TPU: a ct* machine type)."""
    from service.adapters.k8s.capacity import CAPACITY_LABEL

    pools: dict[str, dict[str, str]] = {}
    for cmd in _commands("gcloud container node-pools create"):
        flags = _flags(cmd)
        if not flags.get("--machine-type", "").startswith("ct"):
            continue
        labels = dict(kv.split("=", 1) for kv in flags.get("--node-labels", "").split(",") if kv)
        assert CAPACITY_LABEL in labels, f"a TPU pool without --node-labels={CAPACITY_LABEL}=...: {cmd}"
        capacity = labels[CAPACITY_LABEL]
        assert capacity not in pools, f"two pool commands for {capacity}"
        pools[capacity] = flags
    return pools


def test_every_tpu_pool_command_matches_what_its_pods_select():
    """Each kind of capacity has one pool command; it sets --num-nodes (0 for flex-start, the slice's VM count
    otherwise, as xpk) and the label value capacity_scheduling() selects; spot's taint is the one its pods
    tolerate; flex-start is plain flex-start; the reservation is the one the Kueue flavor names."""
    import yaml

    from service.adapters.k8s.accelerators import ACCELERATORS
    from service.adapters.k8s.capacity import CAPACITY_LABEL, RESERVATION_NAME_LABEL, SPOT_LABEL, capacity_scheduling

    pools = _tpu_pools()
    assert set(pools) == {"on-demand", "spot", "flex-start", "reservation"}
    reservation = _doc_var("RESERVATION")
    for capacity, flags in pools.items():
        sched = capacity_scheduling((capacity,), reservation, tpu=True)
        assert sched.node_selector[CAPACITY_LABEL] == capacity
        # Every label the pod selects that is ours must be on the pool; GKE's own (spot, reservation) are set by GKE.
        ours = {k: v for k, v in sched.node_selector.items() if not k.startswith("cloud.google.com/")}
        assert flags["--node-labels"] == ",".join(f"{k}={v}" for k, v in ours.items()), capacity
        (hw,) = {a for a in ACCELERATORS.values() if a.machine_type == flags["--machine-type"] and not a.multi_host}
        assert flags["--num-nodes"] == ("0" if capacity == "flex-start" else str(hw.vms_per_slice)), capacity
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
            assert sched.node_selector[RESERVATION_NAME_LABEL] == reservation
    # The Kueue flavors name the same label values, and the reservation flavor the guide's reservation.
    flavors = [d for d in yaml.safe_load_all((ROOT / "k8s/kueue/resourceflavor.yaml").read_text()) if d]
    by_capacity = {f["spec"]["nodeLabels"][CAPACITY_LABEL]: f["spec"]["nodeLabels"] for f in flavors}
    assert set(by_capacity) == set(pools)
    assert by_capacity["reservation"][RESERVATION_NAME_LABEL] == reservation


def test_pool_check_fails_when_the_guide_drifts(monkeypatch):
    """Guards the check above: a pool command that loses its label value or --num-nodes fails it."""
    import sys

    import pytest

    mod = sys.modules[__name__]
    for old, new in (
        ("--node-labels=rljob.dev/capacity=spot", "--node-labels=rljob.dev/capacity=preemptible"),
        ("--machine-type=ct6e-standard-8t --num-nodes=0", "--machine-type=ct6e-standard-8t"),
    ):
        assert old in DOC
        monkeypatch.setattr(mod, "DOC", DOC.replace(old, new))
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
        "harness/podrun/kueue.py",
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
