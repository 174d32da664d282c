"""How much memory each TPU chip has: what one chip's share of a job's weights, optimizer state,
activations and KV cache must fit in (fit.py).

Kept apart from the slice table (trainer/contract/tpu.py), which the spec is validated against: a spec never
states memory, only the fit estimate reads it.
"""

from __future__ import annotations

from trainer.contract.tpu import TpuSlice

GIB = 1024**3
# High-bandwidth memory per chip by generation (Google Cloud TPU docs, "TPU versions").
HBM_GIB_PER_CHIP: dict[str, int] = {"v6e": 32, "v5e": 16, "v5p": 95}


def hbm_bytes_per_chip(tpu: TpuSlice) -> int:
    return HBM_GIB_PER_CHIP[tpu.generation] * GIB
