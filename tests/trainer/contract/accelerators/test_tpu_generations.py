"""One row per TPU generation (trainer/contract/accelerators/tpu_generations.py), and every reader of a generation's facts reads
that row: the slices, the fit estimate, the step-time estimate, the price table, GKE's labels and machines, Google's
API names."""

from __future__ import annotations

import pytest

from service.adapters.k8s.accelerators import ACCELERATORS, GKE_ACCELERATORS, GKE_MACHINES
from service.adapters.local.host_tpu import GOOGLE_TYPE_PREFIXES
from service.domain.cost.tpu_step_time import HBM_BYTES_PER_S_PER_CHIP, PEAK_BF16_FLOPS_PER_CHIP
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, price_of
from trainer.contract.accelerators.tpu import TPU_SLICES
from trainer.contract.accelerators.tpu_generations import CAPACITIES, GIB, TPU_GENERATIONS, tpu_generation
from trainer.sizing.tpu_memory import allocatable_bytes_per_chip, hbm_bytes_per_chip


def test_every_slice_names_a_generation_with_a_row_and_runs_on_gke():
    for name, tpu in TPU_SLICES.items():
        generation = tpu_generation(tpu.generation)
        assert tpu.devices_per_chip == generation.devices_per_chip, name
        assert tpu.chips_per_vm in generation.gke_machine_types, f"{name}: no GKE machine with {tpu.chips_per_vm} chips"
        assert ACCELERATORS[name].machine.machine_type == generation.gke_machine_types[tpu.chips_per_vm]
    assert set(ACCELERATORS) == set(TPU_SLICES)
    with pytest.raises(KeyError, match="no TPU generation 'v9z'"):
        tpu_generation("v9z")


@pytest.mark.parametrize("name", sorted(TPU_GENERATIONS))
def test_each_reader_takes_the_generations_row(name):
    g = TPU_GENERATIONS[name]
    one = next(tpu for tpu in TPU_SLICES.values() if tpu.generation == name)
    assert hbm_bytes_per_chip(one) * g.devices_per_chip == g.hbm_gib_per_chip * GIB  # per device, the chip shared out
    # what XLA may allocate: the generation's measured figure where a chip said it, else all of a device's HBM
    assert allocatable_bytes_per_chip(one) == (g.measured_allocatable_bytes_per_device or hbm_bytes_per_chip(one))
    assert PEAK_BF16_FLOPS_PER_CHIP[name] * g.devices_per_chip == g.peak_bf16_flops_per_chip
    assert HBM_BYTES_PER_S_PER_CHIP[name] * g.devices_per_chip == g.hbm_bytes_per_s_per_chip
    assert GKE_ACCELERATORS[name] == g.gke_accelerator
    assert {chips for (gen, chips) in GKE_MACHINES if gen == name} == set(g.gke_machine_types)
    for capacity in CAPACITIES:
        assert price_of(DEFAULT_PRICES_USD_PER_CHIP_HOUR, name, capacity) == g.list_prices_usd_per_chip_hour.get(capacity)
    if g.google_api_prefix:
        assert GOOGLE_TYPE_PREFIXES[g.google_api_prefix] == f"{name}-"


def test_a_generation_is_priced_for_every_capacity_or_not_at_all():
    """Half a price row would price some capacities and silently not others; tpu7x has none (rljob knows no price)."""
    for name, g in TPU_GENERATIONS.items():
        assert set(g.list_prices_usd_per_chip_hour) in (set(), set(CAPACITIES)), name
    assert not TPU_GENERATIONS["tpu7x"].list_prices_usd_per_chip_hour
