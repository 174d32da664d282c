"""The permissions `rljob doctor` asks about (rbac_needs.py) are exactly what k8s/ grants, and the namespaced
ones exactly what tests/deploy's scan derives from service/adapters/k8s/."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from service.adapters.k8s_cluster.rbac_needs import CLUSTER, HF_SECRET_IN_ROLE, NAMESPACED
from service.app import create_app
from service.domain.self_check import CheckLine
from tests.deploy.k8s_api_scan import role_rules, scan_package

from .test_service_integration import _settings

ROOT = Path(__file__).resolve().parents[2]


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_namespaced_needs_are_the_role_and_the_code():
    (role,) = [d for d in _docs(ROOT / "k8s/base/rbac.yaml") if d["kind"] == "Role"]
    needs = {p.rule for p in NAMESPACED}
    assert role_rules(role) == needs
    assert scan_package(ROOT / "service/adapters/k8s").rules() == needs
    (secrets,) = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert secrets["resourceNames"] == [HF_SECRET_IN_ROLE], "only the HF token Secret"


def test_the_cluster_needs_are_the_overlays_cluster_role():
    docs = _docs(ROOT / "k8s/overlays/gke-kueue/rbac-cluster-reader.yaml")
    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role_rules(cluster_role) == {p.rule for p in CLUSTER}
    assert "rbac-cluster-reader.yaml" in (ROOT / "k8s/overlays/gke-kueue/kustomization.yaml").read_text()


def test_readyz_shows_the_start_up_checks_and_a_failure_does_not_make_it_unready(tmp_path):
    lines = [CheckLine("ok", "api batch/v1", "served"), CheckLine("fail", "queue team-ml", "inactive", "fix it")]
    with TestClient(create_app(_settings(tmp_path), self_check=lambda: lines)) as client:
        deadline = time.monotonic() + 10
        while "checks" not in (body := client.get("/readyz").json()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/readyz").status_code == 200
        assert body["ready"] is True
        assert body["checks"] == [
            {"status": "ok", "name": "api batch/v1", "message": "served", "fix": ""},
            {"status": "fail", "name": "queue team-ml", "message": "inactive", "fix": "fix it"},
        ]
