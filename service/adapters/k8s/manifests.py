"""Pure functions from (spec, job id, settings) to Kubernetes objects; no I/O, no YAML templates.

Single-host slices become a batch/v1 Job; multi-host slices a JobSet (jobset.x-k8s.io/v1alpha2),
returned as a dict because the kubernetes client has no model for that CRD; `hardware.accelerator: cpu`
is a single-host Job too. The spec travels in a ConfigMap the pod mounts read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client import (
    V1ConfigMap,
    V1Job,
    V1JobSpec,
    V1ObjectMeta,
    V1PodFailurePolicy,
    V1PodFailurePolicyOnExitCodesRequirement,
    V1PodFailurePolicyOnPodConditionsPattern,
    V1PodFailurePolicyRule,
)

from trainer.contract import NON_RETRYABLE_EXIT_CODES, JobSpec, local_path, location_kind

from . import names
from .accelerators import GKE_NODE_POOL_LABEL, GkeTpuSlice, Hardware, lookup_hardware
from .capacity import cpu_capacity_problem
from .errors import ManifestError
from .kueue import NoQueueForTeam, local_queue_for, priority_class_name
from .pod_template import trainer_pod_template
from .serialize import to_plain
from .settings import K8sSettings

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
SLICE_REPLICATED_JOB = "slice"


@dataclass(frozen=True)
class Workload:
    """What `launch` creates, in creation order: the spec ConfigMap, then the Job or the JobSet."""

    config_map: V1ConfigMap
    job: V1Job | None
    jobset: dict[str, Any] | None

    @property
    def kind(self) -> str:
        return "Job" if self.job is not None else "JobSet"

    @property
    def name(self) -> str:
        if self.job is not None:
            job_name = self.job.metadata.name if self.job.metadata is not None else None
            if job_name is None:
                raise ManifestError("the Job was built without metadata.name")
            return job_name
        assert self.jobset is not None  # one of the two is always set by build_workload
        jobset_name: str = self.jobset["metadata"]["name"]
        return jobset_name


def resolve_hardware(spec: JobSpec) -> Hardware:
    hw = lookup_hardware(spec.hardware.accelerator)
    if isinstance(hw, GkeTpuSlice) and spec.hardware.chips_per_vm != hw.chips_per_vm:
        raise ManifestError(
            f"hardware.chips_per_vm={spec.hardware.chips_per_vm} does not match {hw.name} on GKE "
            f"({hw.machine_type} has {hw.chips_per_vm} chips per VM); set chips_per_vm: {hw.chips_per_vm}"
        )
    return hw


def spec_local_paths(spec: JobSpec) -> list[tuple[str, str]]:
    """(field, path) for every local path in the spec: what a pod can only see through a volume."""
    rewards = spec.grpo.rewards
    candidates = [
        ("model.source", spec.model.source),
        ("model.tokenizer", spec.model.tokenizer),
        *(("dataset.train_files", f) for f in spec.dataset.train_files),
        *(("dataset.eval_files", f) for f in spec.dataset.eval_files),
        ("grpo.rewards.functions_path", rewards.functions_path),
        ("dataset.processor_path", spec.dataset.processor_path),
        ("output", spec.output),
    ]
    if spec.evaluation is not None:
        # An eval job reads its suite's files and, for a MaxText checkpoint, the checkpoint's params.
        candidates += spec.evaluation.suite.input_locations("evaluation.suite")
        candidates.append(("evaluation.checkpoint.params", spec.evaluation.checkpoint.params))
    return [(name, local_path(value)) for name, value in candidates if value and location_kind(value) == "local"]


def check_local_paths(spec: JobSpec, settings: K8sSettings) -> None:
    """A local path the pod cannot see would fail late (or, for `output`, lose the run): refuse it now."""
    for name, path in spec_local_paths(spec):
        if not any(path == root or path.startswith(root.rstrip("/") + "/") for root in settings.host_paths):
            mounted = ", ".join(settings.host_paths) or "none"
            raise ManifestError(
                f"{name}={path} is a local path, which a pod on the cluster cannot see (mounted node directories: "
                f"{mounted}); use gs:// or a Hugging Face Hub id, or, on a single-node dev cluster, mount the node "
                "directory holding it with RLJOB_K8S_HOST_PATHS"
            )


def workload_labels(spec: JobSpec, job_id: str) -> dict[str, str]:
    labels = dict(spec.labels)  # user labels first so rljob's own keys always win
    labels.update(
        {
            names.LABEL_NAME: "rljob-trainer",
            names.LABEL_INSTANCE: job_id,
            names.LABEL_COMPONENT: "trainer",
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
            names.LABEL_PART_OF: "rljob",
            names.LABEL_JOB_ID: job_id,
            names.LABEL_PHASE: names.INITIAL_PHASE,
            names.LABEL_KIND: names.KIND_EVAL if spec.is_eval else names.KIND_TRAIN,
        }
    )
    team = names.label_value(spec.team) if spec.team else ""
    if team:
        labels[names.LABEL_TEAM] = team
    trained_by = spec.evaluation.checkpoint.job_id if spec.evaluation is not None else None
    if trained_by and names.label_value(trained_by) == trained_by:
        labels[names.LABEL_EVAL_OF] = trained_by  # a job id always is a label value; anything else stays out
    return labels


def workload_annotations(spec: JobSpec) -> dict[str, str]:
    annotations = {names.ANNOTATION_SPEC_HASH: spec.content_hash()}
    if spec.evaluation is not None:
        annotations[names.ANNOTATION_EVAL_SUITE] = spec.evaluation.suite.name
        annotations[names.ANNOTATION_EVAL_CHECKPOINT] = spec.evaluation.checkpoint.label
    return annotations


# JobSet v0.12.0's pod webhook (pkg/webhooks/pod_webhook.go, leaderPodForFollower) admits a follower pod of an
# exclusive-placement JobSet only when exactly one leader pod (completion index 0) of its child Job exists,
# leaving out only pods being deleted: a leader retried in place leaves its Failed pod beside the new one, so
# every new follower is refused and the slice hangs until activeDeadlineSeconds. Fixed on jobset main by
# 1dc6eec9 (terminal pods left out too), in no release yet; until one carries it, multi-host pods are never
# retried in place (see _job_spec and docs/deploy-gke.md).


def pod_failure_policy(*, multi_host: bool = False) -> V1PodFailurePolicy:
    rules = [
        # The trainer's contract: these exit codes mean a retry cannot help (bad spec, storage
        # permissions, deterministic stage failure), so fail at once instead of burning TPU time.
        V1PodFailurePolicyRule(
            action="FailJob",
            on_exit_codes=V1PodFailurePolicyOnExitCodesRequirement(
                container_name=names.TRAINER_CONTAINER,
                operator="In",
                values=sorted(int(code) for code in NON_RETRYABLE_EXIT_CODES),
            ),
        ),
    ]
    if not multi_host:
        # Preemption, node maintenance, eviction: not the trainer's fault; the replacement pod
        # resumes from the last checkpoint and the attempt does not count against backoffLimit.
        # Not for a multi-host slice's child Job: its disrupted pod fails the child Job (backoffLimit 0)
        # and the JobSet restarts every worker (the note above).
        rules.insert(
            0,
            V1PodFailurePolicyRule(
                action="Ignore",
                on_pod_conditions=[V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")],
            ),
        )
    return V1PodFailurePolicy(rules=rules)


def build_spec_config_map(spec: JobSpec, job_id: str, settings: K8sSettings) -> V1ConfigMap:
    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=V1ObjectMeta(
            name=names.spec_configmap_name(job_id),
            namespace=settings.namespace,
            labels=workload_labels(spec, job_id),
            annotations=workload_annotations(spec),
        ),
        # Pretty JSON: `kubectl get cm -o yaml` stays readable; the trainer parses either form.
        data={names.SPEC_KEY: spec.model_dump_json(indent=2)},
        immutable=True,  # the spec of a job never changes; also spares the kubelet a watch
    )


def kueue_queue_of(spec: JobSpec, settings: K8sSettings) -> str | None:
    """The LocalQueue the job's team submits to; None: no Kueue (the Job starts unsuspended).

    A TPU job and an eval job are queued; a cpu training job (the small smoke run) never is, as before eval jobs.
    An eval job counts against its team's quota like any job, in the `cpu-eval` flavor (k8s/kueue/): its pod
    selects the eval pool (capacity.py EVAL_POOL), which keeps it out of every TPU flavor. A cpu training pod
    selects nothing, so Kueue would admit it into the first TPU flavor and merge that flavor's TPU node labels
    into a pod without the google.com/tpu toleration (unschedulable).
    """
    if not isinstance(resolve_hardware(spec), GkeTpuSlice) and not spec.is_eval:
        return None
    try:
        return local_queue_for(spec.team, settings.kueue_team_queues, settings.kueue_queue)
    except NoQueueForTeam as exc:
        raise ManifestError(str(exc)) from None


def _job_spec(spec: JobSpec, job_id: str, hw: Hardware, settings: K8sSettings, labels: dict[str, str]) -> V1JobSpec:
    # Queued, an eval job runs on the eval pool; without Kueue it is a cpu job like any other (any node with room).
    eval_pool = spec.is_eval and kueue_queue_of(spec, settings) is not None
    template = trainer_pod_template(spec, job_id, hw, settings, labels=labels, annotations=workload_annotations(spec), eval_pool=eval_pool)
    job_spec = V1JobSpec(
        parallelism=hw.vms_per_slice,
        completions=hw.vms_per_slice,
        template=template,
        pod_failure_policy=pod_failure_policy(multi_host=hw.multi_host),
        # Never two trainers writing the same checkpoint directory: a replacement pod starts only
        # after the previous one is fully gone (also the only value allowed with podFailurePolicy).
        pod_replacement_policy="Failed",
    )
    if hw.multi_host:
        # One pod per VM with a stable index (TPU_WORKER_ID); any worker failing, a disrupted one
        # included, fails the slice at once and the JobSet restarts all workers together (counted
        # against its maxRestarts), which is what JAX multi-host needs; an in-place retry would also
        # hang behind JobSet v0.12.0's pod webhook (see pod_failure_policy).
        job_spec.completion_mode = "Indexed"
        job_spec.backoff_limit = 0
        job_spec.active_deadline_seconds = settings.active_deadline_s
    else:
        job_spec.backoff_limit = settings.backoff_limit
        job_spec.active_deadline_seconds = settings.active_deadline_s
        job_spec.ttl_seconds_after_finished = settings.ttl_after_finished_s
        if kueue_queue_of(spec, settings):
            job_spec.suspend = True  # Kueue unsuspends on admission; no pod starts before that
    return job_spec


def _top_level_labels(spec: JobSpec, job_id: str, settings: K8sSettings) -> dict[str, str]:
    labels = workload_labels(spec, job_id)
    queue = kueue_queue_of(spec, settings)
    if queue:
        # Kueue reads both from the Job/JobSet itself; the class orders a team's jobs and lets a
        # high one preempt a low one (k8s/kueue/priorityclasses.yaml).
        labels[names.KUEUE_QUEUE_LABEL] = queue
        labels[names.KUEUE_PRIORITY_CLASS_LABEL] = priority_class_name(spec.priority)
    return labels


def build_trainer_job(spec: JobSpec, job_id: str, settings: K8sSettings, hw: Hardware | None = None) -> V1Job:
    hw = hw or resolve_hardware(spec)
    if hw.multi_host:
        raise ManifestError(f"{hw.name} spans {hw.vms_per_slice} VMs: it needs a JobSet (build_trainer_jobset)")
    return V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=V1ObjectMeta(
            name=names.workload_name(job_id),
            namespace=settings.namespace,
            labels=_top_level_labels(spec, job_id, settings),
            annotations=workload_annotations(spec),
        ),
        spec=_job_spec(spec, job_id, hw, settings, workload_labels(spec, job_id)),
    )


def build_trainer_jobset(spec: JobSpec, job_id: str, settings: K8sSettings, hw: Hardware | None = None) -> dict[str, Any]:
    hw = hw or resolve_hardware(spec)
    if not hw.multi_host:
        raise ManifestError(f"{hw.name} is a single VM: use a batch/v1 Job (build_trainer_job)")
    labels = workload_labels(spec, job_id)
    job_template = {
        "metadata": {"labels": labels, "annotations": workload_annotations(spec)},
        "spec": to_plain(_job_spec(spec, job_id, hw, settings, labels)),
    }
    jobset_spec: dict[str, Any] = {
        # Workers find each other through the JobSet's headless service by hostname.
        "network": {"enableDNSHostnames": True},
        "failurePolicy": {
            # Restarts of the whole slice: each one resumes from the last checkpoint.
            "maxRestarts": settings.backoff_limit,
            "rules": [
                {
                    # A child Job failed by podFailurePolicy means a non-retryable exit, and a
                    # deadline is a deadline: restarting either only burns TPU time.
                    # The JobSet webhook allows ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ only (no '-'):
                    # jobset pkg/webhooks/jobset_webhook.go, ruleNameFmt, v0.7-v0.12.
                    "name": "no_retry",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy", "DeadlineExceeded"],
                }
            ],
        },
        "replicatedJobs": [{"name": SLICE_REPLICATED_JOB, "replicas": 1, "template": job_template}],
        "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
    }
    if kueue_queue_of(spec, settings):
        jobset_spec["suspend"] = True
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": names.workload_name(job_id, multi_host=True),
            "namespace": settings.namespace,
            "labels": _top_level_labels(spec, job_id, settings),
            "annotations": {
                **workload_annotations(spec),
                # One slice per node pool, never two slices sharing one (ICI is per node pool).
                names.JOBSET_EXCLUSIVE_ANNOTATION: GKE_NODE_POOL_LABEL,
            },
        },
        "spec": jobset_spec,
    }


def build_workload(spec: JobSpec, job_id: str, settings: K8sSettings) -> Workload:
    hw = resolve_hardware(spec)
    if not isinstance(hw, GkeTpuSlice) and (problem := cpu_capacity_problem(spec.hardware.capacities)):
        raise ManifestError(f"hardware.capacity: {problem}")
    check_local_paths(spec, settings)
    config_map = build_spec_config_map(spec, job_id, settings)
    if hw.multi_host:
        return Workload(config_map=config_map, job=None, jobset=build_trainer_jobset(spec, job_id, settings, hw))
    return Workload(config_map=config_map, job=build_trainer_job(spec, job_id, settings, hw), jobset=None)
