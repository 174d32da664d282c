"""skaffold.yaml: valid for its schema version, and every path it names exists.

skaffold itself cannot be installed here (the PyPI/npm packages of that name are other projects), so
the config is checked against skaffold's published JSON schema for skaffold/v4beta13, vendored under
tests/deploy/schemas/ (see its README)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.deploy.deploy_support import ROOT, one

SK = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "skaffold-v4beta13.json").read_text())


def test_skaffold_config_matches_its_schema():
    assert SK["apiVersion"] == "skaffold/v4beta13"
    errors = sorted(jsonschema.Draft7Validator(SCHEMA).iter_errors(SK), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message[:300]}" for e in errors)


def test_schema_check_is_strict():
    bad = json.loads(json.dumps(SK))
    bad["build"]["artifacts"][0]["docker"]["dockerFile"] = "typo"
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(bad))


def _configs():
    yield "default", SK
    for prof in SK.get("profiles", []):
        yield prof["name"], prof


def test_every_path_skaffold_names_exists():
    named = []
    for art in SK["build"]["artifacts"]:
        ctx = ROOT / art.get("context", ".")
        named.append(ctx)
        named.append(ctx / art["docker"]["dockerfile"])
        for hook in art.get("hooks", {}).get("before", []):
            named += [ROOT / a for a in hook["command"] if a.endswith((".py", ".sh"))]
    for _, cfg in _configs():
        manifests = cfg.get("manifests", {})
        named += [ROOT / p for p in manifests.get("kustomize", {}).get("paths", [])]
        for hook in manifests.get("hooks", {}).get("before", []):
            named += [ROOT / p for p in re.findall(r"[\w./-]+\.(?:env|py|sh)\b", " ".join(hook["host"]["command"]))]
    missing = [str(p.relative_to(ROOT)) for p in named if not p.exists()]
    assert not missing, f"skaffold.yaml names paths that do not exist: {missing}"
    for _, cfg in _configs():
        for p in cfg.get("manifests", {}).get("kustomize", {}).get("paths", []):
            assert (ROOT / p / "kustomization.yaml").exists(), f"{p} is not a kustomization"


def test_profiles_deploy_the_matching_overlays():
    profiles = {p["name"]: p for p in SK["profiles"]}
    assert {"dev", "gke"} <= set(profiles)
    for name in profiles:
        assert profiles[name]["manifests"]["kustomize"]["paths"] == [f"k8s/overlays/{name}"]
    # dev drops the trainer artifact by index: make sure the index points at it.
    (patch,) = profiles["dev"]["patches"]
    idx = int(patch["path"].rsplit("/", 1)[1])
    assert patch["op"] == "remove" and SK["build"]["artifacts"][idx]["image"] == "rljob-trainer"


def test_built_images_are_referenced_where_skaffold_rewrites_them(rendered):
    """skaffold replaces `image:` fields, plus the Deployment env values its resourceSelector allows:
    the service image in the container, the trainer image in RLJOB_K8S_IMAGE."""
    allow = {a["groupKind"]: a["image"] for a in SK["resourceSelector"]["allow"]}
    assert ".spec.template.spec.containers.env.value" in allow["Deployment.apps"]
    assert ".*" in allow["Deployment.apps"], "keep the default rewrite of image: fields"
    for overlay, objs in rendered.items():
        c = one(objs, "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == "rljob-service"
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RLJOB_K8S_IMAGE"] == "rljob-trainer", overlay


def test_cloud_build_project_is_set_explicitly():
    """Without projectId skaffold guesses the Cloud Build project from the image name, which fails or picks
    the wrong project for an Artifact Registry repository in another project. Every profile building on
    Cloud Build names the project with the placeholder the guide tells the operator to replace (the same
    one as k8s/overlays/gke/project.env), and all of them the same one."""
    gcb = {p["name"]: p["build"]["googleCloudBuild"] for p in SK["profiles"] if "googleCloudBuild" in p.get("build", {})}
    assert set(gcb) == {"gke", "gke-kueue"}
    assert {g.get("projectId") for g in gcb.values()} == {"REPLACE_ME_PROJECT_ID"}
    assert "REPLACE_ME_PROJECT_ID" in (ROOT / "k8s/overlays/gke/project.env").read_text()
    doc = (ROOT / "docs" / "deploy-gke.md").read_text()
    assert 'sed -i "s/REPLACE_ME_PROJECT_ID/${PROJECT_ID}/" k8s/overlays/gke/project.env skaffold.yaml' in doc
    assert "projectId" in doc


@pytest.mark.parametrize("profile", ["gke", "gke-kueue"])
def test_gke_render_hook_refuses_unfilled_project_values(profile, tmp_path):
    import subprocess

    prof = next(p for p in SK["profiles"] if p["name"] == profile)
    cmd = prof["manifests"]["hooks"]["before"][0]["host"]["command"]
    (tmp_path / "k8s/overlays/gke").mkdir(parents=True)
    env_file = tmp_path / "k8s/overlays/gke/project.env"
    env_file.write_text((ROOT / "k8s/overlays/gke/project.env").read_text())
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True).returncode != 0
    env_file.write_text("TRAINER_GSA=t@p.iam.gserviceaccount.com\nSERVICE_GSA=s@p.iam.gserviceaccount.com\n")
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True).returncode == 0
