"""The per-chip memory estimate (trainer/sizing/fit.py): parameter counts, a breakdown checked against
arithmetic done by hand, the verdicts against each slice's HBM, and growth with the batch and lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import TINY_HF_CONFIG, TUTORIAL_EXAMPLE
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import TPU_SLICES
from trainer.contract.spec.file import load_spec_file
from trainer.sizing.fit import estimate_fit, estimate_job_fit, per_chip_bytes
from trainer.sizing.job_shape import model_shape, read_local_model_config
from trainer.sizing.model_shapes import MAXTEXT_MODELS, ModelShape
from trainer.sizing.tpu_memory import GIB, HBM_GIB_PER_CHIP, hbm_bytes_per_chip

TUTORIAL = load_spec_file(TUTORIAL_EXAMPLE)


def _with(
    spec: JobSpec, *, grpo: dict[str, Any] | None = None, hardware: dict[str, Any] | None = None, model: dict[str, Any] | None = None
) -> JobSpec:
    data = spec.model_dump(mode="json")
    for key, update in (("grpo", grpo), ("hardware", hardware), ("model", model)):
        data[key] = {**data[key], **(update or {})}
    return JobSpec.model_validate(data)  # validated: only specs a user could submit


def _on(spec: JobSpec, accelerator: str) -> JobSpec:
    return _with(spec, hardware={"accelerator": accelerator, "chips_per_vm": TPU_SLICES[accelerator].chips_per_vm})


def test_llama31_8b_has_its_published_parameter_count() -> None:
    # Meta's model card and the safetensors index of Llama-3.1-8B: 8,030,261,248 parameters.
    assert MAXTEXT_MODELS["llama3.1-8b"].parameters == 8_030_261_248


def test_tied_embeddings_are_counted_once() -> None:
    untied = model_shape(None, None, TINY_HF_CONFIG)
    tied = model_shape(None, None, {**TINY_HF_CONFIG, "tie_word_embeddings": True})
    assert untied is not None and tied is not None
    assert untied.parameters - tied.parameters == 128256 * 64


def test_breakdown_matches_a_hand_computed_case() -> None:
    shape = ModelShape(emb_dim=8, num_query_heads=2, num_kv_heads=1, num_layers=2, mlp_dim=16, head_dim=4, vocab_size=10)
    # Per layer: q 8*2*4 + k,v 2*8*1*4 + out 2*4*8 = 192, mlp 3*8*16 = 384, norms 16 -> 592; x2 layers = 1184;
    # embeddings and logits head 2*10*8 = 160; final norm 8: 1352 parameters, 2704 bytes in bf16.
    assert shape.parameters == 1352
    spec = _with(
        _on(TUTORIAL, "v6e-8"),
        grpo={
            "batch_size": 1,
            "num_generations": 2,
            "max_prefill_predict_length": 4,
            "max_target_length": 8,
            "kv_cache_buffer": 2,
            "beta": 0.08,
        },
        hardware={"rollout_data_parallelism": 2, "rollout_tensor_parallelism": 4},
    )
    parts, trainer, rollout = per_chip_bytes(spec, shape)
    assert (trainer, rollout) == (8, 8)
    # Training state over 8 chips: 2704 / 8 = 338 each for params, gradients, reference; 2 x 338 for Adam.
    assert (parts.params, parts.optimizer, parts.gradients, parts.reference) == (338, 676, 338, 338)
    # 2 sequences x 8 tokens = 16 tokens, all sequences in one pass (no micro-batches). fp32 logits of every position
    # 16*10*4 = 640; one layer's forward 16*(3*8 + 8 + 3*16)*2 = 2560; attention scores 2*2*8*8*4 = 1024. The layer's
    # temporaries are dead before the logits are formed: the larger, 3584, for both log-probs and update (each layer's
    # input is offloaded to host on TPU). Both over min(8 chips, 2 sequences).
    assert (parts.logprobs, parts.activations) == (3584 // 2, 3584 // 2)
    # vLLM copy over 4 tensor-parallel chips: 2704 / 4 (no jax decode layout). KV: 1 sequence per replica x (8 + 2)
    # tokens x (2 layers x k,v x 1 kv head x 4 dims x 2 bytes = 32) = 320, over min(4 chips, 1 kv head) = 1.
    assert (parts.rollout_weights, parts.decode_weights, parts.kv_cache) == (676, 0, 320)
    estimate = estimate_fit(spec, shape)
    # One VM: every phase holds both sides' resident parts, params + moments + reference + vLLM's copy = 2028.
    phases = {p.name: (p.resident, p.arrays, p.program) for p in estimate.phases}
    assert phases == {
        "rollout": (2028, 320, 0),
        "log-probs": (2028, 0, 1792),
        "optimizer sharding": (2028, 676, 0),  # the moments' eager re-shard before the first update
        "update": (2028, 338, 1792),  # new params beside the old (the gradients in their buffer); the logits' worth
    }
    assert estimate.total_bytes_per_chip == 2028 + 338 + 1792 and estimate.peak_phase == "update"
    assert estimate.verdict == "fits" and estimate.capacity_bytes_per_chip == 32 * GIB


def test_llama31_8b_is_refused_on_v6e_1_with_the_numbers() -> None:
    estimate = estimate_job_fit(_on(TUTORIAL, "v6e-1"))
    assert estimate is not None and estimate.verdict == "does-not-fit"
    assert estimate.total_bytes_per_chip > 32 * GIB
    message = estimate.message
    assert message.startswith(f"needs ~{estimate.total_bytes_per_chip / GIB:.1f} GiB per chip (params ")
    for part in ("optimizer", "gradients", "reference", "activations", "rollout weights", "KV cache"):
        assert part in message
    assert "v6e-1 has 32 GiB per chip" in message and "it would fit on v6e-4" in message


def test_llama31_8b_fits_the_tutorials_v6e_8() -> None:
    estimate = estimate_job_fit(TUTORIAL)
    assert estimate is not None and estimate.verdict == "fits", estimate
    assert estimate.model_source == "maxtext llama3.1-8b" and estimate.parameters == 8_030_261_248
    assert estimate.total_bytes_per_chip < 0.9 * 32 * GIB


@pytest.mark.parametrize(
    ("field", "values"),
    [("batch_size", [1, 2, 4, 16]), ("num_generations", [2, 4, 8, 16]), ("max_target_length", [512, 1024, 4096])],
)
def test_grows_with_batch_generations_and_length(field: str, values: list[int]) -> None:
    estimates = [estimate_job_fit(_with(TUTORIAL, grpo={field: v})) for v in values]
    totals = [e.total_bytes_per_chip for e in estimates]  # type: ignore[union-attr]
    # The total is the largest phase; for the 8B on v6e-8 that is the moments' re-shard, which no batch changes, and
    # the training side's share stays one sequence's while there are fewer sequences than chips.
    assert totals == sorted(totals), totals
    for name in ("rollout", "log-probs", "update"):
        phase = [next(p.total for p in e.phases if p.name == name) for e in estimates]  # type: ignore[union-attr]
        assert phase == sorted(phase) and phase[0] < phase[-1], (name, phase)
    rollouts = [e.per_chip.kv_cache for e in estimates]  # type: ignore[union-attr]
    assert len(set(rollouts)) == len(rollouts), rollouts


@pytest.mark.parametrize(("field", "values"), [("kv_cache_buffer", [8, 256, 2048]), ("max_prefill_predict_length", [64, 256, 512])])
def test_never_shrinks_with_the_cache_buffer_or_the_prompt_length(field: str, values: list[int]) -> None:
    totals = [estimate_job_fit(_with(TUTORIAL, grpo={field: v})).total_bytes_per_chip for v in values]  # type: ignore[union-attr]
    assert totals == sorted(totals), totals


def test_beta_zero_keeps_no_reference_and_the_jax_engine_no_weight_copy() -> None:
    with_ref = estimate_job_fit(TUTORIAL)
    without = estimate_job_fit(_with(TUTORIAL, grpo={"beta": 0.0}))
    jax = estimate_job_fit(_with(TUTORIAL, hardware={"rollout_engine": "jax"}))
    assert with_ref and without and jax
    assert with_ref.per_chip.reference == with_ref.per_chip.params > 0 and without.per_chip.reference == 0
    assert jax.per_chip.rollout_weights == 0 < with_ref.per_chip.rollout_weights


def test_on_several_vms_a_chip_holds_one_side() -> None:
    estimate = estimate_job_fit(_on(TUTORIAL, "v6e-16"))
    assert estimate is not None and estimate.trainer_devices == estimate.rollout_devices == 8
    parts = estimate.per_chip
    phases = {p.name: p for p in estimate.phases}
    # The rollout's chips hold vLLM's copy and the cache; the trainer's hold the training state, not vLLM's copy.
    assert phases["rollout"].resident == parts.rollout_weights + parts.decode_weights > 0
    assert phases["update"].resident == parts.params + parts.optimizer + parts.reference
    assert estimate.total_bytes_per_chip == max(p.total for p in estimate.phases)
    one_vm = estimate_job_fit(TUTORIAL)
    assert one_vm is not None and {p.resident for p in one_vm.phases} == {
        one_vm.per_chip.params + one_vm.per_chip.optimizer + one_vm.per_chip.reference + one_vm.per_chip.rollout_weights
    }


def test_cpu_is_estimated_but_not_checked() -> None:
    estimate = estimate_job_fit(
        _with(TUTORIAL, hardware={"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax", "rollout_tensor_parallelism": 1})
    )
    assert estimate is not None and estimate.verdict == "unchecked" and estimate.capacity_bytes_per_chip is None
    assert "host memory" in estimate.message


def test_float32_doubles_the_training_state() -> None:
    bf16 = estimate_job_fit(TUTORIAL)
    fp32 = estimate_job_fit(_with(TUTORIAL, model={"dtype": "float32"}))
    assert bf16 and fp32 and fp32.per_chip.params == 2 * bf16.per_chip.params


def test_every_generation_has_its_hbm() -> None:
    assert {s.generation for s in TPU_SLICES.values()} <= set(HBM_GIB_PER_CHIP)
    assert hbm_bytes_per_chip(TPU_SLICES["v6e-1"]) == 32 * GIB and hbm_bytes_per_chip(TPU_SLICES["v5e-8"]) == 16 * GIB
    assert hbm_bytes_per_chip(TPU_SLICES["v5p-8"]) == 95 * GIB


def test_the_shape_comes_from_config_json_then_dims_then_the_name(tmp_path: Path) -> None:
    dims = {
        "base_emb_dim": 128,
        "base_num_query_heads": 4,
        "base_num_kv_heads": 2,
        "base_num_decoder_layers": 3,
        "base_mlp_dim": 256,
        "head_dim": 32,
    }
    from_config = model_shape("llama3.1-8b", dims, TINY_HF_CONFIG)
    from_dims = model_shape("llama3.1-8b", dims, None)
    from_name = model_shape("llama3.1-70b", None, None)
    assert from_config and from_config.source == "config.json" and from_config.emb_dim == 64
    assert from_dims and from_dims.source == "model.dims" and from_dims.num_layers == 3
    assert from_dims.vocab_size == 128256  # the named model's vocabulary
    assert from_name == MAXTEXT_MODELS["llama3.1-70b"]
    assert model_shape("qwen3-8b", None, None) == MAXTEXT_MODELS["qwen3-8b"]  # MaxText's Qwen3 dense table
    assert model_shape("gemma2-2b", None, None) is None and model_shape(None, None, None) is None


def test_a_local_checkpoints_config_is_read_and_anything_else_is_not(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
    assert read_local_model_config(str(tmp_path)) == TINY_HF_CONFIG
    assert read_local_model_config(f"file://{tmp_path}") == TINY_HF_CONFIG
    assert read_local_model_config("meta-llama/Llama-3.1-8B-Instruct") is None
    assert read_local_model_config(str(tmp_path / "missing")) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert read_local_model_config(str(tmp_path / "bad")) is None
    # A link is not followed (submit's refusals quote what the file says), nor is a directory named config.json.
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "config.json").symlink_to(tmp_path / "config.json")
    assert read_local_model_config(str(tmp_path / "linked")) is None
    (tmp_path / "dir" / "config.json").mkdir(parents=True)
    assert read_local_model_config(str(tmp_path / "dir")) is None
    spec = _with(TUTORIAL, model={"source": str(tmp_path), "name": None, "tokenizer": None})
    estimate = estimate_job_fit(spec)
    assert estimate is not None and estimate.model_source == "config.json"
    assert estimate.parameters == model_shape(None, None, TINY_HF_CONFIG).parameters  # type: ignore[union-attr]
