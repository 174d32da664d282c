"""A KV-cached forward pass over a MaxText Llama or dense Qwen3 model's own parameters, for sampling rollouts.

On TPU, train_rl samples with vLLM: a separate inference implementation that receives the actor's
weights after every update. This is the same arrangement for CPU: Tunix's sampler drives this module,
which keeps the MaxText Transformer as `base` (so Tunix syncs weights into it exactly as it does into
the actor) and computes the Llama-2-block forward from those arrays with a key/value cache, so each
new token costs one token's work instead of a forward pass over the whole sequence.

It mirrors MaxText's math where MaxText has a choice of its own: RMSNorm in fp32, RoPE by MaxText's
own `LLaMARotaryEmbedding` (interleaved pairs, optional Llama 3.1 scaling), query scaling folded into
the query kernel at conversion, and a tied output projection through a bf16 copy of the embedding
(maxtext/layers/embeddings.py:attend_on_embedding). Qwen3 (MaxText's qwen3 block, `LlamaShape.family`) is
the same forward with what that block does differently: RMSNorm over head_dim on queries and keys before
RoPE, RoPE by MaxText's half-split `RotaryEmbedding`, and queries scaled by head_dim**-0.5 after RoPE.
A decode step's products (a row per sequence against every weight, and against each head's cache) go through
few_rows_matmul.py's native kernel in fp32, which streams the weights faster than XLA's dot on CPU.
tests/trainer/maxtext_parity_check.py (Llama, on a converted checkpoint) and qwen3_rollout_check.py (Qwen3)
check its logits against MaxText's forward on the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .few_rows_matmul import batched_matmul, batched_project, project

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
    # "llama" (MaxText's llama2 block) or "qwen3" (its qwen3 block: RMSNorm over head_dim on queries and keys
    # before RoPE, RoPE by the half-split `RotaryEmbedding`, queries scaled by head_dim**-0.5 after RoPE).
    family: str = "llama"
    # MaxText's matmul_precision, which its dense layers and dot-product attention pass to every dot (linears.py,
    # attention_op.py): on TPU an fp32 dot at the default is one bf16 pass, 1.7-2% of the logits' scale off MaxText's
    # fp32 forward at "highest" on the v5e chip (bench/results/tpu_correctness.json). The CPU ignores it.
    precision: Any = None

    @property
    def qk_norm(self) -> bool:
        return self.family == "qwen3"

    @property
    def query_scale(self) -> float:
        """MaxText's query_pre_attn_scalar, applied after RoPE; 1 for Llama (folded into the query kernel)."""
        return float(self.head_dim**-0.5) if self.family == "qwen3" else 1.0

    @classmethod
    def from_config(cls, config: Any) -> LlamaShape:
        block = str(getattr(config.decoder_block, "value", config.decoder_block)).lower()
        family = "qwen3" if block == "qwen3" and config.model_name.startswith("qwen3") else "llama"
        if family == "llama" and (block != "llama2" or not config.model_name.startswith("llama3.1")):
            raise ValueError(
                f"the jax rollout engine implements MaxText's llama3.1 models (llama2 block) and dense qwen3 models (qwen3 block)"
                f" only, not {config.model_name} ({block})"
            )
        if list(config.mlp_activations) != ["silu", "linear"]:
            raise ValueError(f"the jax rollout engine implements a SwiGLU MLP (silu, linear), not {list(config.mlp_activations)}")
        if family == "qwen3":
            _check_qwen3(config)
        if config.logits_via_embedding and config.normalize_embedding_logits:
            raise ValueError("normalize_embedding_logits=true is Gemma's convention; not a Llama or Qwen3 model")
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
            family=family,
            precision=jax.lax.Precision(config.matmul_precision),
        )


def _check_qwen3(config: Any) -> None:
    """What MaxText's qwen3 block can be configured to do that the engine does not implement, refused by name."""
    differs = {
        "use_qk_norm": (bool(config.use_qk_norm), True),
        "qk_norm_with_scale": (bool(getattr(config, "qk_norm_with_scale", True)), True),
        "use_v_norm": (bool(getattr(config, "use_v_norm", False)), False),
        "use_mrope": (bool(config.use_mrope), False),  # Qwen3-VL's multimodal RoPE
        "rope_type": (str(getattr(config.rope_type, "value", config.rope_type)).lower(), "default"),
        "partial_rotary_factor": (float(config.partial_rotary_factor), 1.0),
        "fused_qkv": (bool(config.fused_qkv), False),
    }
    for name, (value, expected) in differs.items():
        if value != expected:
            raise ValueError(f"the jax rollout engine implements Qwen3 with {name}={expected}, not {value}")


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float, dtype: Any) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = (x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)).astype(dtype)
    return y * scale


class ArrangedWeight(nnx.Variable[jax.Array]):
    """A base-model weight laid out for decoding; derived, so not an nnx.Param (never trained or synced)."""


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def arrange_weights(state: dict[str, Any], shape: LlamaShape) -> dict[str, Any]:
    """One array per layer and matrix, in the compute dtype, q/k/v and gate/up fused: the decode step then
    reads each weight once, where slicing the scanned weights inside the layer loop copied every one of
    them and the per-step casts and tied bf16 table added ~40% (jax.profiler, one decode step: 30 ms of
    transposes and dynamic slices, 26 ms casting the embedding, 25 ms of matmuls). Every matrix is kept
    out-features first ([out, in]): each output is then one contiguous row, the layout few_rows_matmul's
    kernel streams (the tied table already is)."""
    s, dtype = shape, shape.dtype
    decoder = state["decoder"]
    stacked = jax.tree.map(lambda a: jnp.moveaxis(a, s.scan_axis, 0).astype(dtype), decoder["layers"])
    attn, mlp = stacked["self_attention"], stacked["mlp"]
    emb = attn["query"]["kernel"].shape[1]
    qkv = jnp.concatenate([attn[n]["kernel"].reshape(s.num_layers, emb, -1) for n in ("query", "key", "value")], -1)
    gate_up = jnp.concatenate([mlp["wi_0"]["kernel"], mlp["wi_1"]["kernel"]], -1)
    out = attn["out"]["kernel"].reshape(s.num_layers, s.num_heads * s.head_dim, emb)
    layers = tuple(
        {
            "attn_norm": stacked["pre_self_attention_layer_norm"]["scale"][i],
            "qkv": qkv[i].T,
            "out": out[i].T,
            "mlp_norm": stacked["post_self_attention_layer_norm"]["scale"][i],
            "gate_up": gate_up[i].T,
            "down": mlp["wo"]["kernel"][i].T,
        }
        | ({"q_norm": attn["query_norm"]["scale"][i], "k_norm": attn["key_norm"]["scale"][i]} if s.qk_norm else {})
        for i in range(s.num_layers)
    )
    embedding = state["token_embedder"]["embedding"]
    if s.tied:  # MaxText's attend_on_embedding: a bf16 copy of the table, promoted against the activations
        logits = embedding.astype(jnp.bfloat16).astype(jnp.promote_types(dtype, jnp.bfloat16))
    else:
        logits = decoder["logits_dense"]["kernel"].astype(dtype).T
    return {"layers": layers, "final_norm": decoder["decoder_norm"]["scale"].astype(dtype), "logits": logits}


def _attend(qg: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, dtype: Any, precision: Any = None) -> jax.Array:
    """qg [B, T, K, G, D] over the cache k, v [B, K, S, D] -> [B, T, K, G, D], scores in fp32."""
    if qg.shape[1] == 1 and jax.default_backend() == "cpu":
        # Decode: one query per row. In fp32 each query group meets its head's keys, and its weights its head's
        # values, in few_rows_matmul's kernel, which streams each cache faster than XLA's multiply-reduces; otherwise
        # those multiply-reduces (as XLA dots they ran 2 x 30 batched matrix-vector products of 24 tiny matrices,
        # ~1 ms each; jax.profiler).
        f32 = jnp.float32
        if qg.dtype == f32 and k.dtype == f32:
            scores = batched_project(qg[:, 0], k, precision=precision)[:, :, :, None]
        else:
            scores = jnp.sum(qg[:, 0, :, :, None, :].astype(f32) * k[:, :, None].astype(f32), axis=-1)[:, :, :, None]
        weights = jax.nn.softmax(jnp.where(mask, scores, NEG_INF), axis=-1).astype(dtype)  # [B, K, G, 1, S]
        if weights.dtype == f32 and v.dtype == f32:
            return batched_matmul(weights[:, :, :, 0], v, precision=precision)[:, None]
        out = jnp.sum(weights[:, :, :, 0, :, None].astype(f32) * v[:, :, None].astype(f32), axis=3)
        return out.astype(dtype)[:, None]
    # Prefill, and decode on an accelerator: the dots the matrix unit runs, bf16 operands accumulated in fp32. On the
    # v5e chip the CPU's decode above converted each step's whole bf16 cache to fp32 (about 1 ms) and multiply-reduced
    # it on the vector units (0.7-1.5 ms; xprof, bench/README.md's TPU section).
    scores = jnp.einsum("btkgd,bksd->bkgts", qg, k, preferred_element_type=jnp.float32, precision=precision)
    weights = jax.nn.softmax(jnp.where(mask, scores, NEG_INF), axis=-1).astype(dtype)
    return jnp.einsum("bkgts,bksd->btkgd", weights, v, precision=precision)


_arrange = jax.jit(arrange_weights, static_argnums=1)

_PREFILL_COPIES: ContextVar[tuple[int, ...] | None] = ContextVar("prefill_copies", default=None)


@contextmanager
def shared_prefill(copies: tuple[int, ...]) -> Iterator[None]:
    """While tracing a prefill: row i's prompt is row copies[i]'s (copies[i] <= i), so each distinct prompt
    is computed once and its cache and logits are copied to the rows that repeat it (GRPO's generations)."""
    token = _PREFILL_COPIES.set(copies)
    try:
        yield
    finally:
        _PREFILL_COPIES.reset(token)


# {"k": (per layer [B, K, S, D], ...), "v": (...), "end": scalar int32}. Heads before slots: the layout the
# attention contractions read, where [B, S, K, D] had XLA transpose every layer's cache on every step (~50 ms).
Cache = dict[str, Any]


class CachedLlamaLM(nnx.Module):
    """Tunix's sampler contract (`init_cache`, `__call__(tokens, positions, cache, mask)`) over MaxText."""

    def __init__(self, base: nnx.Module, rope: nnx.Module, shape: LlamaShape):
        self.base = base
        self.rope = rope  # MaxText's LLaMARotaryEmbedding, or RotaryEmbedding for Qwen3 (no parameters)
        self.shape = shape
        self.arranged = nnx.data(jax.tree.map(ArrangedWeight, _arrange(self._base_params(), shape)))

    def _base_params(self) -> dict[str, Any]:
        return dict(nnx.to_pure_dict(nnx.state(self.base, nnx.Param)))

    def refresh(self) -> None:
        """Re-derive the decoding weights after the base model's parameters changed."""
        fresh = _arrange(self._base_params(), self.shape)
        for variable, value in zip(jax.tree.leaves(self.arranged, is_leaf=_is_variable), jax.tree.leaves(fresh), strict=True):
            variable.value = value

    def init_cache(self, batch_size: int, cache_size: int, dtype: Any) -> Cache:
        s = self.shape
        kv = (batch_size, s.num_kv_heads, cache_size, s.head_dim)
        return {
            "k": tuple(jnp.zeros(kv, s.dtype) for _ in range(s.num_layers)),
            "v": tuple(jnp.zeros(kv, s.dtype) for _ in range(s.num_layers)),
            "end": jnp.zeros((), jnp.int32),
        }

    def __call__(
        self,
        input_tokens: jax.Array,
        positions: jax.Array,
        cache: Cache | None,
        attention_mask: jax.Array,
        decode_only_last_token: bool = False,
    ) -> tuple[jax.Array, Cache | None]:
        copies = _PREFILL_COPIES.get()
        if cache is None or copies is None or len(set(copies)) == len(copies) or len(copies) != input_tokens.shape[0]:
            return self._forward(input_tokens, positions, cache, attention_mask, decode_only_last_token)
        rows = np.array(sorted(set(copies)))
        inverse = np.searchsorted(rows, np.array(copies))
        narrow = {"k": tuple(k[rows] for k in cache["k"]), "v": tuple(v[rows] for v in cache["v"]), "end": cache["end"]}
        logits, filled = self._forward(input_tokens[rows], positions[rows], narrow, attention_mask[rows], decode_only_last_token)
        assert filled is not None  # a cache in, a cache out
        wide = {"k": tuple(k[inverse] for k in filled["k"]), "v": tuple(v[inverse] for v in filled["v"]), "end": filled["end"]}
        return logits[inverse], wide

    def _forward(
        self,
        input_tokens: jax.Array,
        positions: jax.Array,
        cache: Cache | None,
        attention_mask: jax.Array,
        decode_only_last_token: bool,
    ) -> tuple[jax.Array, Cache | None]:
        s = self.shape
        w = jax.tree.map(lambda v: v.value, self.arranged, is_leaf=_is_variable)
        batch, length = input_tokens.shape
        embedding: Any = self.base.token_embedder.embedding  # type: ignore[attr-defined]  # MaxText ships no types
        x = embedding.value[input_tokens].astype(s.dtype)
        if cache is None:  # a plain forward (Tunix's per-token log-prob helper): keys are these tokens only
            start, cache_len = jnp.zeros((), jnp.int32), length
            kv = (batch, s.num_kv_heads, length, s.head_dim)
            ks, vs = [jnp.zeros(kv, s.dtype)] * s.num_layers, [jnp.zeros(kv, s.dtype)] * s.num_layers
        else:
            start, cache_len = cache["end"], cache["k"][0].shape[2]
            ks, vs = list(cache["k"]), list(cache["v"])
        mask = attention_mask[:, :, :cache_len].astype(bool)[:, None, None, :, :]  # [B, 1, 1, T, S]
        groups, q_width = s.num_heads // s.num_kv_heads, s.num_heads * s.head_dim
        kv_width = s.num_kv_heads * s.head_dim
        # A Python loop over layers: each layer's weights and cache are arrays of their own, so nothing is sliced.
        for i, p in enumerate(w["layers"]):
            h = _rms_norm(x, p["attn_norm"], s.eps, s.dtype)
            qkv = project(h, p["qkv"], precision=s.precision)
            q = qkv[..., :q_width].reshape(batch, length, s.num_heads, s.head_dim)
            k = qkv[..., q_width : q_width + kv_width].reshape(batch, length, s.num_kv_heads, s.head_dim)
            v = qkv[..., q_width + kv_width :].reshape(batch, length, s.num_kv_heads, s.head_dim)
            if s.qk_norm:  # MaxText's attentions.py: query_norm/key_norm (RMSNorm over head_dim), then RoPE
                q, k = _rms_norm(q, p["q_norm"], s.eps, s.dtype), _rms_norm(k, p["k_norm"], s.eps, s.dtype)
            q, k = self.rope(q, positions), self.rope(k, positions)
            if s.query_scale != 1.0:  # query_pre_attn_scalar, after RoPE as MaxText applies it
                q = q * s.query_scale
            ks[i] = jax.lax.dynamic_update_slice(ks[i], k.swapaxes(1, 2), (0, 0, start, 0))
            vs[i] = jax.lax.dynamic_update_slice(vs[i], v.swapaxes(1, 2), (0, 0, start, 0))
            out = _attend(q.reshape(batch, length, s.num_kv_heads, groups, s.head_dim), ks[i], vs[i], mask, s.dtype, s.precision)
            out = out.reshape(batch, length, q_width)
            x = x + project(out, p["out"], precision=s.precision)
            h = _rms_norm(x, p["mlp_norm"], s.eps, s.dtype)
            gate, up = jnp.split(project(h, p["gate_up"], precision=s.precision), 2, axis=-1)
            x = x + project(jax.nn.silu(gate) * up, p["down"], precision=s.precision)
        if decode_only_last_token:
            x = x[:, -1:, :]
        x = _rms_norm(x, w["final_norm"], s.eps, s.dtype)
        # A tied table: MaxText's attend_on_embedding calls jnp.dot without matmul_precision (embeddings.py).
        logits = project(x, w["logits"], s.logits_dtype, precision=None if s.tied else s.precision).astype(jnp.float32)
        if cache is None:
            return logits, None
        return logits, {"k": tuple(ks), "v": tuple(vs), "end": start + length}


def build_cached_llama(base: Any) -> CachedLlamaLM:
    """base: MaxText's Transformer, an nnx.Module with its `config` (MaxText ships no types)."""
    from maxtext.layers.embeddings import LLaMARotaryEmbedding, RotaryEmbedding

    config = base.config
    shape = LlamaShape.from_config(config)
    if shape.family == "qwen3":  # attentions.py init_rotary_embedding: rope_type "default" -> the half-split class
        return CachedLlamaLM(
            base,
            RotaryEmbedding(
                min_timescale=config.rope_min_timescale,
                max_timescale=config.rope_max_timescale,
                mesh=getattr(base, "mesh", None),
                embedding_dims=config.head_dim,
                fprop_dtype=shape.dtype,
                rope_linear_scaling_factor=config.rope_linear_scaling_factor,
            ),
            shape,
        )
    rope = LLaMARotaryEmbedding(
        min_timescale=config.rope_min_timescale,
        max_timescale=config.rope_max_timescale,
        mesh=getattr(base, "mesh", None),
        embedding_dims=config.head_dim,
        fprop_dtype=shape.dtype,
        use_scale=bool(config.rope_use_scale),
    )
    return CachedLlamaLM(base, rope, shape)
