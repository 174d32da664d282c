"""`rljob doctor` as the user runs it (a subprocess, settings from RLJOB_* variables, a kubeconfig pointing at
kmock), against a healthy Kueue cluster with one failure planted at a time; storage on fake-gcs-server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from harness.gcs_emulator import GCE_METADATA_ROOT, GcsEmulator
from harness.kueue_cluster import FLAVORS, KUEUE, NS, KueueCluster, active
from harness.podrun.api.admission import JOBSET_WEBHOOK_SERVICE, KUEUE_WEBHOOK_SERVICE
from harness.podrun.kueue.config import KueueConfiguration

pytestmark = pytest.mark.timeout(120)
BUCKET = "rljob-runs"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    emu = GcsEmulator(tmp_path_factory.mktemp("fake-gcs"))
    emu.start()
    client = storage.Client(project="rljob-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": emu.url})
    client.create_bucket(BUCKET)
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture()
def healthy(kmock: Any) -> KueueCluster:
    return KueueCluster(kmock)


def _kubeconfig(tmp_path: Path, url: str, name: str = "kubeconfig") -> Path:
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "doctor", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "doctor"}}],
            }
        )
    )
    return path


async def doctor(cluster: KueueCluster, gcs: GcsEmulator, tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    """`python -m service.cli.main doctor ARGS` with a clean RLJOB_* environment; (exit code, stdout+stderr)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RLJOB_", "STORAGE_EMULATOR", "KUBECONFIG"))}
    base.update(
        {
            "RLJOB_K8S_KUBECONFIG": str(_kubeconfig(tmp_path, str(cluster.server.url).rstrip("/"))),
            "RLJOB_K8S_NAMESPACE": NS,
            "RLJOB_K8S_KUEUE_TEAM_QUEUES": json.dumps({"ml": "team-ml"}),
            "RLJOB_K8S_RETRY_ATTEMPTS": "1",
            "RLJOB_K8S_REQUEST_TIMEOUT_S": "5",
            "RLJOB_TEAM_LOCATIONS": json.dumps({"ml": [f"gs://{BUCKET}/ml/"]}),
            "RLJOB_STATE_DIR": str(tmp_path / "state"),
            "STORAGE_EMULATOR_HOST": gcs.url,
            "GCE_METADATA_ROOT": GCE_METADATA_ROOT,
            "COLUMNS": "400",
        }
    )
    base.update(env)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli.main",
        "doctor",
        *args,
        env=base,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def line(output: str, status: str, name: str) -> str:
    found = [ln for ln in output.splitlines() if ln.startswith(f"{status:<4}  {name}")]
    assert found, f"no '{status} {name}' line in:\n{output}"
    return found[0]


async def test_a_healthy_cluster_is_all_ok(healthy, gcs, tmp_path):
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    for name in (
        "api batch/v1",
        "api jobset.x-k8s.io/v1alpha2",
        "api kueue.x-k8s.io/v1beta2",
        "api visibility.kueue.x-k8s.io/v1beta2",
        "rbac",
        "queue team-ml",
        "nodes for flavor tpu-v6e-2x4-on-demand",
        "nodes for flavor tpu-v6e-2x4-spot",
        "secret rljob-hf-token",
        f"storage gs://{BUCKET}/ml/",
        "admission Job",
        "admission JobSet",
        "localqueue default",
        "kueue configuration",
        "kueue probe Job",
        "kueue probe JobSet",
        "quota of flavor tpu-v6e-2x4-on-demand (ClusterQueue rljob-v6e)",
        "quota of flavor tpu-v6e-2x4-spot (ClusterQueue rljob-v6e)",
    ):
        line(out, "ok", name)
    assert out.strip().endswith("19 ok, 0 warn, 0 fail"), out  # with the kueue version line (v1beta2 alone served)
    # The dry-run probes were never stored; the queued ones got their Workloads and were deleted.
    kinds = {k[0].plural for k, o in healthy.server.objects.items() if not o.deleted}
    assert "jobs" not in kinds and "jobsets" not in kinds
    assert len([k for k in healthy.server.objects if k[0].plural == "jobs"]) == 1, "one queued Job probe, the dry run not stored"
    assert "aGYtc2VjcmV0LXZhbHVl" not in out and "hf-secret-value" not in out, "a Secret's value is never printed"
    assert "not the trainer's" in line(out, "ok", f"storage gs://{BUCKET}/ml/")
    # Every permission the service uses was asked about in its namespace, cluster-scoped ones without one.
    asked = {
        (a["resource"] + ("/" + a["subresource"] if a.get("subresource") else ""), a["verb"], a.get("namespace")) for a in healthy.reviews
    }
    assert ("jobs", "create", NS) in asked and ("clusterqueues", "get", None) in asked and ("nodes", "list", None) in asked
    assert ("localqueues/pendingworkloads", "get", NS) in asked
    assert any(a["resource"] == "secrets" and a.get("name") == "rljob-hf-token" for a in healthy.reviews)


async def test_missing_jobset_api_fails_when_jobsets_are_watched(healthy, gcs, tmp_path):
    del healthy.server.resources["jobset.x-k8s.io/v1alpha2/jobsets"]
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    assert "RLJOB_K8S_WATCH_JOBSETS=false" in out and "not served" in line(out, "fail", "api jobset.x-k8s.io/v1alpha2")
    rc, out = await doctor(healthy, gcs, tmp_path, RLJOB_K8S_WATCH_JOBSETS="false")
    assert rc == 0 and "multi-host" in line(out, "warn", "api jobset.x-k8s.io/v1alpha2")


async def test_kueue_older_than_0_15_fails_naming_what_is_served(healthy, gcs, tmp_path):
    for plural in ("workloads", "localqueues", "clusterqueues", "resourceflavors", "admissionchecks"):
        del healthy.server.resources[f"{KUEUE}/{plural}"]
        healthy.server.resources[f"kueue.x-k8s.io/v1beta1/{plural}"] = {"namespaced": plural in ("workloads", "localqueues")}
    for key in [k for k in healthy.server.objects if k[0].group == "kueue.x-k8s.io"]:
        del healthy.server.objects[key]
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    assert "only kueue.x-k8s.io/v1beta1: Kueue < 0.15" in line(out, "fail", "api kueue.x-k8s.io/v1beta2")
    assert "upgrade Kueue to >= 0.15" in out
    assert "not served" in line(out, "fail", "queue team-ml")


async def test_rbac_denied_for_one_verb_names_it(healthy, gcs, tmp_path):
    healthy.denied = {("jobs", "create")}
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    assert f"denied in namespace {NS}" in line(out, "fail", "rbac create jobs.batch")
    assert "k8s/base/rbac.yaml" in out
    assert [ln for ln in out.splitlines() if ln.startswith("fail")] == [line(out, "fail", "rbac create jobs.batch")]


async def test_an_optional_permission_denied_is_a_warning(healthy, gcs, tmp_path):
    healthy.denied = {("nodes", "list")}
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    assert "cluster-wide" in line(out, "warn", "rbac list nodes") and "rljob-cluster-reader" in out


async def test_an_inactive_cluster_queue_quotes_kueue(healthy, gcs, tmp_path):
    healthy.put_cluster_queue(
        status=active("False", "FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): [tpu-x]")
    )
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    text = line(out, "fail", "queue team-ml")
    assert "rljob-v6e" in text and "FlavorNotFound: Can't admit new workloads: references missing ResourceFlavor(s)" in text


async def test_an_inactive_admission_check_fails(healthy, gcs, tmp_path):
    healthy.put_cluster_queue(checks=["rljob-flex-start"])
    healthy.put(
        f"{KUEUE}/admissionchecks",
        "rljob-flex-start",
        {
            "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
            "status": active("False", "BadParametersRef", "missing ProvisioningRequestConfig"),
        },
    )
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1 and "BadParametersRef" in line(out, "fail", "admission check rljob-flex-start")


async def test_a_flavor_whose_memory_quota_is_below_one_trainer_fails_naming_memory(healthy, gcs, tmp_path):
    """Every resource the trainer pod requests is compared, not only google.com/tpu: 1000Gi of memory cannot hold
    one v6e-8 trainer (its memory request, K8sSettings/the accelerator table), so no job of that kind could start."""
    cq = healthy.server.objects[f"{KUEUE}/clusterqueues", None, "rljob-v6e"].raw
    spec = json.loads(json.dumps(cq["spec"]))
    spec["resourceGroups"][0]["flavors"][1]["resources"][1]["nominalQuota"] = "1000Gi"
    healthy.put(f"{KUEUE}/clusterqueues", "rljob-v6e", {"spec": spec, "status": cq["status"]})
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1, out
    text = line(out, "fail", "quota of flavor tpu-v6e-2x4-spot")
    assert "its memory quota is 1000Gi" in text and "can never admit a v6e-8 trainer" in text, text
    line(out, "ok", "quota of flavor tpu-v6e-2x4-on-demand")


async def test_no_nodes_for_a_flavor_is_a_warning(healthy, gcs, tmp_path):
    healthy.drop("v1/nodes", "gke-tpu-spot-1")
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    assert "flex-start pools start at 0" in line(out, "warn", "nodes for flavor tpu-v6e-2x4-spot")
    line(out, "ok", "nodes for flavor tpu-v6e-2x4-on-demand")


async def test_an_untolerated_taint_fails(healthy, gcs, tmp_path):
    labels = FLAVORS["tpu-v6e-2x4-on-demand"][0]
    healthy.put_node(
        "gke-tpu-od-1",
        labels,
        [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}, {"key": "team", "value": "infra", "effect": "NoSchedule"}],
    )
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    assert "gke-tpu-od-1: team=infra:NoSchedule" in line(out, "fail", "nodes for flavor tpu-v6e-2x4-on-demand")
    line(out, "ok", "nodes for flavor tpu-v6e-2x4-spot")  # its gke-spot taint is the flavor's toleration


async def test_a_missing_hf_secret_is_a_warning_with_the_command(healthy, gcs, tmp_path):
    healthy.drop("v1/secrets", "rljob-hf-token", NS)
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    assert "public models need no token" in line(out, "warn", "secret rljob-hf-token")
    assert "create secret generic rljob-hf-token --from-literal=token=<token>" in out


async def test_an_unreachable_bucket_fails_and_says_how_to_check_the_trainer(healthy, gcs, tmp_path):
    missing = f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/ml/"
    rc, out = await doctor(healthy, gcs, tmp_path, RLJOB_TEAM_LOCATIONS=json.dumps({"ml": [missing]}))
    assert rc == 1
    assert "the service's identity cannot list it" in line(out, "fail", f"storage {missing}")
    assert "serviceAccountName" in out and "rljob-trainer" in out and f"gcloud storage ls {missing}" in out


async def test_bad_settings_and_an_unreachable_cluster_are_messages_not_tracebacks(healthy, gcs, tmp_path):
    rc, out = await doctor(healthy, gcs, tmp_path, RLJOB_K8S_KUEUE_TEAM_QUEUES='{"ML": "Team_ML"}')
    assert rc == 2 and "invalid settings" in out and "RLJOB_K8S_KUEUE_TEAM_QUEUES" in out and "Traceback" not in out
    rc, out = await doctor(healthy, gcs, tmp_path, RLJOB_K8S_KUBECONFIG=str(tmp_path / "nope"))
    assert rc == 2 and "cannot load the cluster's credentials" in out and "Traceback" not in out
    rc, out = await doctor(healthy, gcs, tmp_path, RLJOB_K8S_KUBECONFIG=str(_kubeconfig(tmp_path, "http://127.0.0.1:9", "closed-port")))
    assert rc == 1 and "cannot discover its APIs" in line(out, "fail", "api server") and "Traceback" not in out


# -- the probes: Kueue's configuration and the controllers' webhooks (doctor_probes.py) ------------------------


async def test_a_local_queue_named_default_fails(healthy, gcs, tmp_path):
    healthy.put(f"{KUEUE}/localqueues", "default", {"spec": {"clusterQueue": "rljob-v6e"}, "status": active()}, NS)
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    text = line(out, "fail", "localqueue default")
    assert "without a queue-name label" in text and "kubectl -n rljob delete localqueue default" in out
    assert [ln for ln in out.splitlines() if ln.startswith("fail")] == [text]


async def test_a_namespace_kueue_does_not_select_fails_the_probe_and_the_configuration(healthy, gcs, tmp_path):
    healthy.set_config(KueueConfiguration(managed_jobs_namespace_selector={"matchLabels": {"kueue-managed": "true"}}))
    rc, out = await doctor(healthy, gcs, tmp_path, "--probe-wait", "2")  # the emulated Kueue answers within one poll
    assert rc == 1
    assert "got no Kueue Workload within 2s" in line(out, "fail", "kueue probe Job")
    line(out, "fail", "kueue probe JobSet")
    assert "does not select namespace rljob" in line(out, "fail", "kueue configuration")
    healthy.namespace_labels = {"kueue-managed": "true"}  # the fix the line suggests
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    line(out, "ok", "kueue probe Job")


async def test_frameworks_without_jobset_fail_the_jobset_probe(healthy, gcs, tmp_path):
    healthy.set_config(KueueConfiguration.from_yaml("integrations:\n  frameworks: [batch/job]\n"))
    rc, out = await doctor(healthy, gcs, tmp_path, "--probe-wait", "2")
    assert rc == 1
    line(out, "ok", "kueue probe Job")
    assert "got no Kueue Workload" in line(out, "fail", "kueue probe JobSet") and "must list jobset.x-k8s.io/jobset" in out
    assert "integrations.frameworks lacks jobset.x-k8s.io/jobset" in line(out, "fail", "kueue configuration")


async def test_an_unreadable_kueue_configuration_is_a_warning(healthy, gcs, tmp_path):
    healthy.set_config(KueueConfiguration.installed(), readable=False)
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 0, out
    assert "could not read Kueue's Configuration" in line(out, "warn", "kueue configuration")


async def test_kueue_down_fails_the_dry_run_naming_kueue(healthy, gcs, tmp_path):
    healthy.admission.down.add(KUEUE_WEBHOOK_SERVICE)
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    text = line(out, "fail", "admission Job")
    assert "webhook mjob.kb.io of Kueue" in text and 'no endpoints available for service "kueue-webhook-service"' in text
    assert "kubectl -n kueue-system get pods,endpoints kueue-webhook-service" in out
    assert "webhook mjobset.kb.io of Kueue" in line(out, "fail", "admission JobSet")


async def test_jobset_down_fails_the_jobset_dry_run_naming_jobset(healthy, gcs, tmp_path):
    healthy.admission.down.add(JOBSET_WEBHOOK_SERVICE)
    rc, out = await doctor(healthy, gcs, tmp_path)
    assert rc == 1
    line(out, "ok", "admission Job")
    assert "of JobSet" in line(out, "fail", "admission JobSet") and "kubectl -n jobset-system logs deploy/jobset-controller-manager" in out
