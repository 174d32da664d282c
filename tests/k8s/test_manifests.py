"""Rendered manifests: golden files, strict schema validation, and the facts that matter on GKE.

Regenerate the goldens with RLJOB_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.adapters.k8s import ACCELERATORS, ManifestError, UnsupportedAccelerator, lookup_accelerator
from service.adapters.k8s.render import render_manifests, render_manifests_yaml
from trainer.contract import NON_RETRYABLE_EXIT_CODES
from trainer.contract.accelerators.tpu import TPU_SLICES

from .conftest import JOB_ID, make_cpu_spec, make_eval_spec, make_settings, make_spec

GOLDEN = Path(__file__).parent / "golden"
GKE_MINOR = make_settings().gke_minor_version

CASES = {
    "v6e-8": dict(accelerator="v6e-8", chips_per_vm=8),
    "v6e-16": dict(accelerator="v6e-16", chips_per_vm=4),
    "v5p-8": dict(accelerator="v5p-8", chips_per_vm=4),
    "v5e-1": dict(accelerator="v5e-1", chips_per_vm=1),
    "tpu7x-8": dict(accelerator="tpu7x-8", chips_per_vm=4),
    "tpu7x-16": dict(accelerator="tpu7x-16", chips_per_vm=4),
}


def _settings(**extra):
    # The goldens show the optional parts too: Kueue, priority class, node pool (and, for cpu, a node directory).
    return make_settings(kueue_queue="tpu-queue", priority_class="rljob-batch", node_pool="tpu-pool-1", **extra)


def _golden_spec(case: str):
    if case == "cpu":
        return make_cpu_spec(team="ml-research")
    if case == "eval":
        return make_eval_spec(team="ml-research")
    return make_spec(**CASES[case], team="ml-research")


@pytest.mark.parametrize("case", [*sorted(CASES), "cpu", "eval"])
def test_golden_manifests(case: str) -> None:
    extra = {"host_paths": ["/data/rljob"]} if case == "cpu" else {}
    text = render_manifests_yaml(_golden_spec(case), JOB_ID, _settings(**extra))
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("RLJOB_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with RLJOB_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case} manifests changed; if intended, regenerate with RLJOB_UPDATE_GOLDEN=1"
    for doc in yaml.safe_load_all(text):
        validate_strict(doc)


def validate_strict(doc: dict[str, Any]) -> None:
    """kubernetes-validate --strict; JobSet is a CRD it has no schema for, so its embedded job
    template is validated as a batch/v1 Job (the JobSet envelope is checked by test_jobset_shape)."""
    if doc["kind"] == "JobSet":
        for rjob in doc["spec"]["replicatedJobs"]:
            template = rjob["template"]
            as_job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{doc['metadata']['name']}-{rjob['name']}-0", **template["metadata"]},
                "spec": template["spec"],
            }
            kubernetes_validate.validate(as_job, GKE_MINOR, strict=True)
        return
    kubernetes_validate.validate(doc, GKE_MINOR, strict=True)


@pytest.mark.parametrize("accelerator", sorted(ACCELERATORS))
@pytest.mark.parametrize("kueue", [False, True])
def test_every_accelerator_renders_strictly_valid_manifests(accelerator: str, kueue: bool) -> None:
    tpu = lookup_accelerator(accelerator)
    settings = make_settings(kueue_queue="q" if kueue else None)
    docs = render_manifests(make_spec(accelerator, tpu.chips_per_vm), JOB_ID, settings)
    assert [d["kind"] for d in docs] == ["ConfigMap", "JobSet" if tpu.multi_host else "Job"]
    for doc in docs:
        validate_strict(doc)


@pytest.mark.parametrize("kueue", [False, True])
def test_cpu_job_renders_strictly_valid_manifests(kueue: bool) -> None:
    docs = render_manifests(make_cpu_spec(), JOB_ID, make_settings(kueue_queue="q" if kueue else None, host_paths=["/data/rljob"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    for doc in docs:
        validate_strict(doc)


@pytest.mark.parametrize("kueue", [False, True])
def test_an_eval_job_is_queued_onto_the_eval_pool_and_says_what_it_is(kueue: bool) -> None:
    """Queued, an eval job selects and tolerates the eval pool and nothing of a TPU; without Kueue it is a plain cpu
    job. Its Job, pods and ConfigMap say eval, which training job it evaluates, and its suite and checkpoint."""
    docs = render_manifests(make_eval_spec(), JOB_ID, make_settings(kueue_queue="q" if kueue else None))
    for doc in docs:
        validate_strict(doc)
    config_map, job = docs
    for meta in (config_map["metadata"], job["metadata"], job["spec"]["template"]["metadata"]):
        assert (meta["labels"]["rljob.dev/kind"], meta["labels"]["rljob.dev/eval-of"]) == ("eval", "rl-trained00001")
        assert (meta["annotations"]["rljob.dev/eval-suite"], meta["annotations"]["rljob.dev/eval-checkpoint"]) == ("arith", "export")
    pod = _pod(job)
    assert "google.com/tpu" not in str(job) and "gke-tpu" not in str(job)
    if kueue:
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q" and job["spec"]["suspend"] is True
        assert pod["nodeSelector"] == {"rljob.dev/capacity": "cpu-eval"}
        assert pod["tolerations"] == [{"key": "rljob.dev/capacity", "operator": "Equal", "value": "cpu-eval", "effect": "NoSchedule"}]
    else:
        assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"] and "suspend" not in job["spec"]
        assert "nodeSelector" not in pod and "tolerations" not in pod
    # A training job says train and names no evaluation; an eval of a base model names no training job.
    for train in render_manifests(make_spec(), JOB_ID, make_settings(kueue_queue="q")):
        assert train["metadata"]["labels"]["rljob.dev/kind"] == "train" and "rljob.dev/eval-of" not in train["metadata"]["labels"]
        assert set(train["metadata"]["annotations"]) == {"rljob.dev/spec-hash"}
    base = render_manifests(make_eval_spec(of_job=None), JOB_ID, make_settings())[1]
    assert "rljob.dev/eval-of" not in base["metadata"]["labels"]
    assert base["metadata"]["annotations"]["rljob.dev/eval-checkpoint"] == "base"


def test_an_eval_job_on_a_tpu_slice_is_a_tpu_pod_not_an_eval_pool_one() -> None:
    """The JAX engine's eval jobs hold a TPU slice as a training job does: the slice's selectors and chips, never the
    cpu eval pool's selector or toleration (Kueue admits it into a TPU flavor)."""
    hardware = {"accelerator": "v6e-1", "chips_per_vm": 1, "rollout_engine": "jax"}
    docs = render_manifests(make_eval_spec(hardware=hardware), JOB_ID, make_settings(kueue_queue="q"))
    for doc in docs:
        validate_strict(doc)
    job = docs[1]
    pod = _pod(job)
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["google.com/tpu"] == "1"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert pod["nodeSelector"]["rljob.dev/capacity"] == "on-demand" and "cpu-eval" not in str(pod.get("tolerations"))
    assert job["metadata"]["labels"]["rljob.dev/kind"] == "eval" and job["spec"]["suspend"] is True


def test_cpu_job_is_a_plain_job_sized_by_settings() -> None:
    settings = make_settings(
        cpu_job_cpu="3", cpu_job_memory="12Gi", cpu_job_shm_size="2Gi", node_pool="tpu-pool", host_paths=["/data/rljob"]
    )
    job = render_manifests(make_cpu_spec(), JOB_ID, settings)[1]
    pod = _pod(job)
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "3", "memory": "12Gi"}, "limits": {"cpu": "3", "memory": "12Gi"}}
    assert "nodeSelector" not in pod and "tolerations" not in pod and "hostNetwork" not in pod
    assert "google.com/tpu" not in str(job) and "gke-tpu" not in str(job)
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    # The same failure semantics as a TPU job: 65/70/77 fail at once, disruptions do not count.
    assert job["spec"]["podFailurePolicy"] == render_manifests(make_spec(), JOB_ID, make_settings())[1]["spec"]["podFailurePolicy"]
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (1, 1) and "completionMode" not in job["spec"]


def test_local_paths_need_a_mounted_node_directory() -> None:
    with pytest.raises(ManifestError, match=r"model.source=/data/rljob/tiny/model is a local path.*RLJOB_K8S_HOST_PATHS"):
        render_manifests(make_cpu_spec(), JOB_ID, make_settings())
    with pytest.raises(ManifestError, match=r"output=/data/rljob/runs is a local path.*mounted node directories: /data/rljob/tiny"):
        render_manifests(make_cpu_spec(), JOB_ID, make_settings(host_paths=["/data/rljob/tiny"]))
    pod = _pod(render_manifests(make_cpu_spec(), JOB_ID, make_settings(host_paths=["/data/rljob", "/srv"]))[1])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/data/rljob"]]["hostPath"] == {"path": "/data/rljob", "type": "Directory"}
    assert volumes[mounts["/srv"]]["hostPath"] == {"path": "/srv", "type": "Directory"}
    # gs:// and Hub locations need nothing mounted.
    assert render_manifests(make_spec(), JOB_ID, make_settings())[1]["kind"] == "Job"


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu_job_cpu", "two"), ("cpu_job_memory", "8 GB"), ("host_paths", ["relative/dir"]), ("host_paths", ["/data/../etc"])],
)
def test_settings_refuse_unusable_cpu_sizes_and_host_paths(field: str, value: object) -> None:
    with pytest.raises(ValueError):
        make_settings(**{field: value})


def test_strict_validation_catches_an_unknown_field() -> None:
    # Guard the guard: the validator really is strict about what we would get wrong.
    job = render_manifests(make_spec(), JOB_ID, make_settings())[1]
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strict(broken)


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "JobSet":
        return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def test_single_host_job_has_what_gke_tpus_need() -> None:
    cm, job = render_manifests(make_spec(), JOB_ID, make_settings())
    spec, pod = job["spec"], _pod(job)
    container = pod["containers"][0]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4",
        "node.kubernetes.io/instance-type": "ct6e-standard-8t",  # the single-host 8-chip VM
        "rljob.dev/capacity": "on-demand",  # keeps it in the on-demand Kueue flavor (capacity.py)
    }
    assert container["resources"]["limits"]["google.com/tpu"] == "8"
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "rljob-trainer"
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0 and spec["backoffLimit"] >= 1
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob"
    assert rules[1]["onExitCodes"]["values"] == sorted(NON_RETRYABLE_EXIT_CODES)
    # The HF token only ever comes from a Secret, never in argv or a literal value.
    hf = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert set(hf) == {"name", "valueFrom"} and "secretKeyRef" in hf["valueFrom"]
    assert container["command"][-2:] == ["--job-id", JOB_ID] and "/etc/rljob/spec.json" in container["command"]
    assert not pod.get("hostNetwork")
    assert "suspend" not in spec  # no Kueue configured


def test_labels_and_annotations() -> None:
    spec = make_spec(team="ML Research!", labels={"cost-center": "rl"})
    job = render_manifests(spec, JOB_ID, make_settings(kueue_queue="tpu-queue"))[1]
    labels, annotations = job["metadata"]["labels"], job["metadata"]["annotations"]
    assert labels["app.kubernetes.io/managed-by"] == "rljob"
    assert labels["app.kubernetes.io/instance"] == labels["rljob.dev/job-id"] == JOB_ID
    assert labels["rljob.dev/team"] == "ML-Research"  # coerced into a valid label value
    assert labels["rljob.dev/phase"] == "launching" and labels["cost-center"] == "rl"
    assert labels["kueue.x-k8s.io/queue-name"] == "tpu-queue" and job["spec"]["suspend"] is True
    assert annotations["rljob.dev/spec-hash"] == spec.content_hash()
    assert _pod(job) and job["spec"]["template"]["metadata"]["labels"]["rljob.dev/job-id"] == JOB_ID


def test_jobset_shape() -> None:
    jobset = render_manifests(make_spec("v6e-16", 4), JOB_ID, make_settings(kueue_queue="q"))[1]
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-nodepool"
    (rjob,) = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    job_spec = rjob["template"]["spec"]
    assert job_spec["parallelism"] == job_spec["completions"] == 4 and job_spec["completionMode"] == "Indexed"
    pod = _pod(jobset)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"
    assert jobset["spec"]["suspend"] is True and jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert jobset["spec"]["failurePolicy"]["rules"][0]["action"] == "FailJobSet"


def test_a_multi_host_pod_is_never_retried_in_place() -> None:
    """JobSet v0.12.0's pod webhook refuses every follower of a leader retried in place (its Failed pod counts as
    a second leader; jobset 1dc6eec9, unreleased): any pod failure of a slice, a disruption included, fails the
    child Job at once and the JobSet restarts the whole slice. Single-host Jobs keep the in-place retry."""
    jobset = render_manifests(make_spec("v6e-16", 4), JOB_ID, make_settings())[1]
    child = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert child["backoffLimit"] == 0
    assert [r["action"] for r in child["podFailurePolicy"]["rules"]] == ["FailJob"]
    assert "onPodConditions" not in child["podFailurePolicy"]["rules"][0]
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] >= 1
    # The child Job's failure reason on a disruption is BackoffLimitExceeded, which the no-retry rule leaves to a restart.
    assert "BackoffLimitExceeded" not in jobset["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"]
    job = render_manifests(make_spec(), JOB_ID, make_settings())[1]
    assert [r["action"] for r in job["spec"]["podFailurePolicy"]["rules"]] == ["Ignore", "FailJob"]


def test_render_yaml_round_trips_for_kubectl() -> None:
    text = render_manifests_yaml(make_spec(), JOB_ID, make_settings())
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["ConfigMap", "Job"]
    assert render_manifests(make_spec(), None, make_settings())[1]["metadata"]["name"].startswith("rl-")


@pytest.mark.parametrize(
    ("spec_kwargs", "settings_kwargs", "error", "match"),
    [
        (dict(accelerator="v4-8", chips_per_vm=4), {}, UnsupportedAccelerator, "v6e-8"),
        (dict(accelerator="v6e-16", chips_per_vm=8), {}, ManifestError, "chips_per_vm: 4"),
        (dict(), dict(image=""), ManifestError, "RLJOB_K8S_IMAGE"),
    ],
)
def test_refuses_what_cannot_run(spec_kwargs, settings_kwargs, error, match) -> None:
    # The spec itself refuses such hardware at submit (tests/trainer/contract/spec/test_spec_limits.py); built
    # without validation here, so the adapter's own guard is what answers.
    spec = make_spec()
    spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(update=spec_kwargs)})
    with pytest.raises(error, match=match):
        render_manifests(spec, JOB_ID, make_settings(**settings_kwargs))


@pytest.mark.parametrize("job_id", ["Rl-UPPER", "rl-" + "x" * 61, "rl_underscore"])
def test_names_are_dns_labels_and_length_checked(job_id: str) -> None:
    with pytest.raises(ManifestError, match="DNS-1123"):
        render_manifests(make_spec(), job_id, make_settings())


def test_jobset_names_leave_room_for_pod_hostnames() -> None:
    with pytest.raises(ManifestError, match="at most 40"):
        render_manifests(make_spec("v6e-16", 4), "rl-" + "a" * 40, make_settings())


def test_accelerator_table_is_consistent() -> None:
    for name, tpu in ACCELERATORS.items():
        generation, count = name.split("-")
        chips = int(count) // 2 if generation in ("v5p", "tpu7x") else int(count)  # v5p and TPU7x count TensorCores
        assert tpu.chips == chips, name
        dims = [int(d) for d in tpu.topology.split("x")]
        product = 1
        for d in dims:
            product *= d
        assert product == chips, name
    v6e = {f"v6e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)}
    assert {*v6e, "v5p-8", "v5e-1", "v5e-4", "v5e-8", "tpu7x-8", "tpu7x-16"} <= set(ACCELERATORS)
    assert set(ACCELERATORS) == set(TPU_SLICES)  # every slice a spec may ask for can be scheduled on GKE
