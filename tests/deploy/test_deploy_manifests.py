"""k8s/: every overlay renders, validates strictly, and keeps the properties the deployment relies on."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from harness.crd_schemas import strict_crd_schema
from tests.deploy.deploy_support import GKE_MINOR, K8S, OVERLAYS, ROOT, one, render
from tests.deploy.env_scan import settings_env_names

SCHEMAS = Path(__file__).parent / "schemas"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ResourceFlavor",
    "ClusterQueue",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "WorkloadPriorityClass",
}


def _kueue_validators() -> dict[str, jsonschema.Draft7Validator]:
    schemas = json.loads((SCHEMAS / "kueue-v0.19.2-v1beta2.json").read_text())
    out = {}
    for kind, schema in schemas.items():
        schema = strict_crd_schema(copy.deepcopy(schema))
        schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is checked by the API server
        out[kind] = jsonschema.Draft7Validator(schema)
    return out


KUEUE = _kueue_validators()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_objects_pass_strict_schema_validation(rendered, overlay):
    """Built-in kinds: kubernetes-validate --strict for the target GKE minor. Kueue kinds: the v1beta2
    openAPI schemas of Kueue v0.19.2's CRDs (tests/deploy/schemas/README.md), with unknown fields
    rejected. Any other kind fails: add its schema before adding it to k8s/."""
    errors = []
    for obj in rendered[overlay]:
        ident = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2", f"{ident}: write Kueue objects as v1beta2"
            errors += [f"{ident}: {'.'.join(map(str, e.path))}: {e.message}" for e in KUEUE[obj["kind"]].iter_errors(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, GKE_MINOR, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{ident}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{ident}: no schema to validate it: {e.message}")
    assert not errors, "\n".join(errors)


def test_strict_validation_rejects_an_unknown_field(rendered):
    """Guards the check above: a misspelt field must fail, for a built-in and for a Kueue kind."""
    dep = copy.deepcopy(one(rendered["gke"], "Deployment", "rljob-service"))
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, GKE_MINOR, strict=True)
    cq = copy.deepcopy(one(rendered["gke-kueue"], "ClusterQueue"))
    cq["spec"]["cohort"] = "v1beta1-name"  # renamed cohortName in v1beta2
    assert list(KUEUE["ClusterQueue"].iter_errors(cq))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespaces_are_consistent(rendered, overlay):
    objs = rendered[overlay]
    ns = one(objs, "Namespace")["metadata"]["name"]
    for obj in objs:
        ident = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], f"{ident} is cluster-scoped but has a namespace"
        else:
            assert obj["metadata"].get("namespace") == ns, f"{ident} is not in namespace {ns}"
    for subject in one(objs, "RoleBinding", "rljob-launcher")["subjects"]:
        assert subject.get("namespace") == ns, "RoleBinding subject points at another namespace"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_deployment_is_hardened_and_probed(rendered, overlay):
    objs = rendered[overlay]
    dep = one(objs, "Deployment", "rljob-service")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rljob-service"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert {p["containerPort"] for p in c["ports"]} == {8000}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp must be a writable emptyDir (read-only root)"
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == "rljob-service"]
    if "sqlite" in json.dumps(c.get("env", [])):
        # SQLite lives in the pod: one replica, never two pods at once, and no budget to block drains.
        assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate" and not pdbs
    else:
        # PostgreSQL: replicas with a leader lock; a rolling update and a drain keep one serving.
        assert dep["spec"]["replicas"] >= 2 and dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        (pdb,) = pdbs
        assert (
            pdb["spec"]["minAvailable"] == 1
            and pdb["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        )
    # The Service reaches this pod.
    svc = one(objs, "Service", "rljob-service")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] in ("http", 8000)
    # Its envFrom names a ConfigMap that the overlay renders (kustomize's hash suffix included).
    cm_names = {o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap"}
    for ref in c["envFrom"]:
        assert ref["configMapRef"]["name"] in cm_names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_referenced_never_committed(rendered, overlay):
    objs = rendered[overlay]
    assert not [o for o in objs if o["kind"] == "Secret"], "no Secret objects in k8s/: create them with kubectl"
    c = one(objs, "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["RLJOB_BOOTSTRAP_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    db = env["RLJOB_DATABASE_URL"]
    if overlay == "dev":
        assert db["value"].startswith("sqlite:///"), "dev uses SQLite on its emptyDir"
    else:
        assert db["valueFrom"]["secretKeyRef"] == {"name": "rljob-db", "key": "url"}
    for cm in (o for o in objs if o["kind"] == "ConfigMap"):
        for key in cm.get("data", {}):
            assert not any(w in key for w in ("TOKEN=", "PASSWORD", "DATABASE_URL")), f"secret-looking {key}"
            assert not key.endswith(("_TOKEN", "_PASSWORD")), f"{key} belongs in a Secret"


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.startswith("gke")])
def test_gke_service_accounts_carry_workload_identity(rendered, overlay):
    objs = rendered[overlay]
    for name in ("rljob-trainer", "rljob-service"):
        sa = one(objs, "ServiceAccount", name)
        gsa = sa["metadata"].get("annotations", {}).get("iam.gke.io/gcp-service-account", "")
        assert gsa.endswith(".iam.gserviceaccount.com") and "@" in gsa, f"{name}: {gsa!r}"
    assert one(objs, "ServiceAccount", "rljob-trainer")["automountServiceAccountToken"] is False
    # The replacements' source must not leak into the cluster.
    assert not [o for o in objs if o["metadata"]["name"] == "rljob-project"]


def test_gke_overlay_takes_project_values_from_project_env(kubectl, tmp_path):
    """The values in project.env (not some copy elsewhere) are what lands in the rendered objects."""
    import shutil

    work = tmp_path / "k8s"
    shutil.copytree(K8S, work)
    (work / "overlays/gke/project.env").write_text("TRAINER_GSA=t@p1.iam.gserviceaccount.com\nSERVICE_GSA=s@p1.iam.gserviceaccount.com\n")
    objs = render(kubectl, work / "overlays/gke")
    ann = "iam.gke.io/gcp-service-account"
    assert one(objs, "ServiceAccount", "rljob-trainer")["metadata"]["annotations"][ann] == "t@p1.iam.gserviceaccount.com"
    assert one(objs, "ServiceAccount", "rljob-service")["metadata"]["annotations"][ann] == "s@p1.iam.gserviceaccount.com"


def test_trainer_pdb_blocks_voluntary_evictions_only_of_trainer_pods(rendered):
    for overlay, objs in rendered.items():
        pdb = one(objs, "PodDisruptionBudget", "rljob-trainer")
        assert pdb["spec"]["maxUnavailable"] == 0
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        sel = pdb["spec"]["selector"]["matchLabels"]
        service_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert not sel.items() <= service_labels.items(), f"{overlay}: the PDB must not select the service"


def test_trainer_pdb_selector_matches_launcher_labels(rendered):
    """The launcher (service/adapters/k8s/) must put the PDB's labels on trainer pods; checked as string
    literals in its source, since its manifests are built in code."""
    pkg = ROOT / "service" / "adapters" / "k8s"
    sources = "\n".join(p.read_text() for p in pkg.rglob("*.py")) if pkg.is_dir() else ""
    if not sources.strip():
        pytest.skip("service/adapters/k8s/ does not exist yet (issue 4)")
    sel = one(rendered["gke"], "PodDisruptionBudget", "rljob-trainer")["spec"]["selector"]["matchLabels"]
    missing = [f"{k}={v}" for k, v in sel.items() if f'"{k}"' not in sources and f"'{k}'" not in sources]
    missing += [f"value {v!r}" for v in sel.values() if f'"{v}"' not in sources and f"'{v}'" not in sources]
    assert not missing, f"the launcher does not appear to set {missing} on trainer pods; align k8s/base/pdb-trainer.yaml"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rljob_setting_is_one_the_service_reads(rendered, overlay):
    """A misspelt or renamed setting is silently ignored by pydantic-settings (extra="ignore");
    catch it here instead of on the cluster."""
    known = set(settings_env_names(ROOT / "service"))
    if not known:
        pytest.skip("no pydantic-settings classes under service/ yet (issue 3)")
    objs = rendered[overlay]
    keys = set()
    for cm in (o for o in objs if o["kind"] == "ConfigMap"):
        keys |= {k for k in cm.get("data", {}) if k.startswith("RLJOB_")}
    for c in one(objs, "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"]:
        keys |= {e["name"] for e in c.get("env", []) if e["name"].startswith("RLJOB_")}
    assert keys - known == set(), f"settings no service class reads: {sorted(keys - known)}"
    # The ones the deployment cannot work without.
    assert {"RLJOB_LAUNCHER", "RLJOB_K8S_IN_CLUSTER", "RLJOB_K8S_NAMESPACE", "RLJOB_K8S_IMAGE", "RLJOB_DATABASE_URL"} <= keys
