"""K8sSettings: everything the Kubernetes backend reads from the environment (prefix RLJOB_K8S_).

Built by the caller (`K8sSettings()` in the service factory, explicit values in tests) and passed in;
nothing here is read at import time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import PurePosixPath
from typing import cast

from kubernetes.utils.quantity import parse_quantity
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.config import MAX_SECONDS
from service.settings_env import PlainList
from trainer.contract.spec.dns_label import DnsLabel, is_dns_label

from .capacity import FLEX_START_MAX_RUN_S, SPOT_TERMINATION_GRACE_S

# Untyped in the kubernetes client: "16Gi" -> Decimal, ValueError when it is not a quantity.
_parse_quantity = cast(Callable[[str], Decimal], parse_quantity)
_MINOR = re.compile(r"^1\.\d{2}$")


class K8sSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLJOB_K8S_", extra="ignore", frozen=True, allow_inf_nan=False)

    # Where and what to run.
    namespace: DnsLabel = Field(default="rljob", description="namespace of the trainer Jobs, ConfigMaps and pods")
    image: str = Field(default="", description="trainer image, e.g. REGION-docker.pkg.dev/PROJECT/rljob/trainer:TAG")
    image_pull_policy: str = Field(default="IfNotPresent", description="Always, IfNotPresent or Never")
    service_account: DnsLabel = Field(
        default="rljob-trainer",
        description="Kubernetes service account bound to a Google service account (Workload Identity)",
    )
    # Team isolation: each team's trainer pods run as their own Kubernetes service account, bound through
    # Workload Identity to a Google service account that can reach only that team's storage.
    team_service_accounts: dict[str, DnsLabel] = Field(
        default_factory=dict,
        description='team -> Kubernetes service account of its trainer pods, e.g. {"team-a": "rljob-trainer-team-a"}; '
        "a team not listed gets RLJOB_K8S_SERVICE_ACCOUNT",
    )
    hf_token_secret: DnsLabel = Field(default="rljob-hf-token", description="Secret holding the Hugging Face token")
    hf_token_secret_key: str = Field(default="token", description="key of the token in that Secret")
    node_pool: str | None = Field(default=None, description="pin pods to this GKE node pool (cloud.google.com/gke-nodepool)")
    kueue_queue: DnsLabel | None = Field(
        default=None, description="Kueue LocalQueue of teams without their own; Jobs are created suspended for Kueue"
    )
    kueue_team_queues: dict[str, str] = Field(
        default_factory=dict,
        description='team -> its Kueue LocalQueue (`{"ml": "ml-tpu"}`); with entries, a team that has none and no '
        "`RLJOB_K8S_KUEUE_QUEUE` is refused at submit",
    )
    priority_class: str | None = Field(default=None, description="PriorityClass of trainer pods")
    # A kernel boundary around the pods that run user code (reward functions, in worker processes of the trainer and of
    # eval jobs): GKE Sandbox's `gvisor` RuntimeClass. Its scheduling (node label and taint of sandbox node pools) comes
    # with the RuntimeClass; docs/deploy-gke.md says what it gives and what gVisor does not run (multi-host TPU slices).
    trainer_runtime_class: str = Field(
        default="",
        description="RuntimeClass of trainer and eval pods, e.g. gvisor (GKE Sandbox); empty: the node's default runtime",
    )
    # Reward workers in a container of their own (reward_container.py): what closes, under gVisor, the write access a
    # worker has to the trainer's files where it cannot confine itself (docs/reward-sandbox.md).
    reward_container: bool = Field(
        default=False,
        description="run the reward workers of pods that load user reward code in a sidecar container of their own "
        "(no secrets, no run directory, user 65534); needs Kubernetes 1.29+",
    )

    # Which cluster.
    in_cluster: bool = Field(default=False, description="use the pod's service account (the service runs in the cluster)")
    kubeconfig: str | None = Field(default=None, description="kubeconfig file (default: the usual lookup)")
    context: str | None = Field(default=None, description="kubeconfig context (default: the current one)")
    gke_minor_version: str = Field(default="1.35", description="the schema version manifests are validated against")

    # Workload lifetimes. Deadline: a runaway job cannot hold TPUs forever; TTL: long enough for the
    # service to read the final state after a restart, then the cluster cleans up by itself.
    active_deadline_s: int = Field(default=2 * 24 * 3600, gt=0, description="a Job running longer is stopped")
    ttl_after_finished_s: int = Field(default=3 * 24 * 3600, ge=0, description="a finished Job is deleted after this")
    backoff_limit: int = Field(
        default=3, ge=0, description="pod retries of a Job, restarts of a JobSet (exit codes 65, 70, 77 fail at once)"
    )
    # SIGTERM -> SIGKILL: the trainer saves a checkpoint on SIGTERM (maintenance, cancel).
    termination_grace_s: int = Field(default=300, ge=30, description="SIGTERM to SIGKILL for trainer pods")
    # hardware.capacity: spot. GKE gives a Spot VM's pods 15 s of the 30 s preemption notice by default
    # (the rest is for system pods); a longer grace period only hides that from whoever reads the Job.
    spot_termination_grace_s: int = Field(
        default=15, ge=1, le=SPOT_TERMINATION_GRACE_S, description="SIGTERM to SIGKILL for trainer pods on Spot VMs"
    )
    # hardware.capacity: flex-start. The VM goes after 7 days; the trainer is told (RLJOB_MAX_RUN_S) to
    # checkpoint and stop this long before, so the last checkpoint is written and uploaded in time.
    flex_start_margin_s: int = Field(
        default=3600,
        ge=0,
        le=FLEX_START_MAX_RUN_S // 2,
        description="flex-start jobs: stop this long before the VM's 7-day limit (RLJOB_MAX_RUN_S in the pod)",
    )
    # An admitted job whose pod no node of its flavor can take (stranded.py): said once it has been unschedulable this
    # long. Longer than a TPU pool's scale-up from zero takes on GKE (minutes; more for a multi-host slice), shorter
    # than Kueue's default waitForPodsReady timeout (30 min), so the user hears it before Kueue evicts the job.
    stranded_after_s: int = Field(
        default=1200, gt=0, le=MAX_SECONDS, description="an admitted job's pod unschedulable this long is reported stranded"
    )
    cpu_request: str | None = Field(default=None, description="override the accelerator table's per-VM CPU request")
    memory_request: str | None = Field(default=None, description="override the per-VM memory request (= limit)")
    shm_size: str | None = Field(default=None, description="override the /dev/shm size")
    # hardware.accelerator: cpu. requests == limits (Guaranteed QoS): the trainer is neither throttled
    # below what it was scheduled for nor OOM-killed for memory it was promised.
    cpu_job_cpu: str = Field(default="2", description="CPU request and limit of a cpu job's pod")
    cpu_job_memory: str = Field(default="8Gi", description="memory request and limit of a cpu job's pod")
    cpu_job_shm_size: str = Field(default="1Gi", description="/dev/shm of a cpu job's pod (counts against its memory)")
    # Local paths in a spec (output, model, data) mean nothing to a pod unless the node's directory is
    # mounted: each of these is mounted into trainer pods at the same path (hostPath). For single-node
    # dev clusters (kind with extraMounts, minikube mount) where the service sees the same directory.
    host_paths: PlainList = Field(default_factory=list, description="node directories mounted at the same path")

    # Talking to the API server.
    request_timeout_s: float = Field(default=30.0, gt=0, le=MAX_SECONDS, description="timeout of each API server request")
    retry_attempts: int = Field(default=5, ge=1, description="tries of a request that failed transiently")
    retry_backoff_s: float = Field(default=0.5, gt=0, le=MAX_SECONDS, description="first wait between tries (doubles)")
    retry_backoff_max_s: float = Field(default=10.0, gt=0, le=MAX_SECONDS, description="longest wait between tries")
    watch_timeout_s: int = Field(default=300, gt=0, description="server-side end of each watch request")
    watch_resync_interval_s: float = Field(
        default=120.0, gt=0, le=MAX_SECONDS, description="how often each unfinished Job is read again (a watch event may be missed)"
    )
    watch_jobsets: bool = Field(default=True, description="watch JobSets too (needs the JobSet CRD)")

    @field_validator("cpu_job_cpu", "cpu_job_memory", "cpu_job_shm_size")
    @classmethod
    def _quantity(cls, v: str) -> str:
        try:
            _parse_quantity(v)
        except ValueError:
            raise ValueError(f"{v!r} is not a Kubernetes quantity (e.g. 500m, 4, 16Gi)") from None
        return v

    @field_validator("trainer_runtime_class")
    @classmethod
    def _runtime_class(cls, v: str) -> str:
        if v and not is_dns_label(v):
            raise ValueError(f"{v!r} is not a RuntimeClass name (a DNS label: lowercase letters, digits, '-'), e.g. gvisor")
        return v

    @field_validator("kueue_team_queues")
    @classmethod
    def _team_queues(cls, v: dict[str, str]) -> dict[str, str]:
        for team, queue in v.items():
            if not is_dns_label(team) or not is_dns_label(queue):
                raise ValueError(f"{team!r}: {queue!r}: teams and LocalQueue names are DNS labels (lowercase letters, digits, '-')")
        return v

    @field_validator("host_paths")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        for path in v:
            if not PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
                raise ValueError(f"{path!r} must be an absolute path without '..'")
        return [str(PurePosixPath(p)) for p in v]

    @field_validator("team_service_accounts")
    @classmethod
    def _teams(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [team for team in v if not is_dns_label(team)]
        if bad:
            raise ValueError(f"teams are DNS labels (lowercase letters, digits, '-'), not {', '.join(map(repr, bad))}")
        return v

    def trainer_service_account(self, team: str | None) -> str:
        """The service account a team's trainer pods run as: its own, else the shared one."""
        return self.team_service_accounts.get(team or "", self.service_account)

    @field_validator("gke_minor_version")
    @classmethod
    def _minor(cls, v: str) -> str:
        if not _MINOR.match(v):
            raise ValueError("must look like 1.33")
        return v

    @field_validator("image_pull_policy")
    @classmethod
    def _pull(cls, v: str) -> str:
        if v not in ("Always", "IfNotPresent", "Never"):
            raise ValueError("must be Always, IfNotPresent or Never")
        return v
