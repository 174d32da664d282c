"""The trainer's pod template: shared by the single-host Job and every replicated Job of a JobSet.

A TPU pod is pinned to its slice's nodes (selectors, the TPU taint's toleration, google.com/tpu); a cpu
pod asks only for CPU and memory (K8sSettings.cpu_job_*), so it schedules on any node. Both mount the
node directories of K8sSettings.host_paths, so specs with local paths work on single-node dev clusters.

`hardware.capacity` adds its node labels and taints (capacity.py) on top: a TPU pod always selects its
capacity's `rljob.dev/capacity` value (that keeps it in its own Kueue flavor; a list of kinds: a required
node affinity with one term per kind), a cpu pod nothing (on-demand only), except a queued eval job's, which selects
and tolerates the eval pool (`rljob.dev/capacity=cpu-eval`: the `cpu-eval` flavor, never a TPU one). A spot pod also gets a grace
period that fits the preemption notice, a flex-start pod the time left before its VM goes (RLJOB_MAX_RUN_S).
The pod runs as its team's service account (Workload Identity).

With K8sSettings.reward_container, a pod whose job loads user reward code runs its reward workers in a native
sidecar of their own (reward_container.py).

With K8sSettings.trainer_runtime_class (GKE Sandbox: `gvisor`), every trainer and eval pod asks for that RuntimeClass:
both run user code (reward functions, in the sandbox's worker processes), so both get the kernel boundary. GKE's
RuntimeClass carries its own scheduling (the sandbox node pools' `sandbox.gke.io/runtime: gvisor` label and taint,
merged into the pod at admission), so nothing of it is repeated here. gVisor runs single-host ("1VM") TPU shapes only:
a multi-host slice is refused (runtime_class_problem), never silently run outside the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import cast

from kubernetes.client import (
    V1Affinity,
    V1ConfigMapVolumeSource,
    V1Container,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1EnvVarSource,
    V1HostPathVolumeSource,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ResourceRequirements,
    V1SecretKeySelector,
    V1Toleration,
    V1Volume,
    V1VolumeMount,
)
from kubernetes.utils import quantity

from trainer.contract import JobSpec

from . import names
from .accelerators import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODE_POOL_LABEL,
    GKE_TOPOLOGY_LABEL,
    MACHINE_TYPE_LABEL,
    TPU_RESOURCE,
    GkeTpuSlice,
    Hardware,
)
from .capacity import FLEX_START_MAX_RUN_S, capacity_scheduling, eval_pool_scheduling
from .errors import ManifestError
from .reward_container import reward_host_parts, reward_share, runs_user_reward_code
from .settings import K8sSettings

MIN_TRAINER_MIB = 1024  # what a trainer container beside a reward container must keep, at least
MIN_TRAINER_MILLICPU = 500
parse_quantity = cast(Callable[[str], Decimal], quantity.parse_quantity)  # the client's own, untyped


def node_selector(tpu: GkeTpuSlice, settings: K8sSettings) -> dict[str, str]:
    selector = {
        GKE_ACCELERATOR_LABEL: tpu.gke_accelerator,
        GKE_TOPOLOGY_LABEL: tpu.topology,
        MACHINE_TYPE_LABEL: tpu.machine_type,
    }
    if settings.node_pool:
        selector[GKE_NODE_POOL_LABEL] = settings.node_pool
    return selector


def runtime_class_problem(hw: Hardware, settings: K8sSettings) -> str | None:
    """Why this hardware cannot run under the configured RuntimeClass; None when it can (or none is configured)."""
    if settings.trainer_runtime_class and hw.multi_host:
        return (
            f"{hw.name} is a multi-host TPU slice, and this service runs trainer pods under RuntimeClass "
            f"{settings.trainer_runtime_class!r} (RLJOB_K8S_TRAINER_RUNTIME_CLASS): gVisor runs single-host TPU shapes only; "
            "use a single-host slice, or ask an admin for a service without the sandbox runtime"
        )
    return None


def trainer_command(job_id: str) -> list[str]:
    # The spec travels in a ConfigMap, never in argv; secrets come only through env from a Secret.
    return ["python", "-m", "trainer", "run", "--spec", f"{names.SPEC_MOUNT_DIR}/{names.SPEC_KEY}", "--job-id", job_id]


def _env(spec: JobSpec, job_id: str, settings: K8sSettings) -> list[V1EnvVar]:
    env = [
        V1EnvVar(name="RLJOB_JOB_ID", value=job_id),
        # The image as named here (a digest only if the reference pins one): the trainer records it in repro.json.
        V1EnvVar(name="RLJOB_TRAINER_IMAGE", value=settings.image),
        # Progress events are JSON lines on stdout: unbuffered so `rljob logs` sees them at once.
        V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
        V1EnvVar(
            name="HF_TOKEN",
            value_from=V1EnvVarSource(
                # optional: public checkpoints need no token; a gated one makes the trainer fail with
                # its own message naming the Secret, which beats a pod stuck in CreateContainerConfigError.
                secret_key_ref=V1SecretKeySelector(name=settings.hf_token_secret, key=settings.hf_token_secret_key, optional=True)
            ),
        ),
    ]
    if "flex-start" in spec.hardware.capacities:
        # Fixed before Kueue picks the flavor (a started Job's env cannot change), so a set with flex-start keeps
        # the limit on any of its kinds: the trainer stops early (7 days minus the margin) rather than be cut off.
        env.append(V1EnvVar(name="RLJOB_MAX_RUN_S", value=str(FLEX_START_MAX_RUN_S - settings.flex_start_margin_s)))
    return env


def _scheduling(
    spec: JobSpec, hw: Hardware, settings: K8sSettings, *, eval_pool: bool
) -> tuple[dict[str, str], list[V1Toleration], V1Affinity | None]:
    """Node selector, tolerations and node affinity: the TPU slice's (if any), then the capacity's (the eval pool's)."""
    selector: dict[str, str] = {}
    tolerations: list[V1Toleration] = []
    if isinstance(hw, GkeTpuSlice):
        selector.update(node_selector(hw, settings))
        tolerations.append(V1Toleration(key=TPU_RESOURCE, operator="Exists", effect="NoSchedule"))
    capacity = capacity_scheduling(spec.hardware.capacities, spec.hardware.reservation, tpu=isinstance(hw, GkeTpuSlice))
    if eval_pool and not isinstance(hw, GkeTpuSlice):
        capacity = eval_pool_scheduling()
    selector.update(capacity.node_selector)
    tolerations += [V1Toleration(**t) for t in capacity.tolerations]
    affinity = None
    if capacity.affinity_terms:
        terms = [
            V1NodeSelectorTerm(match_expressions=[V1NodeSelectorRequirement(**e) for e in term["matchExpressions"]])
            for term in capacity.affinity_terms
        ]
        affinity = V1Affinity(
            node_affinity=V1NodeAffinity(required_during_scheduling_ignored_during_execution=V1NodeSelector(node_selector_terms=terms))
        )
    return selector, tolerations, affinity


def _grace_s(spec: JobSpec, settings: K8sSettings) -> int:
    """Spot alone: the part of the preemption notice GKE gives pods. A set with spot keeps the long grace: it is
    fixed before Kueue picks the flavor, and on a Spot VM GKE's node shutdown ends the pod at its own limit anyway,
    so each kind gets all the time it can give."""
    if spec.hardware.capacities == ("spot",):
        return min(settings.termination_grace_s, settings.spot_termination_grace_s)
    return settings.termination_grace_s


def _resources(hw: Hardware, settings: K8sSettings, carved: tuple[int, int] | None = None) -> V1ResourceRequirements:
    """`carved`: (CPUs, MiB) the pod's reward container takes out of what the trainer would ask for alone, so the
    pod as a whole asks for the same (reward_container.py)."""
    if not isinstance(hw, GkeTpuSlice):
        cpu = _less({"cpu": settings.cpu_job_cpu, "memory": settings.cpu_job_memory}, carved)
        return V1ResourceRequirements(requests=dict(cpu), limits=dict(cpu))
    asked = _less({"cpu": settings.cpu_request or hw.cpu_request, "memory": settings.memory_request or hw.memory_request}, carved)
    return V1ResourceRequirements(
        requests={**asked, TPU_RESOURCE: str(hw.chips_per_vm)},
        # Extended resources need limit == request; memory limit == request keeps OOM deterministic.
        limits={"memory": asked["memory"], TPU_RESOURCE: str(hw.chips_per_vm)},
    )


def reward_container_problem(spec: JobSpec, hw: Hardware, settings: K8sSettings) -> str | None:
    """Why the pod's reward container would leave its trainer too little (the pod's render would refuse it), or None."""
    if not (settings.reward_container and runs_user_reward_code(spec)):
        return None
    try:
        _resources(hw, settings, reward_share(spec))
    except ManifestError as e:
        return str(e)
    return None


def _less(amounts: dict[str, str], carved: tuple[int, int] | None) -> dict[str, str]:
    if carved is None:
        return amounts
    millicpu_left = int(parse_quantity(amounts["cpu"]) * 1000) - carved[0]
    mib_left = int(parse_quantity(amounts["memory"]) / 2**20) - carved[1]
    if millicpu_left < MIN_TRAINER_MILLICPU or mib_left < MIN_TRAINER_MIB:
        raise ManifestError(
            f"the reward container's {carved[0]}m CPU and {carved[1]} MiB leave the trainer {millicpu_left}m CPU and "
            f"{mib_left} MiB of the {amounts['cpu']} CPU and {amounts['memory']} the pod may ask for (it needs at least "
            f"{MIN_TRAINER_MILLICPU}m and {MIN_TRAINER_MIB} MiB): lower grpo.rewards.memory_mib (or the suite's "
            "reward_memory_mib), give the pod more, or run without RLJOB_K8S_REWARD_CONTAINER"
        )
    return {"cpu": f"{millicpu_left}m", "memory": f"{mib_left}Mi"}


def host_path_volumes(settings: K8sSettings) -> list[tuple[V1Volume, V1VolumeMount]]:
    """One hostPath volume per K8sSettings.host_paths entry, mounted at the same path."""
    out = []
    for i, path in enumerate(settings.host_paths):
        name = f"host-{i}"
        out.append(
            (V1Volume(name=name, host_path=V1HostPathVolumeSource(path=path, type="Directory")), V1VolumeMount(name=name, mount_path=path))
        )
    return out


def trainer_pod_template(
    spec: JobSpec,
    job_id: str,
    hw: Hardware,
    settings: K8sSettings,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    eval_pool: bool = False,
) -> V1PodTemplateSpec:
    """`eval_pool`: a cpu pod that selects and tolerates the eval pool (a queued eval job, manifests.py)."""
    if not settings.image:
        raise ManifestError("no trainer image configured: set RLJOB_K8S_IMAGE to the trainer image reference")
    if problem := runtime_class_problem(hw, settings):
        raise ManifestError(problem)
    host = host_path_volumes(settings)
    sidecars, reward_volume, reward_mount, reward_env = reward_host_parts(spec, settings)
    container = V1Container(
        name=names.TRAINER_CONTAINER,
        image=settings.image,
        image_pull_policy=settings.image_pull_policy,
        command=trainer_command(job_id),
        env=_env(spec, job_id, settings) + ([reward_env] if reward_env else []),
        resources=_resources(hw, settings, reward_share(spec) if sidecars else None),
        volume_mounts=[
            V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            V1VolumeMount(name="spec", mount_path=names.SPEC_MOUNT_DIR, read_only=True),
            *(mount for _, mount in host),
            *([reward_mount] if reward_mount else []),
        ],
        termination_message_policy="FallbackToLogsOnError",
    )
    selector, tolerations, affinity = _scheduling(spec, hw, settings, eval_pool=eval_pool)
    pod = V1PodSpec(
        restart_policy="Never",  # required by podFailurePolicy; retries are the Job's, not the kubelet's
        service_account_name=settings.trainer_service_account(spec.team),
        termination_grace_period_seconds=_grace_s(spec, settings),
        node_selector=selector or None,
        tolerations=tolerations or None,
        affinity=affinity,
        priority_class_name=settings.priority_class,
        runtime_class_name=settings.trainer_runtime_class or None,
        init_containers=sidecars or None,
        containers=[container],
        volumes=[
            V1Volume(name="dshm", empty_dir=V1EmptyDirVolumeSource(medium="Memory", size_limit=_shm_size(hw, settings))),
            V1Volume(name="spec", config_map=V1ConfigMapVolumeSource(name=names.spec_configmap_name(job_id))),
            *(volume for volume, _ in host),
            *([reward_volume] if reward_volume else []),
        ],
    )
    if hw.multi_host:
        # GKE multi-host TPU slices talk over the host network (ICI setup, megascale); with host
        # networking, ClusterFirstWithHostNet keeps cluster DNS (the JobSet headless service).
        pod.host_network = True
        pod.dns_policy = "ClusterFirstWithHostNet"
    return V1PodTemplateSpec(metadata=V1ObjectMeta(labels=labels, annotations=annotations), spec=pod)


def _shm_size(hw: Hardware, settings: K8sSettings) -> str:
    if isinstance(hw, GkeTpuSlice):
        return settings.shm_size or hw.shm_size
    return settings.cpu_job_shm_size
