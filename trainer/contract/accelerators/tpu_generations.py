"""Facts about each TPU generation: one row per generation, the one place they live.

Each slice of trainer/contract/accelerators/tpu.py names its generation. This table gives the generation's chip: its memory, peak
bf16 FLOP/s and HBM bandwidth, how many JAX devices it is, GKE's node label and machine types, Google's API name
for it, its list prices and, where a chip was read, what XLA may allocate of it. Every other module reads these facts
from here: the fit estimate (trainer/sizing/tpu_memory.py), the step-time estimate
(service/domain/cost/tpu_step_time.py), the chip benches (bench/chip/), the price table (service/domain/cost/usage.py),
the GKE manifests (service/adapters/k8s/accelerators.py) and the TPU VM probe (service/adapters/local/host_tpu.py).
tests/trainer/contract/accelerators/test_tpu_generations.py checks that every generation a slice names has a row, and that each
reader agrees with it.

Sources: per chip, docs.cloud.google.com/tpu/docs/v5e ("HBM2 capacity and bandwidth: 16 GB, 819 GBps", 197 TFLOPs
bf16); cloud.google.com/tpu/docs/v6e (918 TFLOPs bf16, 1640 GBps, 32 GiB); docs.cloud.google.com/tpu/docs/v5p-training
(459 TFLOPs bf16, 2765 GBps, 95 GiB); docs.cloud.google.com/tpu/docs/tpu7x (2307 TFLOPs bf16, 7380 GBps, 192 GiB in its
table; reports of the launch say "192 GB", and the table's GiB is taken as for v6e's 32 and v5p's 95). A TPU7x chip is
two JAX devices (tpu.py's docstring); no page says how its memory and bandwidth split between them, so half each is
assumed wherever a figure is needed per device. Prices: docs/usage.md says where they come from; rljob knows no
TPU7x price, so its jobs show "no price" and a dollar budget refuses them (service/domain/cost/budget_admission.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

GIB = 1024**3
CAPACITIES = ("on-demand", "spot", "flex-start", "reservation")  # HardwareSpec.capacity's values


@dataclass(frozen=True)
class TpuGeneration:
    name: str
    hbm_gib_per_chip: int
    peak_bf16_flops_per_chip: float
    hbm_bytes_per_s_per_chip: float
    devices_per_chip: int  # JAX devices a chip is: what MaxText shards over
    gke_accelerator: str  # the value of cloud.google.com/gke-tpu-accelerator on its nodes
    gke_machine_types: Mapping[int, str]  # chips per VM -> GKE machine type
    # USD per chip-hour by capacity; empty where rljob knows no price (shown as "no price")
    list_prices_usd_per_chip_hour: Mapping[str, float] = field(default_factory=dict)
    google_api_prefix: str | None = None  # Google's name for its slices where it differs from rljob's (v5litepod-)
    # What XLA may allocate of one device where a chip of it said so (JAX's memory_stats()["bytes_limit"]; libtpu keeps
    # the rest); None: never read, and the fit estimate takes all of the device's HBM.
    measured_allocatable_bytes_per_device: int | None = None

    @property
    def hbm_bytes_per_device(self) -> int:
        return self.hbm_gib_per_chip * GIB // self.devices_per_chip

    @property
    def allocatable_bytes_per_device(self) -> int:
        return self.measured_allocatable_bytes_per_device or self.hbm_bytes_per_device

    @property
    def peak_bf16_flops_per_device(self) -> float:
        return self.peak_bf16_flops_per_chip / self.devices_per_chip

    @property
    def hbm_bytes_per_s_per_device(self) -> float:
        return self.hbm_bytes_per_s_per_chip / self.devices_per_chip


def _frozen(mapping: dict) -> Mapping:  # type: ignore[type-arg]
    return MappingProxyType(mapping)


TPU_GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration(
            "v6e",
            hbm_gib_per_chip=32,
            peak_bf16_flops_per_chip=918e12,
            hbm_bytes_per_s_per_chip=1640e9,
            devices_per_chip=1,
            gke_accelerator="tpu-v6e-slice",
            gke_machine_types=_frozen({1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"}),
            list_prices_usd_per_chip_hour=_frozen({"on-demand": 2.70, "spot": 1.08, "flex-start": 1.35, "reservation": 1.89}),
        ),
        TpuGeneration(
            "v5e",
            hbm_gib_per_chip=16,
            peak_bf16_flops_per_chip=197e12,
            hbm_bytes_per_s_per_chip=819e9,
            devices_per_chip=1,
            gke_accelerator="tpu-v5-lite-podslice",
            gke_machine_types=_frozen({1: "ct5lp-hightpu-1t", 4: "ct5lp-hightpu-4t", 8: "ct5lp-hightpu-8t"}),
            list_prices_usd_per_chip_hour=_frozen({"on-demand": 1.20, "spot": 0.48, "flex-start": 0.60, "reservation": 0.84}),
            google_api_prefix="v5litepod-",  # Cloud TPU's "TPU v5e" page: AcceleratorType v5litepod-1, -4, -8
            measured_allocatable_bytes_per_device=16_909_336_064,  # the lent chip (bench/results/tpu_grpo.json bytes_limit)
        ),
        TpuGeneration(
            "v5p",
            hbm_gib_per_chip=95,
            peak_bf16_flops_per_chip=459e12,
            hbm_bytes_per_s_per_chip=2765e9,
            devices_per_chip=1,  # its two TensorCores are one megacore device
            gke_accelerator="tpu-v5p-slice",
            gke_machine_types=_frozen({4: "ct5p-hightpu-4t"}),
            list_prices_usd_per_chip_hour=_frozen({"on-demand": 4.20, "spot": 1.68, "flex-start": 2.10, "reservation": 2.94}),
        ),
        TpuGeneration(
            "tpu7x",
            hbm_gib_per_chip=192,
            peak_bf16_flops_per_chip=2307e12,
            hbm_bytes_per_s_per_chip=7380e9,
            devices_per_chip=2,
            gke_accelerator="tpu7x",  # GKE's "About Ironwood (TPU7x) in GKE"; xpk's gke_accelerator too
            gke_machine_types=_frozen({4: "tpu7x-standard-4t"}),
        ),
    )
}


def tpu_generation(name: str) -> TpuGeneration:
    """The row of generation `name`; KeyError names the generations there are."""
    try:
        return TPU_GENERATIONS[name]
    except KeyError:
        raise KeyError(
            f"no TPU generation {name!r} in trainer/contract/accelerators/tpu_generations.py ({', '.join(TPU_GENERATIONS)})"
        ) from None
