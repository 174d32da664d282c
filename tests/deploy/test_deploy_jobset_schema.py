"""Every JobSet rljob renders, checked as the API server and the JobSet webhook would check it at create.

Three layers, on the whole object (apiVersion, kind, metadata, spec):
1. the openAPI schema of JobSet v1alpha2 from the upstream CRD, kubernetes-sigs/jobset tag v0.12.0
   (tests/deploy/schemas/jobset-v0.12.0-v1alpha2.json, see the README there), closed the way the Kueue
   schemas are (`strict_crd_schema` of harness/crd_schemas.py: an unknown field fails instead of being pruned);
2. the Kubernetes schema of what the CRD types only as `object`: the JobSet's ObjectMeta (name, labels
   and annotations as apimachinery's ValidateObjectMeta checks them) and each replicatedJob's template as
   a batch/v1 Job (kubernetes-validate --strict for GKE_MINOR);
3. the rules the schema cannot express: `ValidateCreate`/`Default`/`ValidateUpdate` in
   `pkg/webhooks/jobset_webhook.go` at v0.12.0 (commit f22e565a), and the spec-level CEL rule of the CRD,
   re-implemented below with the feature gates at their v0.12.0 defaults (`pkg/features/features.go`:
   RestartJob, InPlaceRestart and ElasticJobSet off).

What this is not: a real API server (CEL `self == oldSelf` immutability rules, defaulting order, other
webhooks such as Kueue's are not run). The JobSets come from the goldens (tests/k8s/golden/) and from
build_trainer_jobset for every multi-host slice x every capacity x Kueue on/off.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from harness.crd_schemas import strict_crd_schema
from service.adapters.k8s import names
from service.adapters.k8s.accelerators import ACCELERATORS
from service.adapters.k8s.manifests import build_trainer_jobset
from service.adapters.k8s.settings import K8sSettings
from tests.deploy.deploy_support import GKE_MINOR, ROOT
from trainer.contract import JobSpec

JOBSET_TAG = "v0.12.0"
SCHEMA_FILE = Path(__file__).parent / "schemas" / f"jobset-{JOBSET_TAG}-v1alpha2.json"
GOLDEN = ROOT / "tests" / "k8s" / "golden"
CAPACITIES = ["on-demand", "spot", "flex-start", "reservation"]
MULTI_HOST = sorted(name for name, hw in ACCELERATORS.items() if hw.multi_host)
JOB_ID = "rl-0123456789ab"


def _jobset_validator() -> jsonschema.Draft7Validator:
    schema = strict_crd_schema(copy.deepcopy(json.loads(SCHEMA_FILE.read_text())["JobSet"]))
    assert isinstance(schema, dict) and schema["properties"]["metadata"] == {"type": "object"}
    return jsonschema.Draft7Validator(schema)


JOBSET_SCHEMA = _jobset_validator()


# --- ObjectMeta, as k8s.io/apimachinery/pkg/api/validation ValidateObjectMeta checks it ------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TOTAL_ANNOTATION_BYTES = 256 * 1024


def _dns1123_subdomain(v: str) -> bool:
    return len(v) <= 253 and bool(_DNS1123_SUBDOMAIN.match(v))


def _dns1035_label(v: str) -> bool:
    return len(v) <= 63 and bool(_DNS1035_LABEL.match(v))


def _qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not (prefix and _dns1123_subdomain(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def object_meta_errors(meta: dict[str, Any], where: str) -> list[str]:
    errors = []
    if not _dns1123_subdomain(meta.get("name", "")):  # a custom resource's name: a DNS-1123 subdomain
        errors.append(f"{where}.name {meta.get('name')!r} is not a DNS-1123 subdomain")
    if "namespace" in meta and not (len(meta["namespace"]) <= 63 and _DNS1123_LABEL.match(meta["namespace"])):
        errors.append(f"{where}.namespace {meta['namespace']!r} is not a DNS-1123 label")
    for key, value in meta.get("labels", {}).items():
        if not _qualified_name(key):
            errors.append(f"{where}.labels: key {key!r} is not a qualified name")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(f"{where}.labels[{key}]: {value!r} is not a label value")
    annotations = meta.get("annotations", {})
    errors += [f"{where}.annotations: key {k!r} is not a qualified name" for k in annotations if not _qualified_name(k)]
    if sum(len(k) + len(v) for k, v in annotations.items()) > _TOTAL_ANNOTATION_BYTES:
        errors.append(f"{where}.annotations: more than 256 KiB in total")
    return errors


# --- pkg/webhooks/jobset_webhook.go at v0.12.0 ------------------------------------------------------------

# validOnJobFailureReasons: the batch/v1 JobReason* constants the webhook accepts.
VALID_ON_JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded", "PodFailurePolicy"}
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # ruleNameFmt; length 1..128
RESTART_JOB_ACTIONS = {"RestartJob", "RestartJobAndIgnoreMaxRestarts"}  # need the RestartJob gate (off)
MAX_INT32 = 2**31 - 1


def webhook_default(js: dict[str, Any]) -> dict[str, Any]:
    """The CRD's defaults (groupName "default", replicas 1) and jobSetWebhook.Default."""
    js = copy.deepcopy(js)
    spec = js["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs", []):
        rjob.setdefault("groupName", "default")
        rjob.setdefault("replicas", 1)
        rjob["template"].setdefault("spec", {}).setdefault("completionMode", "Indexed")
        pod_spec = rjob["template"]["spec"].setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate(spec.get("failurePolicy", {}).get("rules", [])):
        if not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"
    return js


def webhook_create_errors(js: dict[str, Any]) -> list[str]:
    """jobSetWebhook.ValidateCreate (after Default, as the API server runs them), plus the spec's CEL rule
    "StartupPolicy and DependsOn APIs are mutually exclusive" from the CRD."""
    js = webhook_default(js)
    name, spec, errors = js["metadata"]["name"], js["spec"], []
    rjobs = spec.get("replicatedJobs", [])
    failure_policy = spec.get("failurePolicy") or {}
    if failure_policy.get("restartStrategy") == "InPlaceRestart":
        errors.append("InPlaceRestart restart strategy needs the InPlaceRestart feature gate")
    if rjobs and rjobs[0].get("dependsOn") is not None:
        errors.append("DependsOn can't be set for the first ReplicatedJob")
    subdomain = spec["network"].get("subdomain", "")
    if subdomain and not (_dns1123_subdomain(subdomain) and _dns1035_label(subdomain)):
        errors.append(f"spec.network.subdomain {subdomain!r}: must be a DNS-1123 subdomain and a DNS-1035 label (<= 63)")
    if "managedBy" in spec:
        manager = spec["managedBy"]
        domain, _, path = manager.partition("/")
        if not (path and _dns1123_subdomain(domain)) or len(manager) > 63:
            errors.append(f"spec.managedBy {manager!r}: must be a domain-prefixed path of at most 63 characters")
    seen: set[str] = set()
    for i, rjob in enumerate(rjobs):
        seen.add(rjob["name"])
        job_spec = rjob["template"]["spec"]
        if job_spec.get("parallelism", 1) * rjob["replicas"] > MAX_INT32:
            errors.append(f"replicatedJobs[{i}]: replicas x parallelism exceeds {MAX_INT32}")
        if not _dns1035_label(rjob["groupName"]):
            errors.append(f"replicatedJobs[{i}].groupName {rjob['groupName']!r} is not a DNS-1035 label")
        # placement.GenJobName / GenPodName: <jobset>-<rjob>-<jobIndex>[-<podIndex>], checked at the largest
        # indexes; the pod name gets the 5 characters of the Job controller's random suffix.
        longest_job = f"{name}-{rjob['name']}-{rjob['replicas'] - 1}"
        if not _dns1035_label(longest_job):
            errors.append(f"replicatedJobs[{i}]: generated Job name {longest_job!r} is not a DNS-1035 label of <= 63")
        if job_spec.get("completionMode") == "Indexed" and job_spec.get("completions") is not None:
            longest_pod = f"{longest_job}-{job_spec['completions'] - 1}-abcde"
            if not _dns1035_label(longest_pod):
                errors.append(f"replicatedJobs[{i}]: generated pod name {longest_pod!r} is not a DNS-1035 label of <= 63")
        for dep in rjob.get("dependsOn") or []:
            if dep["name"] not in seen - {rjob["name"]}:
                errors.append(f"replicatedJob {rjob['name']} cannot depend on {dep['name']}")
    names_ = {r["name"] for r in rjobs}
    errors += [
        f"successPolicy target {t!r} is no replicatedJob" for t in spec["successPolicy"].get("targetReplicatedJobs", []) if t not in names_
    ]
    rules = failure_policy.get("rules", [])
    if any(r["action"] in RESTART_JOB_ACTIONS for r in rules):
        errors.append("RestartJob actions need the RestartJob feature gate (off by default)")
    for rule in rules:
        if not 1 <= len(rule["name"]) <= 128 or not RULE_NAME.match(rule["name"]):
            errors.append(f"failurePolicy rule name {rule['name']!r} is invalid")
        errors += [f"failurePolicy target {t!r} is no replicatedJob" for t in rule.get("targetReplicatedJobs", []) if t not in names_]
        errors += [
            f"onJobFailureReasons: {r!r} is not a Job failure reason"
            for r in rule.get("onJobFailureReasons", [])
            if r not in VALID_ON_JOB_FAILURE_REASONS
        ]
    rule_names = [r["name"] for r in rules]
    errors += [f"failurePolicy rule name {n!r} is not unique" for n in sorted(set(rule_names)) if rule_names.count(n) > 1]
    if "coordinator" in spec:
        coord = spec["coordinator"]
        target = next((r for r in rjobs if r["name"] == coord.get("replicatedJob")), None)
        if target is None or not 0 <= coord.get("jobIndex", 0) < target["replicas"]:
            errors.append("coordinator names no existing replicatedJob/job index")
        elif not 0 <= coord.get("podIndex", 0) < target["template"]["spec"].get("completions", 0):
            errors.append("coordinator pod index out of range")
    if spec["startupPolicy"]["startupPolicyOrder"] == "InOrder" and any("dependsOn" in r for r in rjobs):
        errors.append("StartupPolicy and DependsOn APIs are mutually exclusive")
    return errors


# Pod template fields ValidateUpdate lets change while the JobSet is (or is becoming) suspended: what Kueue
# writes at admission (its podset info) and scheduling gates.
_MUTABLE_WHILE_SUSPENDED = (
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def webhook_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """jobSetWebhook.ValidateUpdate with ElasticJobSet off: replicatedJobs and managedBy are immutable,
    except the pod template fields above when the old or the new JobSet is suspended."""
    munged = copy.deepcopy(new["spec"]["replicatedJobs"])
    if old["spec"].get("suspend") or new["spec"].get("suspend"):
        old_by_name = {r["name"]: r for r in old["spec"]["replicatedJobs"]}
        for rjob in munged:
            if rjob["name"] not in old_by_name:
                continue
            old_tpl, new_tpl = old_by_name[rjob["name"]]["template"]["spec"]["template"], rjob["template"]["spec"]["template"]
            for part, key in _MUTABLE_WHILE_SUSPENDED:
                new_tpl.setdefault(part, {}).pop(key, None)
                if key in old_tpl.get(part, {}):
                    new_tpl[part][key] = old_tpl[part][key]
            for part in ("metadata", "spec"):
                if not new_tpl[part] and part not in old_tpl:
                    del new_tpl[part]
    errors = []
    if munged != old["spec"]["replicatedJobs"]:
        errors.append("spec.replicatedJobs: field is immutable")
    if new["spec"].get("managedBy") != old["spec"].get("managedBy"):
        errors.append("spec.managedBy: field is immutable")
    return errors


# --- the checks ---------------------------------------------------------------------------------------------


def jobset_errors(js: dict[str, Any]) -> list[str]:
    """All three layers; an empty list means the API server and the JobSet webhook would accept it."""
    errors = [f"schema: {'.'.join(map(str, e.path))}: {e.message[:300]}" for e in JOBSET_SCHEMA.iter_errors(js)]
    if js.get("apiVersion") != "jobset.x-k8s.io/v1alpha2" or js.get("kind") != "JobSet":
        errors.append(f"not a jobset.x-k8s.io/v1alpha2 JobSet: {js.get('apiVersion')} {js.get('kind')}")
    try:
        return errors + _meta_and_template_errors(js) + webhook_create_errors(js)
    except (KeyError, TypeError, AttributeError) as e:  # too malformed for the later layers
        return errors or [f"malformed: {e!r}"]


def _meta_and_template_errors(js: dict[str, Any]) -> list[str]:
    errors = object_meta_errors(js["metadata"], "metadata")
    for rjob in js["spec"]["replicatedJobs"]:
        template = rjob["template"]
        job_name = f"{js['metadata']['name']}-{rjob['name']}-0"
        as_job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "namespace": js["metadata"].get("namespace", "default"), **template.get("metadata", {})},
            "spec": template["spec"],
        }
        try:
            kubernetes_validate.validate(as_job, GKE_MINOR, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"replicatedJobs[{rjob['name']}] as batch/v1 Job: {'.'.join(map(str, e.path))}: {e.message[:300]}")
        errors += object_meta_errors(
            {"name": job_name, **template.get("metadata", {})}, f"replicatedJobs[{rjob['name']}].template.metadata"
        )
        pod_meta = template["spec"]["template"].get("metadata", {})
        errors += object_meta_errors({"name": f"{job_name}-0-abcde", **pod_meta}, f"replicatedJobs[{rjob['name']}] pod template metadata")
    return errors


def _golden_jobsets() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(GOLDEN.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "JobSet":
                out[path.name] = doc
    return out


GOLDEN_JOBSETS = _golden_jobsets()


def _spec(accelerator: str, capacity: str) -> JobSpec:
    hw = ACCELERATORS[accelerator]
    return JobSpec.model_validate(
        {
            "name": "tutorial-llama31-8b",
            "team": "ml-research",
            "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
            "dataset": {"name": "openai/gsm8k"},
            "grpo": {"num_batches": 50, "num_test_batches": 10},
            "hardware": {
                "accelerator": accelerator,
                "chips_per_vm": hw.chips_per_vm,
                "capacity": capacity,
                "reservation": "tpu-res-1" if capacity == "reservation" else None,
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": -1,
            },
            "output": "gs://example-bucket/rljob",
        }
    )


def _settings(kueue: bool) -> K8sSettings:
    return K8sSettings(_env_file=None, image="x", **({"kueue_queue": "q"} if kueue else {}))


def _live(accelerator: str, capacity: str, kueue: bool) -> dict[str, Any]:
    return build_trainer_jobset(_spec(accelerator, capacity), JOB_ID, _settings(kueue))


def test_the_goldens_hold_jobsets():
    assert {"v6e-16.yaml", "v6e-16-flex-start.yaml"} <= set(GOLDEN_JOBSETS), sorted(GOLDEN_JOBSETS)


@pytest.mark.parametrize("golden", sorted(GOLDEN_JOBSETS))
def test_golden_jobset_is_accepted(golden: str) -> None:
    errors = jobset_errors(GOLDEN_JOBSETS[golden])
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("kueue", [False, True], ids=["no-kueue", "kueue"])
@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("accelerator", MULTI_HOST)
def test_every_rendered_jobset_is_accepted(accelerator: str, capacity: str, kueue: bool) -> None:
    js = _live(accelerator, capacity, kueue)
    errors = jobset_errors(js)
    assert not errors, "\n".join(errors)
    # Under Kueue the JobSet starts suspended: that is also what lets Kueue write the flavor's node
    # selector and tolerations into the pod template at admission (ValidateUpdate, below).
    assert js["spec"].get("suspend", False) is kueue


def test_the_longest_allowed_jobset_name_fits_every_slice():
    """names.MAX_JOBSET_NAME against the webhook's generated-name rules, at the largest slice."""
    for accelerator in MULTI_HOST:
        js = _live(accelerator, "on-demand", False)
        js["metadata"]["name"] = "r" * names.MAX_JOBSET_NAME
        assert not [e for e in webhook_create_errors(js) if "generated" in e], accelerator
        js["metadata"]["name"] += "r" * 8  # and the rule is tight enough to notice 8 more characters
        assert [e for e in webhook_create_errors(js) if "generated pod name" in e], accelerator


def test_kueue_admission_is_an_allowed_update():
    """Kueue admits a JobSet by writing its flavor's node labels and tolerations into the pod template and
    unsuspending it; ValidateUpdate allows that only because the JobSet was created suspended."""
    for kueue in (True, False):
        old = _live("v6e-16", "spot", kueue)
        new = copy.deepcopy(old)
        new["spec"]["suspend"] = False
        pod = new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = {**pod.get("nodeSelector", {}), "example.com/flavor": "x"}
        pod["tolerations"] = [*pod.get("tolerations", []), {"key": "example.com/flavor", "operator": "Exists"}]
        assert bool(webhook_update_errors(old, new)) is not kueue, f"kueue={kueue}"
    old = _live("v6e-16", "spot", True)
    new = copy.deepcopy(old)
    new["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 1  # not a pod template field
    assert webhook_update_errors(old, new) == ["spec.replicatedJobs: field is immutable"]


def _set(path: str, value: Any) -> Any:
    """A mutation setting `path` (dot-separated; a key holding dots or slashes goes last, after a '|')."""

    def mutate(js: dict[str, Any]) -> None:
        head, _, key = path.partition("|")
        *parents, last = head.split(".") + ([key] if key else [])
        node: Any = js
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value

    return mutate


# Each mutation must be refused, and by the layer named: proof the checks above can fail.
VIOLATIONS = {
    "unknown field under spec": (_set("spec.restartPolicy", "Never"), "schema"),
    "unknown field in a failure rule": (_set("spec.failurePolicy.rules.0.onJobFailureReason", ["x"]), "schema"),
    "unknown field in pod template metadata (CRD prunes it)": (
        _set("spec.replicatedJobs.0.template.spec.template.metadata.generateName", "x-"),
        "schema",
    ),
    "wrong type": (_set("spec.replicatedJobs.0.replicas", "1"), "schema"),
    "enum": (_set("spec.failurePolicy.rules.0.action", "Restart"), "schema"),
    "apiVersion": (_set("apiVersion", "jobset.x-k8s.io/v1alpha1"), "not a jobset"),
    "unknown field in the pod spec": (_set("spec.replicatedJobs.0.template.spec.template.spec.nodeSelectr", {}), "as batch/v1 Job"),
    "bad label value": (_set("metadata.labels|rljob.dev/team", "ml research"), "is not a label value"),
    "bad annotation key": (_set("metadata.annotations|a b", "x"), "is not a qualified name"),
    "name too long for pod names": (_set("metadata.name", "r" * 48), "generated pod name"),
    "name too long for job names": (_set("metadata.name", "r" * 58), "generated Job name"),
    "name not DNS-1035": (_set("metadata.name", "0rl-abc"), "is not a DNS-1035 label"),
    "replicatedJob name not DNS-1035": (_set("spec.replicatedJobs.0.name", "Slice"), "is not a DNS-1035 label"),
    "groupName": (_set("spec.replicatedJobs.0.groupName", "g_1"), "groupName"),
    "failure rule name": (_set("spec.failurePolicy.rules.0.name", "retry-never"), "rule name 'retry-never' is invalid"),
    "failure reason": (_set("spec.failurePolicy.rules.0.onJobFailureReasons", ["Evicted"]), "is not a Job failure reason"),
    "failure rule target": (_set("spec.failurePolicy.rules.0.targetReplicatedJobs", ["workers"]), "failurePolicy target"),
    "RestartJob without its gate": (_set("spec.failurePolicy.rules.0.action", "RestartJob"), "RestartJob feature gate"),
    "InPlaceRestart without its gate": (_set("spec.failurePolicy.restartStrategy", "InPlaceRestart"), "InPlaceRestart"),
    "dependsOn on the first replicatedJob": (
        _set("spec.replicatedJobs.0.dependsOn", [{"name": "slice", "status": "Ready"}]),
        "first ReplicatedJob",
    ),
    "subdomain": (_set("spec.network.subdomain", "a.b"), "subdomain"),
    "managedBy": (_set("spec.managedBy", "kueue"), "managedBy"),
    "successPolicy target": (_set("spec.successPolicy", {"operator": "All", "targetReplicatedJobs": ["x"]}), "successPolicy"),
    "coordinator": (_set("spec.coordinator", {"replicatedJob": "slice", "jobIndex": 0, "podIndex": 4}), "coordinator pod index"),
}


def _dup_rule(js: dict[str, Any]) -> None:
    rules = js["spec"]["failurePolicy"]["rules"]
    rules.append(copy.deepcopy(rules[0]))


VIOLATIONS["duplicate failure rule names"] = (_dup_rule, "is not unique")


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_each_check_can_fail(case: str) -> None:
    mutate, expected = VIOLATIONS[case]
    js = _live("v6e-16", "on-demand", True)
    before = jobset_errors(js)  # empty, unless a test above fails too
    assert not any(expected in e for e in before), before
    mutate(js)
    errors = jobset_errors(js)
    assert errors, f"{case}: accepted"
    assert any(expected in e for e in errors), f"{case}: refused for another reason:\n" + "\n".join(errors)
