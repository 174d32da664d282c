"""How much memory each TPU chip has: what one chip's share of a job's weights, optimizer state,
activations and KV cache must fit in (fit.py).

The figures are trainer/contract/accelerators/tpu_generations.py's, per JAX device.
"""

from __future__ import annotations

from trainer.contract.accelerators.tpu import TpuSlice
from trainer.contract.accelerators.tpu_generations import GIB as GIB
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS, tpu_generation

# What one JAX device holds, by generation (trainer/contract/accelerators/tpu_generations.py): the estimate shares a job out over
# devices (TpuSlice.trainer_devices), and a TPU7x chip is two of them.
HBM_GIB_PER_CHIP: dict[str, int] = {name: g.hbm_bytes_per_device // GIB for name, g in TPU_GENERATIONS.items()}


def hbm_bytes_per_chip(tpu: TpuSlice) -> int:
    return tpu_generation(tpu.generation).hbm_bytes_per_device


def allocatable_bytes_per_chip(tpu: TpuSlice) -> int:
    """What XLA may allocate of one device: the generation's measured figure, all of its HBM where never read."""
    return tpu_generation(tpu.generation).allocatable_bytes_per_device
