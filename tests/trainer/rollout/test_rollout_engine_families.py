"""Which MaxText models the jax rollout engine takes (cached_llama.LlamaShape.from_config): Llama 3.1 (llama2
block) and dense Qwen3 (qwen3 block), each as MaxText's configs describe it; anything else, or a Qwen3
setting the engine does not implement, is refused by name. The forward itself is checked against MaxText's in
test_slow_qwen3_rollout.py and the Llama parity checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer.rollout.cached_llama import LlamaShape


def config(**changes: object) -> SimpleNamespace:
    """MaxText's values for qwen3-0.6b (configs/models/qwen3-0.6b.yml over base.yml), shrunk."""
    values: dict[str, object] = {
        "decoder_block": "qwen3",
        "model_name": "qwen3-0.6b",
        "mlp_activations": ["silu", "linear"],
        "logits_via_embedding": True,
        "normalize_embedding_logits": False,
        "scan_layers": True,
        "num_decoder_layers": 2,
        "num_query_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 16,
        "normalization_layer_epsilon": 1e-6,
        "param_scan_axis": 1,
        "dtype": "bfloat16",
        "logits_dot_in_fp32": False,
        "use_qk_norm": True,
        "qk_norm_with_scale": True,
        "use_v_norm": False,
        "use_mrope": False,
        "rope_type": "default",
        "partial_rotary_factor": 1.0,
        "fused_qkv": False,
        "matmul_precision": "default",
    }
    return SimpleNamespace(**(values | changes))


def test_qwen3_is_the_qwen3_family_with_qk_norm_and_the_query_scaled_by_head_dim():
    shape = LlamaShape.from_config(config())
    assert (shape.family, shape.qk_norm, shape.tied) == ("qwen3", True, True)
    assert shape.query_scale == 16**-0.5


def test_llama_keeps_its_family_without_qk_norm_or_a_run_time_query_scale():
    # A Llama config carries MaxText's base.yml defaults for the Qwen3 settings; they are not read for Llama.
    shape = LlamaShape.from_config(config(decoder_block="llama2", model_name="llama3.1-8b", use_qk_norm=False, logits_via_embedding=False))
    assert (shape.family, shape.qk_norm, shape.query_scale, shape.tied) == ("llama", False, 1.0, False)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"decoder_block": "qwen3_moe", "model_name": "qwen3-30b-a3b"}, "qwen3-30b-a3b (qwen3_moe)"),
        ({"decoder_block": "gemma3", "model_name": "gemma3-4b"}, "gemma3-4b (gemma3)"),
        ({"decoder_block": "llama2", "model_name": "llama2-7b"}, "llama2-7b (llama2)"),
        ({"use_mrope": True, "model_name": "qwen3-vl-2b"}, "use_mrope=False"),
        ({"use_qk_norm": False}, "use_qk_norm=True"),
        ({"rope_type": "yarn"}, "rope_type=default"),
        ({"partial_rotary_factor": 0.25}, "partial_rotary_factor=1.0"),
        ({"mlp_activations": ["gelu", "linear"]}, "SwiGLU"),
        ({"normalize_embedding_logits": True}, "normalize_embedding_logits"),
    ],
)
def test_models_and_qwen3_settings_the_engine_does_not_implement_are_refused_by_name(changes, named):
    with pytest.raises(ValueError, match="jax rollout engine|Gemma's convention") as refused:
        LlamaShape.from_config(config(**changes))
    assert named in str(refused.value)


def test_the_engine_multiplies_at_maxtexts_matmul_precision():
    # On TPU an fp32 dot at the default precision is one bf16 pass: the engine must ask for what MaxText's layers ask.
    import jax
    import jax.numpy as jnp

    from trainer.rollout.cached_llama import _attend
    from trainer.rollout.few_rows_matmul import project

    shape = LlamaShape.from_config(config(matmul_precision="highest"))
    assert shape.precision == jax.lax.Precision.HIGHEST
    q, kv = jnp.ones((1, 3, 2, 2, 16)), jnp.ones((1, 2, 3, 16))

    def bf16_ones(shape: tuple[int, ...]) -> jax.Array:
        return jnp.ones(shape, jnp.bfloat16)

    mask = jnp.ones((1, 1, 1, 3, 3), bool)
    traced = [
        jax.make_jaxpr(lambda q, k, v: _attend(q, k, v, mask, jnp.float32, shape.precision))(q, kv, kv),
        # bf16: the CPU kernel takes few fp32 rows (and needs no precision); here XLA's dot must be asked.
        jax.make_jaxpr(lambda x, w: project(x, w, precision=shape.precision))(bf16_ones((3, 16)), bf16_ones((8, 16))),
    ]
    dots = [e for jaxpr in traced for e in _equations(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
    assert len(dots) == 3
    assert all(e.params["precision"] == (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST) for e in dots), dots


def _equations(jaxpr):  # type: ignore[no-untyped-def]
    """Every equation, into the jaxprs of jitted calls (jnp.einsum is one)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                yield from _equations(inner)
