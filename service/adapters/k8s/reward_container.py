"""The reward container: a job's reward workers in a container of their own in its trainer (or eval) pod.

With K8sSettings.reward_container, a pod whose job runs user reward code (grpo.rewards.functions_path, or an eval
job's user suite) gets a native sidecar (`initContainers` with `restartPolicy: Always`, Kubernetes 1.29+; GKE's
supported versions all have it) running trainer/rewards_sandbox/host.py: it starts before the trainer, serves reward
workers over a unix socket in an emptyDir both containers mount, and the kubelet ends it after the trainer's
container. It gets none of the trainer's environment (no HF token), no mount of the spec, the job's storage or the
host paths, its own non-root user and no capabilities; the trainer gets RLJOB_REWARD_HOST, so its pool starts workers
there (trainer/rewards_sandbox/pool.py). What that buys: under gVisor, where a worker cannot confine its own writes
(no Landlock), a reward still cannot write the run's files or read the trainer's (docs/reward-sandbox.md).

Its resources are its workers' (trainer/contract/spec/reward_sandbox.py: two for a training job, one for an eval job):
half a CPU each (a reward scores text: a share, not a core) and each worker's address-space bound
(grpo.rewards.memory_mib, or the suite's reward_memory_mib), plus the server's overhead, requested and limited alike,
so a reward never takes the trainer's CPU or memory. They are carved from the trainer container's (pod_template.py):
a sidecar's requests add to the pod's (Kueue and the scheduler sum them), so the pod asks for what it asked before
and fits the same machine.
"""

from __future__ import annotations

from kubernetes.client import (
    V1Capabilities,
    V1Container,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1ResourceRequirements,
    V1SecurityContext,
    V1Volume,
    V1VolumeMount,
)

from trainer.contract import JobSpec
from trainer.contract.spec.reward_sandbox import (
    EVAL_REWARD_WORKERS,
    REWARD_HOST_OVERHEAD_MIB,
    REWARD_WORKER_MILLICPU,
    TRAIN_REWARD_WORKERS,
)

from .settings import K8sSettings

CONTAINER = "rewards"
VOLUME = "reward-host"
MOUNT_DIR = "/var/run/rljob-rewards"  # the same path in both containers: the pool's copy of a reward file is read there
SOCKET = f"{MOUNT_DIR}/host.sock"
HOST_ENV = "RLJOB_REWARD_HOST"  # trainer/rewards_sandbox/host.py reads the same name
USER = 65534  # nobody: not the trainer image's user (1000), so nothing of the trainer's is its to write


def runs_user_reward_code(spec: JobSpec) -> bool:
    """The job's pod loads a user's reward file: a training job's grpo.rewards, or an eval job's user suite."""
    if spec.evaluation is not None:
        return bool(spec.evaluation.suite.rewards_path)
    return bool(spec.grpo.rewards.functions_path)


def reward_share(spec: JobSpec) -> tuple[int, int]:
    """(millicores, MiB) the reward container requests and is limited to: its workers' and its server's."""
    if spec.evaluation is not None:
        workers, worker_mib = EVAL_REWARD_WORKERS, spec.evaluation.suite.reward_memory_mib
    else:
        workers, worker_mib = TRAIN_REWARD_WORKERS, spec.grpo.rewards.memory_mib
    return workers * REWARD_WORKER_MILLICPU, workers * worker_mib + REWARD_HOST_OVERHEAD_MIB


def reward_container(image: str, pull_policy: str, share: tuple[int, int]) -> V1Container:
    amounts = {"cpu": f"{share[0]}m", "memory": f"{share[1]}Mi"}
    return V1Container(
        name=CONTAINER,
        image=image,
        image_pull_policy=pull_policy,
        command=["python", "-m", "trainer.rewards_sandbox.host", "--socket", SOCKET],
        restart_policy="Always",  # a native sidecar: started before the trainer, ended after it
        volume_mounts=[V1VolumeMount(name=VOLUME, mount_path=MOUNT_DIR)],
        security_context=V1SecurityContext(
            run_as_user=USER,
            run_as_group=USER,
            run_as_non_root=True,
            allow_privilege_escalation=False,
            capabilities=V1Capabilities(drop=["ALL"]),
        ),  # no seccompProfile: the worker installs its own filter, and GKE Sandbox applies none of a pod's
        resources=V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        termination_message_policy="FallbackToLogsOnError",
    )


def reward_host_parts(
    spec: JobSpec, settings: K8sSettings
) -> tuple[list[V1Container], V1Volume | None, V1VolumeMount | None, V1EnvVar | None]:
    """What the pod template adds: the sidecar, its shared volume, the trainer's mount of it and its env; nothing
    without the setting or without user reward code."""
    if not (settings.reward_container and runs_user_reward_code(spec)):
        return [], None, None, None
    return (
        [reward_container(settings.image, settings.image_pull_policy, reward_share(spec))],
        V1Volume(name=VOLUME, empty_dir=V1EmptyDirVolumeSource()),
        V1VolumeMount(name=VOLUME, mount_path=MOUNT_DIR),
        V1EnvVar(name=HOST_ENV, value=SOCKET),
    )
