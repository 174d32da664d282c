"""What a TPU slice means to a GKE scheduler: node labels, machine types and pod sizes.

The TPU facts themselves (topology, chips per VM, VMs per slice) have one home,
trainer/contract/accelerators/tpu.py, where every spec is checked against them at submit; this module adds only
what GKE needs, keyed by generation and VM size. The machine type is pinned through the well-known
`node.kubernetes.io/instance-type` label, so a pod asking for 8 chips can never land on a 4-chip VM
of the same accelerator, and that mismatch is visible at once. Sources: the GKE "Plan TPUs" tables
and xpk's `system_characteristics.py`; for v5e's VMs (vCPUs, memory), the "VM types" table of Cloud TPU's
"TPU v5e" page;
for TPU7x's, the table of Cloud TPU's "TPU7x (Ironwood)" page.

`cpu` is not a TPU: it is one plain pod on any node, sized by settings (CpuHost, lookup_hardware).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, TPU_SLICES, TpuSlice
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS

from .errors import UnsupportedAccelerator

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# The well-known node label every GKE node carries; pins the VM shape (see the module docstring).
MACHINE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GKE_NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_RESOURCE = "google.com/tpu"

# Value of cloud.google.com/gke-tpu-accelerator per TPU generation (trainer/contract/accelerators/tpu_generations.py).
GKE_ACCELERATORS = {name: g.gke_accelerator for name, g in TPU_GENERATIONS.items()}


@dataclass(frozen=True)
class GkeMachine:
    """A TPU VM shape and what the trainer container asks for on it. Requests stay below the
    machine's allocatable so the kubelet, GKE's system pods and the TPU device plugin still fit;
    memory equals the limit so an out-of-memory kill is deterministic (OOMKilled), not an eviction."""

    machine_type: str
    cpu_request: str
    memory_request: str
    shm_size: str  # /dev/shm: JAX/vLLM host buffers; counts against the memory limit


# What the trainer container asks for on each machine type (cpu, memory, shm); the machine types are the generations'.
_REQUESTS: dict[str, tuple[str, str, str]] = {
    "ct6e-standard-1t": ("40", "150Gi", "32Gi"),  # 44 vCPU, 176 GB
    "ct6e-standard-4t": ("160", "640Gi", "128Gi"),  # 180 vCPU, 720 GB
    "ct6e-standard-8t": ("160", "1280Gi", "256Gi"),  # 180 vCPU, 1440 GB; the tutorial's
    "ct5p-hightpu-4t": ("180", "400Gi", "64Gi"),  # 208 vCPU, 448 GB
    "ct5lp-hightpu-1t": ("20", "40Gi", "8Gi"),  # 24 vCPU, 48 GB
    "ct5lp-hightpu-4t": ("100", "170Gi", "32Gi"),  # 112 vCPU, 192 GB
    "ct5lp-hightpu-8t": ("200", "340Gi", "64Gi"),  # 224 vCPU, 384 GB
    # 224 vCPU, 960 GB (docs.cloud.google.com/tpu/docs/tpu7x, "4-chip VM"); split over two NUMA nodes, which GKE's
    # Ironwood page suggests using with one container per node: rljob runs one trainer container over both.
    "tpu7x-standard-4t": ("200", "800Gi", "128Gi"),
}
# (generation, chips per VM) -> machine.
GKE_MACHINES: dict[tuple[str, int], GkeMachine] = {
    (name, chips): GkeMachine(machine_type, *_REQUESTS[machine_type])
    for name, g in TPU_GENERATIONS.items()
    for chips, machine_type in g.gke_machine_types.items()
}


@dataclass(frozen=True)
class GkeTpuSlice:
    """A slice from the TPU table with the GKE facts needed to schedule it."""

    tpu: TpuSlice
    gke_accelerator: str  # value of cloud.google.com/gke-tpu-accelerator
    machine: GkeMachine

    # The TPU facts, read through from the table, and the machine's: what manifests ask of a slice.
    @property
    def name(self) -> str:
        return self.tpu.name

    @property
    def topology(self) -> str:  # value of cloud.google.com/gke-tpu-topology
        return self.tpu.topology

    @property
    def chips_per_vm(self) -> int:  # google.com/tpu per pod (one pod per VM)
        return self.tpu.chips_per_vm

    @property
    def vms_per_slice(self) -> int:
        return self.tpu.vms_per_slice

    @property
    def multi_host(self) -> bool:
        return self.tpu.multi_host

    @property
    def chips(self) -> int:
        return self.tpu.chips

    @property
    def machine_type(self) -> str:
        return self.machine.machine_type

    @property
    def cpu_request(self) -> str:
        return self.machine.cpu_request

    @property
    def memory_request(self) -> str:
        return self.machine.memory_request

    @property
    def shm_size(self) -> str:
        return self.machine.shm_size


def _on_gke(tpu: TpuSlice) -> GkeTpuSlice | None:
    machine = GKE_MACHINES.get((tpu.generation, tpu.chips_per_vm))
    accelerator = GKE_ACCELERATORS.get(tpu.generation)
    return GkeTpuSlice(tpu, accelerator, machine) if machine and accelerator else None


ACCELERATORS: dict[str, GkeTpuSlice] = {name: gke for name, tpu in TPU_SLICES.items() if (gke := _on_gke(tpu)) is not None}


@dataclass(frozen=True)
class CpuHost:
    """`hardware.accelerator: cpu`: a single pod with no TPU selector, toleration or google.com/tpu."""

    name: str = CPU_ACCELERATOR
    vms_per_slice: int = 1
    multi_host: bool = False


Hardware = GkeTpuSlice | CpuHost


def lookup_accelerator(name: str) -> GkeTpuSlice:
    try:
        return ACCELERATORS[name]
    except KeyError:
        known = ", ".join(ACCELERATORS)
        raise UnsupportedAccelerator(f"accelerator {name!r} has no Kubernetes mapping; use one of {known}, or {CPU_ACCELERATOR}") from None


def lookup_hardware(name: str) -> Hardware:
    return CpuHost() if name == CPU_ACCELERATOR else lookup_accelerator(name)
