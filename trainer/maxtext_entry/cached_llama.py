"""A KV-cached forward pass over a MaxText Llama model's own parameters, for sampling rollouts.

On TPU, train_rl samples with vLLM: a separate inference implementation that receives the actor's
weights after every update. This is the same arrangement for CPU: Tunix's sampler drives this module,
which keeps the MaxText Transformer as `base` (so Tunix syncs weights into it exactly as it does into
the actor) and computes the Llama-2-block forward from those arrays with a key/value cache, so each
new token costs one token's work instead of a forward pass over the whole sequence.

It mirrors MaxText's math where MaxText has a choice of its own: RMSNorm in fp32, RoPE by MaxText's
own `LLaMARotaryEmbedding` (interleaved pairs, optional Llama 3.1 scaling), query scaling folded into
the query kernel at conversion, and a tied output projection through a bf16 copy of the embedding
(maxtext/layers/embeddings.py:attend_on_embedding). tests/trainer/test_cached_rollout.py checks its
logits against MaxText's forward on the same checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

NEG_INF = -2.3819763e38  # the most negative bf16-safe value; Tunix's Llama uses the same mask fill


@dataclass(frozen=True)
class LlamaShape:
    """The static facts of the model, read once from its MaxText config."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    tied: bool
    scan_axis: int
    dtype: Any
    logits_dtype: Any  # MaxText's logits_dot_in_fp32

    @classmethod
    def from_config(cls, config: Any) -> LlamaShape:
        block = str(getattr(config.decoder_block, "value", config.decoder_block)).lower()
        if block != "llama2" or list(config.mlp_activations) != ["silu", "linear"] or not config.model_name.startswith("llama3.1"):
            raise ValueError(f"the jax rollout engine implements MaxText's llama3.1 models (llama2 block) only, "
                             f"not {config.model_name} ({block})")
        if config.logits_via_embedding and config.normalize_embedding_logits:
            raise ValueError("normalize_embedding_logits=true is Gemma's convention; not a Llama model")
        if not config.scan_layers:
            raise ValueError("the jax rollout engine reads scanned layers; set model.scan_layers: true")
        return cls(
            num_layers=config.num_decoder_layers,
            num_heads=config.num_query_heads,
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
            eps=float(config.normalization_layer_epsilon),
            tied=bool(config.logits_via_embedding),
            scan_axis=int(config.param_scan_axis),
            dtype=jnp.dtype(config.dtype),
            logits_dtype=jnp.float32 if config.logits_dot_in_fp32 else jnp.dtype(config.dtype),
        )


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float, dtype: Any) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = (x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)).astype(dtype)
    return y * scale.astype(dtype)


class CachedLlamaLM(nnx.Module):
    """Tunix's sampler contract (`init_cache`, `__call__(tokens, positions, cache, mask)`) over MaxText."""

    def __init__(self, base: nnx.Module, rope: nnx.Module, shape: LlamaShape):
        self.base = base
        self.rope = rope  # MaxText's LLaMARotaryEmbedding (no parameters)
        self.shape = shape

    def init_cache(self, batch_size: int, cache_size: int, dtype: Any) -> dict[str, jax.Array]:
        s = self.shape
        kv = (s.num_layers, batch_size, cache_size, s.num_kv_heads, s.head_dim)
        return {"k": jnp.zeros(kv, s.dtype), "v": jnp.zeros(kv, s.dtype), "end": jnp.zeros((), jnp.int32)}

    def _params(self) -> tuple[jax.Array, dict[str, Any], jax.Array, jax.Array | None]:
        state = nnx.to_pure_dict(nnx.state(self.base, nnx.Param))
        decoder = state["decoder"]
        logits_kernel = None if self.shape.tied else decoder["logits_dense"]["kernel"]
        return state["token_embedder"]["embedding"], decoder["layers"], decoder["decoder_norm"]["scale"], logits_kernel

    def __call__(
        self,
        input_tokens: jax.Array,
        positions: jax.Array,
        cache: dict[str, jax.Array] | None,
        attention_mask: jax.Array,
        decode_only_last_token: bool = False,
    ) -> tuple[jax.Array, dict[str, jax.Array] | None]:
        s = self.shape
        embedding, layers, final_scale, logits_kernel = self._params()
        batch, length = input_tokens.shape
        x = embedding.astype(s.dtype)[input_tokens]
        if cache is None:  # a plain forward (Tunix's per-token log-prob helper): keys are these tokens only
            start, cache_len = jnp.zeros((), jnp.int32), length
            kv_shape = (s.num_layers, batch, length, s.num_kv_heads, s.head_dim)
            k_all, v_all = jnp.zeros(kv_shape, s.dtype), jnp.zeros(kv_shape, s.dtype)
        else:
            start, cache_len = cache["end"], cache["k"].shape[2]
            k_all, v_all = cache["k"], cache["v"]
        mask = attention_mask[:, :, :cache_len].astype(bool)[:, None, None, :, :]  # [B, 1, 1, T, S]
        groups = s.num_heads // s.num_kv_heads

        LayerCarry = tuple[jax.Array, jax.Array, jax.Array]  # x, k_all, v_all

        def layer(index: jax.Array, carry: LayerCarry) -> LayerCarry:
            x, k_all, v_all = carry
            # Index the scanned weights in place: moving their layer axis first would copy every
            # weight on every decode step (seen: 0.5 s per token for a 135M model on 2 cores).
            p = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, s.scan_axis, keepdims=False), layers)
            attn, mlp = p["self_attention"], p["mlp"]
            h = _rms_norm(x, p["pre_self_attention_layer_norm"]["scale"], s.eps, s.dtype)
            q = jnp.einsum("bte,ehd->bthd", h, attn["query"]["kernel"].astype(s.dtype))
            k = jnp.einsum("bte,ehd->bthd", h, attn["key"]["kernel"].astype(s.dtype))
            v = jnp.einsum("bte,ehd->bthd", h, attn["value"]["kernel"].astype(s.dtype))
            q, k = self.rope(q, positions), self.rope(k, positions)
            k_all = jax.lax.dynamic_update_slice(k_all, k.astype(s.dtype)[None], (index, 0, start, 0, 0))
            v_all = jax.lax.dynamic_update_slice(v_all, v.astype(s.dtype)[None], (index, 0, start, 0, 0))
            k_cache = jax.lax.dynamic_index_in_dim(k_all, index, 0, keepdims=False)
            v_cache = jax.lax.dynamic_index_in_dim(v_all, index, 0, keepdims=False)
            qg = q.reshape(batch, length, s.num_kv_heads, groups, s.head_dim)
            scores = jnp.einsum("btkgd,bskd->bkgts", qg, k_cache, preferred_element_type=jnp.float32)
            weights = jax.nn.softmax(jnp.where(mask, scores, NEG_INF), axis=-1).astype(s.dtype)
            out = jnp.einsum("bkgts,bskd->btkgd", weights, v_cache).reshape(batch, length, s.num_heads, s.head_dim)
            x = x + jnp.einsum("bthd,hde->bte", out, attn["out"]["kernel"].astype(s.dtype))
            h = _rms_norm(x, p["post_self_attention_layer_norm"]["scale"], s.eps, s.dtype)
            gate = jax.nn.silu(h @ mlp["wi_0"]["kernel"].astype(s.dtype)) * (h @ mlp["wi_1"]["kernel"].astype(s.dtype))
            return x + gate @ mlp["wo"]["kernel"].astype(s.dtype), k_all, v_all

        x, k_all, v_all = jax.lax.fori_loop(0, s.num_layers, layer, (x, k_all, v_all))
        if decode_only_last_token:
            x = x[:, -1:, :]
        x = _rms_norm(x, final_scale, s.eps, s.dtype)
        if logits_kernel is None:  # tied: _params gives no kernel exactly when the embedding is the output layer
            logits = jnp.dot(x, embedding.astype(jnp.bfloat16).T, preferred_element_type=s.logits_dtype)
        else:
            logits = jnp.dot(x, logits_kernel.astype(s.dtype), preferred_element_type=s.logits_dtype)
        logits = logits.astype(jnp.float32)
        if cache is None:
            return logits, None
        return logits, {"k": k_all, "v": v_all, "end": start + length}


def build_cached_llama(base: Any) -> CachedLlamaLM:
    """base: MaxText's Transformer, an nnx.Module with its `config` (MaxText ships no types)."""
    from maxtext.layers.embeddings import LLaMARotaryEmbedding

    config = base.config
    shape = LlamaShape.from_config(config)
    rope = LLaMARotaryEmbedding(
        min_timescale=config.rope_min_timescale,
        max_timescale=config.rope_max_timescale,
        mesh=getattr(base, "mesh", None),
        embedding_dims=config.head_dim,
        fprop_dtype=shape.dtype,
        use_scale=bool(config.rope_use_scale),
    )
    return CachedLlamaLM(base, rope, shape)
