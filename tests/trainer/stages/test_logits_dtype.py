"""model.logits_dtype (issue 66 §2): float32 logits in the trainer and the rollout engine alike, read from the one
MaxText config both build from. On the chip the bf16 logits' rounding was nearly all of the sampler-trainer gap
(bench/chip/README.md, the precision variants), so the option is only useful if both sides take it."""

from __future__ import annotations

import pytest

from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout
from trainer.contract.spec.hashing import hash_body
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command


@pytest.mark.parametrize(("choice", "fp32"), [("bfloat16", False), ("float32", True)])
def test_maxtext_and_the_rollout_engine_read_the_logits_dtype_from_the_train_command(maxtext_loader, tiny_spec_dict, choice, fp32):
    import jax.numpy as jnp

    from trainer.rollout.cached_llama import LlamaShape

    tpu = with_field(tiny_spec_dict, "hardware", {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"})
    spec = JobSpec.model_validate(with_field(tpu, "model.logits_dtype", choice))
    config = maxtext_loader(build_train_command(spec, RunLayout(spec.output, "rl-logits000001"), resolve_model(spec)))
    assert config.logits_dot_in_fp32 is fp32
    assert config.dtype == "bfloat16"  # the rest stays in the compute dtype
    assert LlamaShape.from_config(config).logits_dtype == (jnp.float32 if fp32 else jnp.bfloat16)


def test_a_spec_that_leaves_it_out_keeps_its_hash(tiny_spec_dict):
    spec = JobSpec.model_validate(tiny_spec_dict)
    assert "logits_dtype" not in hash_body(spec)["model"]
    assert (
        hash_body(JobSpec.model_validate(with_field(tiny_spec_dict, "model.logits_dtype", "float32")))["model"]["logits_dtype"] == "float32"
    )
