"""docs/deploy-gke.md: says what is verified only statically, and every repository path it names exists."""

from __future__ import annotations

import re

from deploy_support import ROOT

DOC = (ROOT / "docs" / "deploy-gke.md").read_text()


def test_guide_states_what_is_only_static_and_how_to_verify():
    assert "verified only on GKE" in DOC and "Nothing in this guide has been run end to end" in DOC
    for must in ("--machine-type=ct6e-standard-8t", "--workload-pool=", "roles/storage.objectUser",
                 "roles/storage.legacyBucketReader", "roles/iam.workloadIdentityUser", "skaffold run -p gke",
                 "rljob submit", "--follow", "examples/tutorial-llama31-8b-v6e8.yaml", "kubectl auth can-i",
                 "-l app.kubernetes.io/managed-by=rljob -L rljob.dev/phase,rljob.dev/team",
                 "scripts/maxtext_version.py exec --", "kubectl -n rljob create secret"):
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
