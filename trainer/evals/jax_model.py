"""A Hugging Face Llama or Qwen3 checkpoint's forward pass in JAX, read straight from its safetensors.

The evaluation engine of a TPU job's host: a Cloud TPU VM or a TPU pod has JAX and no torch (the trainer image's
torch is vLLM's; a TPU VM's wheelhouse carries none), so the export check and eval jobs on TPU cannot use
transformers' torch models. This module computes what `LlamaForCausalLM` and `Qwen3ForCausalLM` compute
(transformers 5.12, models/llama and models/qwen3 modeling files): RMSNorm in float32, RoPE by rotate_half
(half-split pairs) with Llama 3.1's frequency scaling, grouped-query attention, SwiGLU, and tied or untied
logits. Every product runs at float32 "highest" precision, so on a TPU it agrees with the CPU reference instead of
taking one bf16 pass. tests/trainer/evals/test_jax_eval_engine.py checks its logits against transformers' own on the
same checkpoints. Anything else a config can ask for (biases, sliding windows, other RoPE types, other
activations) is refused by name rather than computed differently.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from trainer.sizing.hf_config_fields import rope, rope_kind

HIGHEST = jax.lax.Precision.HIGHEST
MASKED = -1e30
FAMILIES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


class UnsupportedCheckpoint(ValueError):
    """The checkpoint asks for something this engine does not compute; the message names it."""


@dataclass(frozen=True)
class HfShape:
    family: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    tied: bool
    vocab: int

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads


def _rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """theta and the scaling's fields, read as the fit estimate reads them (trainer/sizing/hf_config_fields.py)."""
    theta, scaling, _ = rope(config)
    return {**(scaling or {}), "rope_theta": theta, "rope_type": rope_kind(scaling)}


def rope_inv_freq(config: dict[str, Any], head_dim: int) -> np.ndarray:
    """transformers' _compute_default_rope_parameters and _compute_llama3_parameters (modeling_rope_utils.py)."""
    params = _rope_parameters(config)
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    kind = params["rope_type"]
    if kind == "default":
        return inv_freq.astype(np.float32)
    if kind != "llama3":
        raise UnsupportedCheckpoint(f"RoPE type {kind!r}: the JAX evaluation engine computes default and llama3 only")
    factor, low, high = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_context = float(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def read_shape(config: dict[str, Any]) -> HfShape:
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UnsupportedCheckpoint(f"model_type {family!r}: the JAX evaluation engine computes {', '.join(FAMILIES)} checkpoints only")
    layers = int(config["num_hidden_layers"])
    # As transformers and trainer/sizing/qwen3_config.py read it: layers from max_window_layers on slide, when set.
    sliding = bool(config.get("use_sliding_window")) and config.get("sliding_window") is not None
    refused = {
        "attention_bias": bool(config.get("attention_bias", False)),
        "mlp_bias": bool(config.get("mlp_bias", False)),
        "use_sliding_window": sliding and int(config.get("max_window_layers", layers)) < layers,
    }
    if any(refused.values()):
        raise UnsupportedCheckpoint(f"{[k for k, v in refused.items() if v]} set: the JAX evaluation engine computes none of them")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedCheckpoint(f"hidden_act {config['hidden_act']!r}: the JAX evaluation engine computes silu (SwiGLU) only")
    heads = int(config["num_attention_heads"])
    return HfShape(
        family=family,
        num_layers=layers,
        hidden=int(config["hidden_size"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        eps=float(config.get("rms_norm_eps", 1e-6)),
        tied=bool(config.get("tie_word_embeddings", False)),
        vocab=int(config["vocab_size"]),
    )


def _tensor_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / name for name in shards]
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise UnsupportedCheckpoint(
            f"{model_dir} holds no model.safetensors (nor an index of shards): the JAX engine reads safetensors only"
        )
    return [single]


def _read_tensors(model_dir: Path) -> dict[str, np.ndarray]:
    """Every tensor as float32 numpy (safetensors.flax reads bfloat16, which numpy alone cannot)."""
    from safetensors.flax import load_file

    tensors: dict[str, np.ndarray] = {}
    for path in _tensor_files(model_dir):
        for name, value in load_file(str(path)).items():
            tensors[name.removeprefix("model.")] = np.asarray(value, dtype=np.float32)
    return tensors


def load_params(model_dir: Path, shape: HfShape) -> dict[str, np.ndarray]:
    """The checkpoint as stacked float32 arrays, each projection transposed to (in, out) for x @ w."""
    tensors = _read_tensors(model_dir)

    def layer(name: str, transpose: bool = True) -> np.ndarray:
        stacked = [tensors.pop(f"layers.{i}.{name}") for i in range(shape.num_layers)]
        return np.stack([t.T if transpose else t for t in stacked])

    params = {
        "embed": tensors.pop("embed_tokens.weight"),
        "final_norm": tensors.pop("norm.weight"),
        "attn_norm": layer("input_layernorm.weight", transpose=False),
        "mlp_norm": layer("post_attention_layernorm.weight", transpose=False),
        "wq": layer("self_attn.q_proj.weight"),
        "wk": layer("self_attn.k_proj.weight"),
        "wv": layer("self_attn.v_proj.weight"),
        "wo": layer("self_attn.o_proj.weight"),
        "w_gate": layer("mlp.gate_proj.weight"),
        "w_up": layer("mlp.up_proj.weight"),
        "w_down": layer("mlp.down_proj.weight"),
    }
    if shape.family == "qwen3":
        params["q_norm"] = layer("self_attn.q_norm.weight", transpose=False)
        params["k_norm"] = layer("self_attn.k_norm.weight", transpose=False)
    head = tensors.pop("lm_head.weight", None)
    if not shape.tied:  # tied: forward multiplies by the embedding itself, so no second copy is held
        if head is None:
            raise UnsupportedCheckpoint(f"{model_dir}: tie_word_embeddings is false but the checkpoint has no lm_head.weight")
        params["lm_head"] = head.T
    rotary = [k for k in tensors if "rotary_emb" in k]
    for k in rotary:
        tensors.pop(k)
    if tensors:
        raise UnsupportedCheckpoint(f"{model_dir} holds tensors the JAX engine does not read: {sorted(tensors)[:5]}")
    return params


def _rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * weight


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]


def forward(
    params: dict[str, jax.Array],
    inv_freq: jax.Array,
    shape: HfShape,
    tokens: jax.Array,
    positions: jax.Array,
    cache_k: jax.Array,
    cache_v: jax.Array,
    start: jax.Array,
    key_valid: jax.Array,
    every_position: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Logits of each row's last token ([B, V]; of every position, [B, S, V], with every_position), and the caches
    with this call's keys and values written at slots start..start+S-1. tokens/positions [B, S]; caches
    [L, B, T, KV, D]; key_valid [B, T] marks the slots that hold a real token (padding is never attended to), already
    set for this call's own slots."""
    batch, steps = tokens.shape
    total = cache_k.shape[2]
    angles = positions[:, :, None].astype(jnp.float32) * inv_freq[None, None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    query_slots = start + jnp.arange(steps)
    visible = (jnp.arange(total)[None, :] <= query_slots[:, None])[None, :, :] & key_valid[:, None, :]  # [B, S, T]
    scale = 1.0 / math.sqrt(shape.head_dim)

    def block(h: jax.Array, layer: tuple[dict[str, jax.Array], jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        w, layer_k, layer_v = layer
        x = _rms_norm(h, w["attn_norm"], shape.eps)
        q = jnp.matmul(x, w["wq"], precision=HIGHEST).reshape(batch, steps, shape.num_heads, shape.head_dim)
        k = jnp.matmul(x, w["wk"], precision=HIGHEST).reshape(batch, steps, shape.num_kv_heads, shape.head_dim)
        v = jnp.matmul(x, w["wv"], precision=HIGHEST).reshape(batch, steps, shape.num_kv_heads, shape.head_dim)
        if shape.family == "qwen3":  # Qwen3Attention: RMSNorm over head_dim on queries and keys, before RoPE
            q, k = _rms_norm(q, w["q_norm"], shape.eps), _rms_norm(k, w["k_norm"], shape.eps)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        layer_k = jax.lax.dynamic_update_slice(layer_k, k, (0, start, 0, 0))
        layer_v = jax.lax.dynamic_update_slice(layer_v, v, (0, start, 0, 0))
        grouped = q.reshape(batch, steps, shape.num_kv_heads, shape.group, shape.head_dim)
        scores = jnp.einsum("bskgd,btkd->bkgst", grouped, layer_k, precision=HIGHEST) * scale
        # A finite fill, not -inf: a padding query sees no key at all, and a row of -inf would give it NaN values
        # that reach real tokens as 0 x NaN through the padding's cached keys and values.
        scores = jnp.where(visible[:, None, None, :, :], scores, MASKED)
        weights = jax.nn.softmax(scores, axis=-1)
        attended = jnp.einsum("bkgst,btkd->bskgd", weights, layer_v, precision=HIGHEST)
        h = h + jnp.matmul(attended.reshape(batch, steps, -1), w["wo"], precision=HIGHEST)
        x = _rms_norm(h, w["mlp_norm"], shape.eps)
        gate = jax.nn.silu(jnp.matmul(x, w["w_gate"], precision=HIGHEST))
        h = h + jnp.matmul(gate * jnp.matmul(x, w["w_up"], precision=HIGHEST), w["w_down"], precision=HIGHEST)
        return h, (layer_k, layer_v)

    layers = {k: v for k, v in params.items() if k not in ("embed", "final_norm", "lm_head")}
    h = params["embed"][tokens]
    h, (cache_k, cache_v) = jax.lax.scan(block, h, (layers, cache_k, cache_v))
    out = _rms_norm(h if every_position else h[:, -1], params["final_norm"], shape.eps)
    head = params["embed"].T if shape.tied else params["lm_head"]
    return jnp.matmul(out, head, precision=HIGHEST), cache_k, cache_v


def read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise UnsupportedCheckpoint(f"{model_dir} has no config.json: not a Hugging Face checkpoint directory")
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def stop_token_ids(model_dir: Path, config: dict[str, Any], tokenizer: Any) -> set[int]:
    """As hf_sampler.stop_token_ids: the tokenizer's end of text and every end token of the generation config
    (generation_config.json, or config.json where there is none, as transformers builds it)."""
    ids = {tokenizer.eos_token_id} - {None}
    generation = model_dir / "generation_config.json"
    configured = json.loads(generation.read_text()).get("eos_token_id") if generation.is_file() else config.get("eos_token_id")
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, list):
        ids.update(i for i in configured if isinstance(i, int))
    return ids
