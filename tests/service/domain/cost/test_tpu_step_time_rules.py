"""Two rules of the TPU train-time estimate (service/domain/cost/tpu_step_time.py) that the measured shapes alone do not
pin, each with the case that tells it from its near miss: a job with beta 0 runs no reference log-prob pass (every
measured shape had beta > 0), and the measured shape whose utilization a model borrows is the nearest in log size, not
in parameters (a 240M and a 470M model are where the two differ)."""

from __future__ import annotations

import math

import pytest

from service.domain.cost.tpu_step_time import (
    LOGPROB_FLOPS_PER_TOKEN,
    PEAK_BF16_FLOPS_PER_CHIP,
    UPDATE_FLOPS_PER_TOKEN,
    measured_rates,
    tpu_train_time,
)
from tests.service.service_helpers import record_spec
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import TpuSlice, tpu_slice
from trainer.contract.run.goodput import UPDATE
from trainer.sizing.model_shapes import ModelShape


def _model(layers: int) -> ModelShape:
    """SmolLM2's block (960 wide, 15 query and 5 kv heads of 64, a 2560 MLP, 49,152 tied tokens), `layers` deep."""
    return ModelShape(960, 15, 5, layers, 2560, head_dim=64, vocab_size=49152, tied_embeddings=True)


def _spec(**grpo: object) -> JobSpec:
    hardware = {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"}
    base = {"num_batches": 4, "batch_size": 2, "num_generations": 4, "checkpoint_period": 4, "num_test_batches": 0}
    return record_spec(hardware=hardware, grpo=base | grpo)


def _v5e() -> TpuSlice:
    tpu = tpu_slice("v5e-1")
    assert tpu is not None
    return tpu


def _update_s(spec: JobSpec, model: ModelShape, utilization: float, logprob_passes: int) -> float:
    g = spec.grpo
    tokens = g.max_target_length * g.batch_size * g.num_generations
    per_batch = g.num_iterations * UPDATE_FLOPS_PER_TOKEN + logprob_passes * LOGPROB_FLOPS_PER_TOKEN
    return g.num_batches * tokens * model.parameters * per_batch / (PEAK_BF16_FLOPS_PER_CHIP["v5e"] * utilization)


@pytest.mark.parametrize(
    ("layers", "millions", "borrowed", "by_difference"),
    [
        (19, 234, "smollm2-360m-b4", "smollm2-135m-b4"),  # 1.55x below 362M, 1.74x above 135M; 100M from 135M
        (43, 470, "qwen3-0.6b-b1", "smollm2-360m-b4"),  # 1.27x below 596M, 1.30x above 362M; 108M from 362M
    ],
)
def test_a_model_between_measured_sizes_borrows_the_utilization_of_the_nearest_in_log_size(
    layers: int, millions: int, borrowed: str, by_difference: str
) -> None:
    model, rates = _model(layers), measured_rates()
    assert round(model.parameters / 1e6) == millions
    shapes = {s.name: s for s in rates.shapes}
    assert min(rates.shapes, key=lambda s: abs(s.parameters - model.parameters)).name == by_difference  # the near miss
    spec = _spec(beta=0.04)
    estimate = tpu_train_time(spec, model, _v5e(), rates)
    assert f"as measured on {borrowed} ({shapes[borrowed].parameters:,} parameters" in estimate.words
    assert estimate.parts[UPDATE] == pytest.approx(_update_s(spec, model, shapes[borrowed].utilization, logprob_passes=1))
    assert not math.isclose(shapes[borrowed].utilization, shapes[by_difference].utilization)


def test_a_job_without_a_reference_model_counts_no_reference_log_prob_pass() -> None:
    model, rates = _model(32), measured_rates()
    utilization = {s.name: s for s in rates.shapes}["smollm2-360m-b4"].utilization
    without = tpu_train_time(_spec(beta=0.0), model, _v5e(), rates)
    with_reference = tpu_train_time(_spec(beta=0.04), model, _v5e(), rates)
    assert without.parts[UPDATE] == pytest.approx(_update_s(_spec(beta=0.0), model, utilization, logprob_passes=0))
    # 6 FLOPs per token and parameter against 6 + 2: the reference's pass would make it a third too high.
    assert with_reference.parts[UPDATE] / without.parts[UPDATE] == pytest.approx(8 / 6)
    assert f"{LOGPROB_FLOPS_PER_TOKEN} x 0 log-prob pass(es)" in without.words
