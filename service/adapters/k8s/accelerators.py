"""TPU facts in one table: what a TPU type means to a GKE scheduler.

Sources: the GKE "Plan TPUs" reference tables and xpk's `system_characteristics.py`. Where they
differ we follow GKE: a 2x4 v6e (or v5e) slice exists both as one 8-chip VM (ct6e-standard-8t,
single-host) and as two 4-chip VMs (ct6e-standard-4t, multi-host; xpk's default). rljob runs v6e-8
and v5e-8 single-host, so the table pins the 8-chip machine type: a pod asking for 8 chips can
never schedule on a 4-chip VM, and the machine-type selector makes that mismatch visible at once.
v5p counts TensorCores in its name (2 per chip), so v5p-8 is 4 chips on one ct5p-hightpu-4t VM.

`cpu` is not a TPU: it is one plain pod on any node, sized by settings (CpuHost, lookup_hardware).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnsupportedAccelerator

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# The well-known node label every GKE node carries; pins the VM shape (see the module docstring).
MACHINE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GKE_NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_RESOURCE = "google.com/tpu"


@dataclass(frozen=True)
class TpuSlice:
    name: str  # rljob's accelerator name, e.g. v6e-8
    gke_accelerator: str  # value of cloud.google.com/gke-tpu-accelerator
    topology: str  # value of cloud.google.com/gke-tpu-topology
    machine_type: str  # GCE machine type of each VM in the slice
    chips_per_vm: int  # google.com/tpu per pod (one pod per VM)
    vms_per_slice: int
    # What the trainer container asks for on each VM. Below the machine's allocatable so the
    # kubelet, GKE's system pods and the TPU device plugin still fit; memory equals the limit so an
    # out-of-memory kill is deterministic (OOMKilled) rather than a node-pressure eviction.
    cpu_request: str
    memory_request: str
    shm_size: str  # /dev/shm: JAX/vLLM host buffers; counts against the memory limit

    @property
    def multi_host(self) -> bool:
        return self.vms_per_slice > 1

    @property
    def chips(self) -> int:
        return self.chips_per_vm * self.vms_per_slice


def _v6e(chips: int, topology: str) -> TpuSlice:
    # v6e multi-host slices are built from 4-chip VMs (ct6e-standard-4t: 180 vCPU, 720 GB).
    return TpuSlice(
        name=f"v6e-{chips}",
        gke_accelerator="tpu-v6e-slice",
        topology=topology,
        machine_type="ct6e-standard-4t",
        chips_per_vm=4,
        vms_per_slice=chips // 4,
        cpu_request="160",
        memory_request="640Gi",
        shm_size="128Gi",
    )


_SLICES: tuple[TpuSlice, ...] = (
    # ct6e-standard-1t: 44 vCPU, 176 GB.
    TpuSlice("v6e-1", "tpu-v6e-slice", "1x1", "ct6e-standard-1t", 1, 1, "40", "150Gi", "32Gi"),
    # ct6e-standard-4t: 180 vCPU, 720 GB (single host at 2x2).
    TpuSlice("v6e-4", "tpu-v6e-slice", "2x2", "ct6e-standard-4t", 4, 1, "160", "640Gi", "128Gi"),
    # ct6e-standard-8t: 180 vCPU, 1440 GB; the tutorial's machine.
    TpuSlice("v6e-8", "tpu-v6e-slice", "2x4", "ct6e-standard-8t", 8, 1, "160", "1280Gi", "256Gi"),
    _v6e(16, "4x4"),
    _v6e(32, "4x8"),
    _v6e(64, "8x8"),
    _v6e(128, "8x16"),
    _v6e(256, "16x16"),
    # ct5p-hightpu-4t: 208 vCPU, 448 GB.
    TpuSlice("v5p-8", "tpu-v5p-slice", "2x2x1", "ct5p-hightpu-4t", 4, 1, "180", "400Gi", "64Gi"),
    # ct5lp-hightpu-8t: 224 vCPU, 192 GB.
    TpuSlice("v5e-8", "tpu-v5-lite-podslice", "2x4", "ct5lp-hightpu-8t", 8, 1, "200", "170Gi", "32Gi"),
)

ACCELERATORS: dict[str, TpuSlice] = {s.name: s for s in _SLICES}
CPU_ACCELERATOR = "cpu"


@dataclass(frozen=True)
class CpuHost:
    """`hardware.accelerator: cpu`: a single pod with no TPU selector, toleration or google.com/tpu."""

    name: str = CPU_ACCELERATOR
    vms_per_slice: int = 1
    multi_host: bool = False


Hardware = TpuSlice | CpuHost


def lookup_accelerator(name: str) -> TpuSlice:
    try:
        return ACCELERATORS[name]
    except KeyError:
        known = ", ".join(ACCELERATORS)
        raise UnsupportedAccelerator(
            f"accelerator {name!r} has no Kubernetes mapping; use one of {known}, or {CPU_ACCELERATOR}"
        ) from None


def lookup_hardware(name: str) -> Hardware:
    return CpuHost() if name == CPU_ACCELERATOR else lookup_accelerator(name)
