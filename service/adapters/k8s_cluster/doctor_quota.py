"""`rljob doctor`'s quota check: can each TPU flavor of a team's ClusterQueue ever admit the smallest trainer of its
slice shape, and the eval flavor (`cpu-eval`) an eval job? The pod is rendered as the launcher would render it (these
settings' cpu and memory requests and the slice's chips; an eval pod's RLJOB_K8S_CPU_JOB_* size) and checked with the
submit check's own rules (kueue_setup.refusal: every resource the pod requests against the flavor's nominalQuota in
the resource group covering it, as Kueue v0.19.2's flavor assigner does). A flavor that fails could never start a job
of its kind: each one submitted would be refused at submit. Pure: reads nothing beyond the chain the queue check
already read.
"""

from __future__ import annotations

from dataclasses import replace

from service.adapters.k8s.accelerators import ACCELERATORS, GKE_ACCELERATOR_LABEL, GKE_TOPOLOGY_LABEL, GkeTpuSlice
from service.adapters.k8s.capacity import EVAL_POOL, RESERVATION_NAME_LABEL
from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.kueue_setup import Flavor, QueueChain, demand_of, format_quantity, refusal
from service.adapters.k8s.manifests import build_workload
from service.adapters.k8s.settings import K8sSettings
from service.domain.self_check import CheckLine
from trainer.contract import JobSpec
from trainer.contract.spec.hardware import CAPACITY_KINDS

PROBE_JOB_ID = "rl-doctorquota0"  # a name for the rendered manifests; nothing is created


def smallest_slice(flavor: Flavor) -> GkeTpuSlice | None:
    """The smallest slice whose nodes the flavor's labels describe (accelerator and topology); None if no slice does."""
    labels = flavor.node_labels
    fits = [
        s
        for s in ACCELERATORS.values()
        if s.gke_accelerator == labels.get(GKE_ACCELERATOR_LABEL) and s.topology == labels.get(GKE_TOPOLOGY_LABEL)
    ]
    return min(fits, key=lambda s: s.chips) if fits else None


def _probe_spec(tpu: GkeTpuSlice, flavor: Flavor, team: str | None) -> JobSpec:
    hardware: dict[str, object] = {"accelerator": tpu.name, "chips_per_vm": tpu.chips_per_vm}
    if flavor.capacity in CAPACITY_KINDS:
        hardware["capacity"] = flavor.capacity
        if flavor.capacity == "reservation":
            hardware["reservation"] = flavor.node_labels.get(RESERVATION_NAME_LABEL) or "unnamed"
    return JobSpec.model_validate(
        {
            "name": "doctor-quota",
            "model": {"source": "org/model"},
            "dataset": {"name": "org/data"},
            "hardware": hardware,
            "output": "gs://doctor/quota",
            **({"team": team} if team else {}),
        }
    )


def _eval_probe_spec(team: str | None) -> JobSpec:
    """The eval job the eval flavor must hold: a cpu pod of these settings' size (what every eval pod asks)."""
    return JobSpec.model_validate(
        {
            "name": "doctor-eval-quota",
            "model": {"source": "org/model"},
            "hardware": {
                "accelerator": "cpu",
                "chips_per_vm": 1,
                "rollout_engine": "jax",
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": 1,
            },
            "output": "gs://doctor/quota",
            "evaluation": {"suite": {"name": "arith"}, "checkpoint": {"format": "huggingface", "label": "base"}},
            **({"team": team} if team else {}),
        }
    )


def _alone(chain: QueueChain, flavor: Flavor) -> QueueChain:
    """The chain with only this flavor in the groups that list it (other groups, e.g. a cpu one, unchanged)."""
    groups = [
        replace(g, flavors=[f for f in g.flavors if f.name == flavor.name], missing_flavors=[]) if flavor in g.flavors else g
        for g in chain.resource_groups()
    ]
    return replace(chain, flavors=[flavor], missing_flavors=[], groups=groups)


def quota_checks(chain: QueueChain, settings: K8sSettings) -> list[CheckLine]:
    lines = []
    # A team of this LocalQueue, so the trainer renders as that team's would (None: the default queue's).
    team = next((t for t, q in sorted(settings.kueue_team_queues.items()) if q == chain.local_queue), None)
    # The image does not change what a pod requests; the doctor may run where none is configured.
    settings = settings.model_copy(update={"image": settings.image or "doctor-quota-probe"})
    for flavor in chain.flavors:
        tpu = smallest_slice(flavor)
        eval_flavor = flavor.capacity == EVAL_POOL
        if tpu is None and not eval_flavor:
            continue  # not a TPU flavor of a slice rljob knows, nor the eval pool's: nothing to render
        what = f"a {tpu.name} trainer" if tpu is not None else "an eval job"
        name = f"quota of flavor {flavor.name} (ClusterQueue {chain.cluster_queue})"
        probe = _probe_spec(tpu, flavor, team) if tpu is not None else _eval_probe_spec(team)
        try:
            demand = demand_of(build_workload(probe, PROBE_JOB_ID, settings))
        except (ManifestError, ValueError) as exc:
            lines.append(CheckLine("warn", name, f"cannot render {what} to check it: {exc}"))
            continue
        refused = refusal(_alone(chain, flavor), demand)
        if refused is None:
            asks = ", ".join(f"{format_quantity(q, r)} {r}" for r, q in sorted(demand.requests(False).items()))
            lines.append(CheckLine("ok", name, f"holds {what} ({asks})"))
        else:
            lower = (
                "RLJOB_K8S_CPU_JOB_CPU / RLJOB_K8S_CPU_JOB_MEMORY" if tpu is None else "RLJOB_K8S_CPU_REQUEST / RLJOB_K8S_MEMORY_REQUEST"
            )
            fix = f"raise the flavor's nominalQuota in ClusterQueue {chain.cluster_queue} (k8s/kueue/clusterqueue.yaml), or lower {lower}"
            lines.append(CheckLine("fail", name, f"can never admit {what}: {refused}", fix))
    return lines
