"""TPU slice facts every spec is checked against, whatever launches it: the one home of these facts.

Sources: the GKE "Plan TPUs" reference tables and xpk's `system_characteristics.py`. A slice is named
`<generation>-<count>`; v5p counts TensorCores (2 per chip), so v5p-8 is 4 chips on one VM. GKE offers
a 2x4 v6e (or v5e) slice both as one 8-chip VM and as two 4-chip VMs; rljob runs it as the single
8-chip VM (ct6e-standard-8t, the tutorial's machine), so one process sees all 8 chips and
`chips_per_vm` is 8. Larger v6e slices are built from 4-chip VMs.
v5e (one TensorCore per chip, so its count is chips): Cloud TPU's "TPU v5e" page gives the 2D shapes 1x1 (1 chip),
2x2 (4) and 2x4 (8), each one VM (ct5lp-hightpu-1t, -4t, -8t; Google's API calls them v5litepod-1, -4, -8).
TPU7x (Ironwood; docs.cloud.google.com/tpu/docs/tpu7x): two TensorCores per chip, so its count is TensorCores as
for v5p and as Google and xpk spell it (tpu7x-8 = 2x2x1, 4 chips; xpk system_characteristics.py); every VM is
tpu7x-standard-4t with 4 chips ("Each Ironwood (TPU7x) VM contains four chips": GKE's "About Ironwood (TPU7x) in
GKE"), so 2x2x2 is two VMs. Unlike v5p (megacore), a TPU7x chip has no megacore: JAX sees each TensorCore as a
device of its own (jax.experimental.pallas.tpu.ChipVersion: 7x, 2 cores, megacore "No"; vllm-project/tpu-inference
PR 1266: tpu7x-8 shows 8 devices), so its slices have twice as many devices as chips.

Each generation's chip (memory, FLOP/s, bandwidth, devices, GKE's labels and machine types, prices) is a row of
trainer/contract/accelerators/tpu_generations.py; what only a GKE pod needs besides (its CPU, memory and shm requests) lives
beside the manifests in service/adapters/k8s/accelerators.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.contract.accelerators.tpu_generations import tpu_generation

CPU_ACCELERATOR = "cpu"


@dataclass(frozen=True)
class TpuSlice:
    name: str  # rljob's accelerator name, e.g. v6e-8
    generation: str  # v6e, v5p, v5e, tpu7x
    topology: str  # chips along each ICI axis, e.g. 2x4
    chips_per_vm: int
    vms_per_slice: int

    @property
    def devices_per_chip(self) -> int:
        """JAX devices per chip: what MaxText shards over and splits the rollout by. 1 where a chip is one device (one
        TensorCore, or v5p's two joined as a megacore); 2 on TPU7x (see the module docstring)."""
        return tpu_generation(self.generation).devices_per_chip

    @property
    def chips(self) -> int:
        return self.chips_per_vm * self.vms_per_slice

    @property
    def devices(self) -> int:
        return self.chips * self.devices_per_chip

    @property
    def multi_host(self) -> bool:
        return self.vms_per_slice > 1

    @property
    def trainer_devices(self) -> int:
        """Devices the actor and reference models are sharded over (FSDP): every device on one VM, where
        training and rollout share them; on several VMs `trainer_devices_fraction` (0.5), the rest
        being the rollout's (model_creation_utils.setup_configs_and_devices)."""
        return self.devices // 2 if self.multi_host else self.devices

    @property
    def rollout_devices(self) -> int:
        """Devices MaxText 0.2.5's train_rl gives the rollout: every device on one VM; on several VMs
        with Pathways (rl.yml's default on TPU) `sampler_devices_fraction` (0.5) of them
        (model_creation_utils.setup_configs_and_devices)."""
        return self.devices // 2 if self.multi_host else self.devices


def _v6e_multi_host(chips: int, topology: str) -> TpuSlice:
    return TpuSlice(f"v6e-{chips}", "v6e", topology, chips_per_vm=4, vms_per_slice=chips // 4)


TPU_SLICES: dict[str, TpuSlice] = {
    s.name: s
    for s in (
        TpuSlice("v6e-1", "v6e", "1x1", chips_per_vm=1, vms_per_slice=1),
        TpuSlice("v6e-4", "v6e", "2x2", chips_per_vm=4, vms_per_slice=1),
        TpuSlice("v6e-8", "v6e", "2x4", chips_per_vm=8, vms_per_slice=1),
        _v6e_multi_host(16, "4x4"),
        _v6e_multi_host(32, "4x8"),
        _v6e_multi_host(64, "8x8"),
        _v6e_multi_host(128, "8x16"),
        _v6e_multi_host(256, "16x16"),
        TpuSlice("v5p-8", "v5p", "2x2x1", chips_per_vm=4, vms_per_slice=1),
        TpuSlice("v5e-1", "v5e", "1x1", chips_per_vm=1, vms_per_slice=1),
        TpuSlice("v5e-4", "v5e", "2x2", chips_per_vm=4, vms_per_slice=1),
        TpuSlice("v5e-8", "v5e", "2x4", chips_per_vm=8, vms_per_slice=1),
        # The smallest single- and multi-host TPU7x slices; larger ones (2x2x4 and up) add VMs the same way.
        TpuSlice("tpu7x-8", "tpu7x", "2x2x1", chips_per_vm=4, vms_per_slice=1),
        TpuSlice("tpu7x-16", "tpu7x", "2x2x2", chips_per_vm=4, vms_per_slice=2),
    )
}

ACCELERATOR_NAMES: tuple[str, ...] = (CPU_ACCELERATOR, *TPU_SLICES)
MAX_CHIPS_PER_VM = max(s.chips_per_vm for s in TPU_SLICES.values())
# `hardware.accelerator: cpu` runs JAX on the host CPU, which JAX presents as one device (the trainer
# sets no --xla_force_host_platform_device_count for train_rl).
CPU_ROLLOUT_DEVICES = 1


def tpu_slice(name: str) -> TpuSlice | None:
    """The slice named `name`, or None for `cpu` and for names not in the table."""
    return TPU_SLICES.get(name)


def rollout_devices(accelerator: str) -> int:
    tpu = tpu_slice(accelerator)
    return tpu.rollout_devices if tpu else CPU_ROLLOUT_DEVICES


# MaxText 0.2.5's rule for splitting the rollout devices (model_creation_utils.
# get_rollout_kwargs_for_parallelism, expert parallelism 1), which train_rl applies only after the job
# has started: at most one of data and tensor parallelism is -1 (derived from the other), each given
# one divides the rollout devices, and when both are given their product is the device count.


def rollout_share_problem(value: int, devices: int) -> str | None:
    """Why one parallelism value cannot split `devices`, or None."""
    if value != -1 and devices % value:
        return f"{value} does not divide the {devices} rollout device(s) of this accelerator"
    return None


def rollout_split_problem(data: int, tensor: int, devices: int) -> str | None:
    """Why data x tensor parallelism cannot cover `devices` exactly, or None."""
    if data == -1 and tensor == -1:
        return "rollout_data_parallelism and rollout_tensor_parallelism cannot both be -1: set one of them"
    if data != -1 and tensor != -1 and data * tensor != devices:
        return (
            f"rollout_data_parallelism * rollout_tensor_parallelism = {data * tensor}, but the rollout has "
            f"{devices} device(s) on this accelerator: make them equal, or set one of the two to -1"
        )
    return None
