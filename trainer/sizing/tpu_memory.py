"""How much memory each TPU chip has: what one chip's share of a job's weights, optimizer state,
activations and KV cache must fit in (fit.py).

Kept apart from the slice table (trainer/contract/tpu.py), which the spec is validated against: a spec never
states memory, only the fit estimate reads it.
"""

from __future__ import annotations

from trainer.contract.tpu import TpuSlice

GIB = 1024**3
# High-bandwidth memory per chip by generation (Google Cloud TPU docs, "TPU versions").
HBM_GIB_PER_CHIP: dict[str, int] = {
    "v6e": 32,
    "v5e": 16,
    "v5p": 95,
    # TPU7x: what one JAX device holds, because the estimate shares a job out over devices (TpuSlice.trainer_devices)
    # and a TPU7x chip is two of them. Google's sources disagree on the chip's unit: the table of
    # docs.cloud.google.com/tpu/docs/tpu7x says 192 GiB, reports of Google's Ironwood launch "192 GB" (179 GiB;
    # aiwiki.ai/wiki/tpu_ironwood); the table's GiB is taken, as for v6e's 32 and v5p's 95 beside it. No page says
    # how a chip's memory splits between its two devices: half each is assumed.
    "tpu7x": 96,
}


def hbm_bytes_per_chip(tpu: TpuSlice) -> int:
    return HBM_GIB_PER_CHIP[tpu.generation] * GIB
