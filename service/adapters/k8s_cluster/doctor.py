"""`rljob doctor`: is this cluster ready for rljob? One line per check, ok / warn / fail, with the fix.

Run by the CLI (service/cli/doctor.py) and once at service start with the Kubernetes backend (logged, and
shown in /readyz). Checks: API groups served, RBAC for every verb the service uses (SelfSubjectAccessReview),
each configured Kueue LocalQueue's chain and the nodes behind its flavors (doctor_kueue.py), the HF token
Secret, and the storage prefixes the service is configured with, as the SERVICE's identity sees them.
The CLI adds the probes (doctor_probes.py): admission webhooks, a queued probe, the `default` LocalQueue and
Kueue's Configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.client import K8sClient, api_status
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.kueue import KUEUE_GROUP
from service.adapters.k8s.manifests import JOBSET_GROUP, JOBSET_VERSION
from service.adapters.k8s.settings import K8sSettings
from service.domain.self_check import CheckLine

from .doctor_kueue import configured_queues, queue_checks
from .doctor_pools import pool_checks_without_kueue
from .doctor_probes import PROBE_WORKLOAD_WAIT_S, admission_checks, default_queue_check, manager_config_check, queued_probe_checks
from .rbac_needs import CLUSTER, HF_SECRET_IN_ROLE, NAMESPACED, Permission
from .reads import ClusterReads

KUEUE_V1BETA2 = f"{KUEUE_GROUP}/v1beta2"
VISIBILITY_V1BETA2 = "visibility.kueue.x-k8s.io/v1beta2"
PROBE_REQUEST_TIMEOUT_S = 10.0
PROBE_DEADLINE_S = 20.0
StorageProbe = Callable[[str], None]  # raises with a message when the prefix cannot be listed


def kueue_version_line(served: set[str]) -> CheckLine:
    """Which Kueue line is installed, from discovery alone: v0.20 stops serving kueue.x-k8s.io/v1beta1
    (CHANGELOG-0.20.md #14558), v0.15-v0.19 serve both; and what rljob does differently on it."""
    name = "kueue version"
    if f"{KUEUE_GROUP}/v1beta1" in served:
        # v0.19 has no waitForPodsReady.unscheduledTimeout (v0.20's): an admitted job whose pods no node of its flavor
        # takes holds its quota until the 30-min PodsReady timeout; rljob says so earlier (service/adapters/k8s/stranded.py).
        return CheckLine(
            "warn",
            name,
            "v0.15-v0.19 (v1beta1 still served): waiting jobs say Pending/Inadmissible, which rljob reads as v0.20's "
            "WaitingForQuota, ExceedsMaxQuota, NoMatchingFlavor, Misconfigured or Suspended from Kueue's message; an "
            "admitted job whose pods cannot be scheduled in its flavor is not evicted before waitForPodsReady's timeout "
            "(v0.20's unscheduledTimeout is missing): rljob reports it as stranded after RLJOB_K8S_STRANDED_AFTER_S",
            "make sure each flavor's node labels and taints match a node pool (the pool lines of this report), and "
            "subscribe a webhook to job.stranded",
        )
    return CheckLine(
        "ok",
        name,
        "v0.20 or later (v1beta1 no longer served): rljob shows Kueue's own waiting reasons; a queued job that names no "
        "WorkloadPriorityClass gets one called `default` if it exists (rljob's jobs always name rljob-<priority>)",
    )


def api_checks(served: set[str], settings: K8sSettings) -> list[CheckLine]:
    lines = [
        CheckLine("ok", "api batch/v1", "served")
        if "batch/v1" in served
        else CheckLine("fail", "api batch/v1", "not served", "this is not a usable Kubernetes API server; check the kubeconfig/context")
    ]
    jobset = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
    if jobset in served:
        lines.append(CheckLine("ok", f"api {jobset}", "served"))
    elif settings.watch_jobsets:
        lines.append(
            CheckLine(
                "fail",
                f"api {jobset}",
                "not served, and RLJOB_K8S_WATCH_JOBSETS is true",
                "install the JobSet controller (docs/deploy-gke.md), or set RLJOB_K8S_WATCH_JOBSETS=false if no job spans several VMs",
            )
        )
    else:
        lines.append(CheckLine("warn", f"api {jobset}", "not served: multi-host slices cannot run", "install the JobSet controller"))
    if configured_queues(settings):
        kueue_versions = sorted(v for v in served if v.startswith(KUEUE_GROUP + "/"))
        if KUEUE_V1BETA2 in served:
            lines.append(CheckLine("ok", f"api {KUEUE_V1BETA2}", "served"))
        elif kueue_versions:
            lines.append(
                CheckLine(
                    "fail",
                    f"api {KUEUE_V1BETA2}",
                    f"only {', '.join(kueue_versions)}: Kueue < 0.15",
                    "upgrade Kueue to >= 0.15 (rljob reads and writes kueue.x-k8s.io/v1beta2)",
                )
            )
        else:
            lines.append(
                CheckLine(
                    "fail",
                    f"api {KUEUE_V1BETA2}",
                    "Kueue is not installed, but Kueue queues are configured",
                    "install Kueue >= 0.15, or unset RLJOB_K8S_KUEUE_QUEUE and RLJOB_K8S_KUEUE_TEAM_QUEUES",
                )
            )
        if KUEUE_V1BETA2 in served:
            lines.append(kueue_version_line(served))
        if VISIBILITY_V1BETA2 in served:
            lines.append(CheckLine("ok", f"api {VISIBILITY_V1BETA2}", "served"))
        else:
            lines.append(
                CheckLine(
                    "warn",
                    f"api {VISIBILITY_V1BETA2}",
                    "not served: queued jobs show no place in line",
                    "enable Kueue's visibility API server (Kueue's VisibilityOnDemand)",
                )
            )
    return lines


def _needed(settings: K8sSettings) -> list[tuple[Permission, bool]]:
    """(permission, namespaced) the service needs with these settings."""
    kueue = bool(configured_queues(settings))

    def keep(p: Permission) -> bool:
        return p.when == "always" or (p.when == "jobsets" and settings.watch_jobsets) or (p.when == "kueue" and kueue)

    return [(p, True) for p in NAMESPACED if keep(p)] + [(p, False) for p in CLUSTER if keep(p)]


def rbac_checks(reads: ClusterReads, settings: K8sSettings) -> list[CheckLine]:
    lines, allowed = [], 0
    needed = _needed(settings)
    for perm, namespaced in needed:
        secret = settings.hf_token_secret if perm.resource == "secrets" else None
        try:
            namespace = settings.namespace if namespaced else None
            ok, reason = reads.allowed(perm.group, perm.resource, perm.verb, namespace=namespace, name=secret)
        except (ApiException, K8sBackendError) as exc:
            fix = f"check with: kubectl auth can-i --list -n {settings.namespace} --as <the service's account>"
            return [CheckLine("warn", "rbac", f"cannot ask the API server (SelfSubjectAccessReview: {api_status(exc) or exc})", fix)]
        if ok:
            allowed += 1
            continue
        where = f"in namespace {settings.namespace}" if namespaced else "cluster-wide"
        name = f"rbac {perm.text()}{' ' + secret if secret else ''}"
        if namespaced:
            fix = "apply k8s/base/rbac.yaml (Role rljob-launcher) and bind it to the service's account"
            if secret and secret != HF_SECRET_IN_ROLE:
                fix = f"the Role grants get on Secret {HF_SECRET_IN_ROLE} only: add {secret} to its resourceNames"
        else:
            fix = "apply the gke-kueue overlay's ClusterRole rljob-cluster-reader and its binding"
        message = f"denied {where} ({perm.why}){': ' + reason if reason else ''}"
        lines.append(CheckLine("warn" if perm.optional else "fail", name, message, fix))
    if allowed:
        lines.insert(0, CheckLine("ok", "rbac", f"{allowed} of {len(needed)} permissions the service uses are granted"))
    return lines


def secret_check(client: K8sClient, settings: K8sSettings) -> CheckLine:
    """The HF token Secret has its key. Reads the Secret's keys only; its values are never shown."""
    name, key = settings.hf_token_secret, settings.hf_token_secret_key
    check = f"secret {name}"
    create = f"kubectl -n {settings.namespace} create secret generic {name} --from-literal={key}=<token>"
    try:
        keys = client.secret_keys(name)
    except (ApiException, K8sBackendError) as exc:
        why = f"cannot look ({api_status(exc) or exc.__class__.__name__}): the service may get only Secret {HF_SECRET_IN_ROLE}"
        return CheckLine("warn", check, why, f"check by hand: kubectl -n {settings.namespace} get secret {name}")
    if keys is None:
        return CheckLine("warn", check, "does not exist: public models need no token, gated ones fail in the trainer", create)
    if key not in keys:
        return CheckLine(
            "warn",
            check,
            f"has no key {key!r} (keys: {', '.join(sorted(keys)) or 'none'}): gated models fail",
            f"{create} (or set RLJOB_K8S_HF_TOKEN_SECRET_KEY)",
        )
    return CheckLine("ok", check, f"has key {key!r}")


def storage_checks(prefixes: list[str], probe: StorageProbe, settings: K8sSettings) -> list[CheckLine]:
    lines = []
    for prefix in prefixes:
        sa = settings.service_account
        trainer = (
            f"kubectl -n {settings.namespace} run gcs-probe --rm -i --restart=Never --image=google/cloud-sdk:slim "
            f'--overrides=\'{{"spec":{{"serviceAccountName":"{sa}"}}}}\' -- gcloud storage ls {prefix}'
        )
        try:
            probe(prefix)
        except Exception as exc:  # noqa: BLE001 - any storage error is this check's answer
            lines.append(
                CheckLine(
                    "fail",
                    f"storage {prefix}",
                    f"the service's identity cannot list it: {exc}",
                    f"grant the service's Google service account roles/storage.objectViewer on the bucket; "
                    f"the trainer's identity is separate, verify it with: {trainer}",
                )
            )
            continue
        lines.append(
            CheckLine(
                "ok",
                f"storage {prefix}",
                "listable by the service's identity (not the trainer's: "
                f"the trainer runs as {sa} through Workload Identity; docs/doctor.md says how to check it)",
            )
        )
    return lines


def run_doctor(
    client: K8sClient,
    settings: K8sSettings,
    *,
    storage_prefixes: Sequence[str] = (),
    probe_storage: StorageProbe | None = None,
    probes: bool = False,
    probe_wait_s: float | None = None,
) -> list[CheckLine]:
    """probes: also create probe objects (doctor_probes.py: dry-run Job/JobSet, a queued Job/JobSet deleted after,
    waiting up to probe_wait_s, else PROBE_WORKLOAD_WAIT_S, for Kueue's Workload); the CLI does, the service's
    start-up self-check does not."""
    reads = ClusterReads(client)
    try:
        served = reads.served_group_versions()
    except Exception as exc:  # noqa: BLE001 - unreachable, TLS, auth: the one line that matters
        first = str(exc).splitlines()[0] if str(exc) else ""
        fix = "check the kubeconfig/context (RLJOB_K8S_KUBECONFIG, RLJOB_K8S_CONTEXT) and that the cluster is reachable"
        return [CheckLine("fail", "api server", f"cannot discover its APIs: {exc.__class__.__name__}: {first}", fix)]
    lines = api_checks(served, settings)
    lines += rbac_checks(reads, settings)
    queues = configured_queues(settings)
    jobsets = settings.watch_jobsets and f"{JOBSET_GROUP}/{JOBSET_VERSION}" in served
    if probes:
        lines += admission_checks(client, settings, jobsets, queues[0] if queues else None)
    if queues:
        lines += queue_checks(reads, settings, served)
        if probes:
            lines.append(default_queue_check(client, settings, KUEUE_V1BETA2 in served))
            lines.append(manager_config_check(reads, settings, jobsets))
            if KUEUE_V1BETA2 in served:
                lines += queued_probe_checks(client, settings, queues[0], jobsets, wait_s=probe_wait_s or PROBE_WORKLOAD_WAIT_S)
    lines += pool_checks_without_kueue(reads, settings)
    lines.append(secret_check(client, settings))
    if storage_prefixes:
        lines += storage_checks(list(storage_prefixes), probe_storage or gcs_probe, settings)
    return lines


def gcs_probe(prefix: str) -> None:
    """List at most one object under a gs:// prefix with the process's storage client (its identity)."""
    from google.api_core.retry import Retry

    from trainer.storage.gcs import gcs_store, parse_gs_uri

    bucket, name = parse_gs_uri(prefix)
    client = gcs_store().client
    # Bounded like the service's own reads of gs:// (adapters/run_reads.py): a stalled endpoint is a failed check.
    retry = Retry(initial=0.2, maximum=2.0, multiplier=2.0, timeout=PROBE_DEADLINE_S)
    list(client.list_blobs(bucket, prefix=name, max_results=1, timeout=PROBE_REQUEST_TIMEOUT_S, retry=retry))


def storage_prefixes(team_locations: dict[str, list[str]], template: str) -> list[str]:
    """The gs:// prefixes the service is configured with (RLJOB_TEAM_LOCATIONS, and the template up to
    its `{team}` when the bucket itself does not depend on the team)."""
    prefixes = [p for locations in team_locations.values() for p in locations if p.startswith("gs://")]
    head = template.split("{team}", 1)[0]
    if head.startswith("gs://") and "/" in head[len("gs://") :]:
        prefixes.append(head)
    return list(dict.fromkeys(prefixes))
