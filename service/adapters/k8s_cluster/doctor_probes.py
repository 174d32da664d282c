"""`rljob doctor`'s probes: what Kueue and JobSet do to an object rljob creates, tried on the cluster itself.

- admission: a server-side dry-run create (dryRun=All: admitted, never stored) of a suspended probe Job, and
  of a JobSet when JobSets are in use. Kueue's and JobSet's mutating webhooks fail closed (failurePolicy Fail),
  so with either controller down the API server refuses every create with `failed calling webhook "..."`;
  the line names the controller and how to look at it.
- queued probe: a suspended Job (and JobSet) labelled with the team's queue, really created, must get a Kueue
  Workload within PROBE_WORKLOAD_WAIT_S, then is deleted. Kueue ignores it when its Configuration's
  managedJobsNamespaceSelector does not select the namespace (always respected since Kueue 0.19) or when
  integrations.frameworks lacks its kind; the job would then stay suspended forever. The probe asks for an
  extended resource no node has and no ClusterQueue covers, so it is never admitted nor scheduled.
- the LocalQueue `default`: Kueue's job webhook gives every Job without a queue-name to it (always on since
  Kueue 0.19), which captures rljob's unqueued cpu Jobs.
- the manager's Configuration (ConfigMap kueue-system/kueue-manager-config), read where RBAC allows.

Only the CLI runs these (run_doctor(probes=True)): the service's start-up self-check creates nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import yaml
from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.client import K8sClient, api_status, is_missing_object
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.kueue import JOB_UID_LABEL
from service.adapters.k8s.manifests import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from service.adapters.k8s.names import KUEUE_QUEUE_LABEL
from service.adapters.k8s.settings import K8sSettings
from service.domain.self_check import CheckLine

from .reads import ClusterReads

PROBE_WORKLOAD_WAIT_S = 10.0  # Kueue's job reconciler creates a Workload within a second on a healthy cluster
PROBE_POLL_S = 0.25
PROBE_RESOURCE = "rljob.dev/doctor-probe"  # no node offers it and no ClusterQueue covers it
KUEUE_SYSTEM, MANAGER_CONFIGMAP, MANAGER_CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
DEFAULT_LOCAL_QUEUE = "default"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
FRAMEWORKS = {"Job": "batch/job", "JobSet": "jobset.x-k8s.io/jobset"}
_WEBHOOK = re.compile(r'failed calling webhook "(?P<hook>[^"]+)".*?https://(?P<service>[^./"]+)\.(?P<ns>[^./"]+)\.svc')
# A webhook's Service -> the controller serving it (Kueue's and JobSet's released manifests).
_CONTROLLERS = {
    "kueue-webhook-service": ("Kueue", "kueue-controller-manager"),
    "jobset-webhook-service": ("JobSet", "jobset-controller-manager"),
}


def probe_job(name: str, queue: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "rljob-doctor", **({KUEUE_QUEUE_LABEL: queue} if queue else {})}
    resources = {PROBE_RESOURCE: "1"}
    pod = {
        "metadata": {"labels": {"app.kubernetes.io/managed-by": "rljob-doctor"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "probe", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }
    spec = {"suspend": True, "backoffLimit": 0, "activeDeadlineSeconds": 60, "template": pod}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels}, "spec": spec}


def probe_jobset(name: str, queue: str | None) -> dict[str, Any]:
    job = probe_job(name, None)
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": job["metadata"]["labels"] | ({KUEUE_QUEUE_LABEL: queue} if queue else {})},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "probe", "replicas": 1, "template": {"spec": job["spec"]}}]},
    }


def _probe_name() -> str:
    return f"rljob-doctor-probe-{uuid.uuid4().hex[:8]}"


def _create(client: K8sClient, kind: str, body: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    extra = {"dry_run": "All"} if dry_run else {}
    what = f"create {'(dry run) ' if dry_run else ''}{kind} {client.namespace}/{body['metadata']['name']}"
    if kind == "Job":
        obj = client.call(what, client.batch.create_namespaced_job, client.namespace, body, **extra)
        return cast(dict[str, Any], client.batch.api_client.sanitize_for_serialization(obj))  # the client's plain-JSON form
    created = client.call(
        what, client.custom.create_namespaced_custom_object, JOBSET_GROUP, JOBSET_VERSION, client.namespace, JOBSET_PLURAL, body, **extra
    )
    return cast(dict[str, Any], created)  # a custom object: untyped JSON


def _body(exc: BaseException) -> str:
    """The API server's answer: an ApiException's body, also under K8sClient's ApiUnavailable (a 500 is retried)."""
    for e in (exc, exc.__cause__):
        if isinstance(e, ApiException) and e.body:
            return str(e.body)
    return str(exc)


def _refusal(kind: str, exc: BaseException) -> CheckLine:
    """Why the API server refused the probe: a webhook that cannot be called names its controller."""
    body = _body(exc)
    name = f"admission {kind}"
    hit = _WEBHOOK.search(_first_cause(body))
    if hit:
        service, ns = hit["service"], hit["ns"]
        controller, deployment = _CONTROLLERS.get(service, (f"the controller behind {service}", "<its deployment>"))
        return CheckLine(
            "fail",
            name,
            f"the API server refuses every {kind} create: webhook {hit['hook']} of {controller} cannot be called "
            f"(failurePolicy Fail; {_first_cause(body)})",
            f"{controller}'s controller is down or not ready: kubectl -n {ns} get pods,endpoints {service}; "
            f"kubectl -n {ns} logs deploy/{deployment}; until it answers rljob can start no job",
        )
    status = api_status(exc) or api_status(exc.__cause__ or exc)
    if status == 403:
        return CheckLine("warn", name, f"cannot tell: creating a {kind} is forbidden for this identity", "see the rbac lines")
    return CheckLine(
        "fail" if status and status < 500 else "warn", name, f"a dry-run create was refused: {_first_cause(body)}", "see the message"
    )


def _first_cause(body: str) -> str:
    match = re.search(r'"message":\s*"((?:[^"\\]|\\.)*)"', body)
    return (match.group(1).replace('\\"', '"') if match else body.splitlines()[0] if body else "")[:400]


def admission_checks(client: K8sClient, settings: K8sSettings, jobsets: bool, queue: str | None) -> list[CheckLine]:
    """Dry-run creates of a probe Job (and JobSet): every mutating/validating webhook is called, nothing is stored."""
    lines = []
    for kind, build in (("Job", probe_job), ("JobSet", probe_jobset)):
        if kind == "JobSet" and not jobsets:
            continue
        try:
            _create(client, kind, build(_probe_name(), queue), dry_run=True)
        except (ApiException, K8sBackendError) as exc:
            lines.append(_refusal(kind, exc))
            continue
        lines.append(CheckLine("ok", f"admission {kind}", "a dry-run create passed every webhook (Kueue's and JobSet's answer)"))
    return lines


def default_queue_check(client: K8sClient, settings: K8sSettings, kueue_served: bool) -> CheckLine:
    name = f"localqueue {DEFAULT_LOCAL_QUEUE}"
    ns = settings.namespace
    try:
        lq = client.get_local_queue(DEFAULT_LOCAL_QUEUE)
    except ApiException as exc:
        if is_missing_object(exc) or (kueue_served and exc.status == 404):  # the API is served: the object is missing
            return CheckLine("ok", name, f"none in namespace {ns}: Jobs without a queue-name label stay outside Kueue")
        return CheckLine("warn", name, f"cannot read it ({api_status(exc) or exc.__class__.__name__})", "apply k8s/base/rbac.yaml")
    except K8sBackendError as exc:
        return CheckLine("warn", name, f"cannot read it ({exc})")
    cq = (lq.get("spec") or {}).get("clusterQueue") or "?"
    return CheckLine(
        "fail",
        name,
        f"LocalQueue {DEFAULT_LOCAL_QUEUE} exists in namespace {ns} (ClusterQueue {cq}): Kueue's job webhook gives every Job "
        "without a queue-name label to it (always, since Kueue 0.19), so rljob's cpu jobs are queued there, admitted into "
        "its flavors (their node labels merged into the pod) and may never schedule",
        f"kubectl -n {ns} delete localqueue {DEFAULT_LOCAL_QUEUE} (rljob queues TPU jobs by name; give teams other queue names), "
        "or run rljob in a namespace without one",
    )


def _selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(...).Matches: matchLabels and In/NotIn/Exists/DoesNotExist expressions."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (
            (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def manager_config_check(reads: ClusterReads, settings: K8sSettings, jobsets: bool) -> CheckLine:
    """Kueue's Configuration, with upstream's defaults (apis/config/v1beta2/defaults.go: no frameworks -> batch/job;
    no selector -> every namespace but kube-system and Kueue's)."""
    name = "kueue configuration"
    ns = settings.namespace
    where = f"ConfigMap {KUEUE_SYSTEM}/{MANAGER_CONFIGMAP}"
    try:
        data = reads.config_map_data(KUEUE_SYSTEM, MANAGER_CONFIGMAP)
        doc = yaml.safe_load(data.get(MANAGER_CONFIG_KEY) or "") or {}
    except (ApiException, K8sBackendError, yaml.YAMLError, AttributeError) as exc:
        why = api_status(exc) or exc.__class__.__name__
        return CheckLine(
            "warn",
            name,
            f"could not read Kueue's Configuration ({where}: {why}); the probes test its effect on this namespace",
            f"read it yourself: kubectl -n {KUEUE_SYSTEM} get configmap {MANAGER_CONFIGMAP} -o yaml (or run the doctor as an admin)",
        )
    if not isinstance(doc, dict):
        return CheckLine("warn", name, f"{where}: {MANAGER_CONFIG_KEY} is not a YAML mapping", "see the ConfigMap")
    kueue_ns = doc.get("namespace") or KUEUE_SYSTEM
    frameworks = list((doc.get("integrations") or {}).get("frameworks") or []) or [FRAMEWORKS["Job"]]
    selector = doc.get("managedJobsNamespaceSelector") or {
        "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", kueue_ns]}]
    }
    labels, note = reads.namespace_labels(ns)
    problems, fixes = [], []
    if not _selector_matches(selector, labels):
        problems.append(
            f"managedJobsNamespaceSelector {selector} does not select namespace {ns}{note}: Kueue ignores every queued Job there"
        )
        fixes.append(f"label namespace {ns} to match it, or change managedJobsNamespaceSelector")
    wanted = ["Job"] + (["JobSet"] if jobsets else [])
    missing = [FRAMEWORKS[k] for k in wanted if FRAMEWORKS[k] not in frameworks]
    if missing:
        problems.append(f"integrations.frameworks lacks {', '.join(missing)}: those objects get no Workload and stay suspended")
        fixes.append(f"add {', '.join(missing)} to integrations.frameworks")
    if doc.get("manageJobsWithoutQueueName") and _selector_matches(selector, labels):
        problems.append("manageJobsWithoutQueueName is true: rljob's cpu jobs (no queue-name) are suspended and never admitted")
        fixes.append("set manageJobsWithoutQueueName: false, or exclude the namespace with managedJobsNamespaceSelector")
    if problems:
        fix = "; ".join(fixes) + f" ({where}), then restart Kueue: kubectl -n {kueue_ns} rollout restart deploy/kueue-controller-manager"
        return CheckLine("fail", name, "; ".join(problems), fix)
    return CheckLine("ok", name, f"Kueue manages {', '.join(FRAMEWORKS[k] for k in wanted)} in namespace {ns}{note}")


def _workload_of(client: K8sClient, uid: str) -> list[dict[str, Any]] | str:
    found = client.kueue_workloads(uid)
    if isinstance(found, str):
        return found
    return [w for w in found if ((w.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == uid]


def queued_probe_checks(
    client: K8sClient,
    settings: K8sSettings,
    queue: str,
    jobsets: bool,
    *,
    wait_s: float = PROBE_WORKLOAD_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[CheckLine]:
    """Create suspended probes labelled with `queue`, wait (bounded) for their Workloads, delete them."""
    lines: list[CheckLine] = []
    created: dict[str, tuple[str, str]] = {}  # kind -> (name, uid)
    for kind, build in (("Job", probe_job), ("JobSet", probe_jobset)):
        if kind == "JobSet" and not jobsets:
            continue
        name = _probe_name()
        try:
            obj = _create(client, kind, build(name, queue), dry_run=False)
        except (ApiException, K8sBackendError) as exc:
            lines.append(CheckLine("fail", f"kueue probe {kind}", f"could not create the probe: {_first_cause(_body(exc))}"))
            continue
        created[kind] = (name, str((obj.get("metadata") or {}).get("uid") or ""))
    try:
        pending = dict(created)
        deadline = clock() + wait_s
        while pending:
            for kind, (_name, uid) in list(pending.items()):
                found = _workload_of(client, uid)
                if isinstance(found, str):
                    lines.append(CheckLine("warn", f"kueue probe {kind}", f"cannot tell: {found}", "see the rbac and api lines"))
                    del pending[kind]
                elif found:
                    wl = found[0]["metadata"]["name"]
                    lines.append(CheckLine("ok", f"kueue probe {kind}", f"a suspended {kind} queued to {queue} got Workload {wl}"))
                    del pending[kind]
            if not pending or clock() >= deadline:
                break
            sleep(PROBE_POLL_S)
        for kind in pending:
            framework = FRAMEWORKS[kind]
            lines.append(
                CheckLine(
                    "fail",
                    f"kueue probe {kind}",
                    f"a suspended {kind} labelled {KUEUE_QUEUE_LABEL}={queue} got no Kueue Workload within {wait_s:.0f}s: "
                    f"Kueue does not manage {kind}s in namespace {settings.namespace}, so every queued job would stay suspended",
                    f"in Kueue's Configuration ({KUEUE_SYSTEM}/{MANAGER_CONFIGMAP}) managedJobsNamespaceSelector must select "
                    f"namespace {settings.namespace} and integrations.frameworks must list {framework}; and Kueue must run: "
                    f"kubectl -n {KUEUE_SYSTEM} get pods",
                )
            )
    finally:
        for kind, (name, _) in created.items():
            try:
                client.delete(kind, name, propagation="Background")
            except (ApiException, K8sBackendError) as exc:
                lines.append(
                    CheckLine(
                        "warn",
                        f"kueue probe {kind}",
                        f"could not delete probe {name}: {exc}",
                        f"kubectl -n {settings.namespace} delete {kind.lower()} {name}",
                    )
                )
    order = {"Job": 0, "JobSet": 1}
    return sorted(lines, key=lambda line: order.get(line.name.rsplit(" ", 1)[-1], 2))
