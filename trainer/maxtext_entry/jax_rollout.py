"""A pure-JAX rollout engine for train_rl: Tunix's VanillaRollout sampler over the MaxText model.

train_rl constructs its rollout engine as `MaxTextVllmRollout(rollout_actor, tokenizer, mesh,
rollout_config, maxtext_config=...)`, which needs vLLM (TPU only). This class has the same
constructor and drives Tunix's own sampler instead, so it runs on CPU. Three things stand between
the MaxText model and that sampler; each is handled here (see ../shared/notes/maxtext-on-cpu.md):

1. The sampler wants a KV cache (`init_cache`), which MaxText's Tunix adapter does not have. The
   "cache" here is the token/position/segment history; every decode step re-runs the full forward
   over it. O(L^2), fine for the small models this engine is for.
2. Inside the sampler's `lax.while_loop` the Linen bridge mutates its RNG counter, which nnx
   forbids on Variables created at an outer trace level; the module is re-materialised per call.
3. VanillaRollout.update_params rebuilds state from `nnx.Param` only, but the MaxText model also
   carries RNG variables, so the sampler's structure check fails; params are updated in place.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from tunix.generate import sampler as sampler_lib
from tunix.rl import reshard
from tunix.rl.rollout import base_rollout, vanilla_rollout


class HistoryBufferLM(nnx.Module):
    """The Tunix sampler's model contract over a MaxText Transformer, with a history buffer as cache."""

    def __init__(self, base: nnx.Module, pad_id: int):
        self.base = base
        self.pad_id = int(pad_id)

    def init_cache(self, batch_size: int, cache_size: int, dtype: Any) -> dict[str, jax.Array]:
        del dtype  # the history holds token ids, not activations
        shape = (batch_size, cache_size)
        return {
            "tokens": jnp.full(shape, self.pad_id, jnp.int32),
            "positions": jnp.zeros(shape, jnp.int32),
            "segments": jnp.zeros(shape, jnp.int32),
            "end": jnp.zeros((), jnp.int32),
        }

    def __call__(self, input_tokens, positions, cache, attention_mask):
        del attention_mask  # MaxText derives its mask from segment ids plus causality
        batch, length = input_tokens.shape
        start = cache["end"]
        if length > 1:
            # Prefill of left-padded prompts: pads get segment 0 so real tokens never attend to them.
            segments = (input_tokens != self.pad_id).astype(jnp.int32)
        else:
            segments = jnp.ones((batch, 1), jnp.int32)  # a generated token is always real
        cache = {
            "tokens": jax.lax.dynamic_update_slice(cache["tokens"], input_tokens.astype(jnp.int32), (0, start)),
            "positions": jax.lax.dynamic_update_slice(cache["positions"], positions.astype(jnp.int32), (0, start)),
            "segments": jax.lax.dynamic_update_slice(cache["segments"], segments, (0, start)),
            "end": start + length,
        }
        # A fresh copy of the module per call: its Variables then belong to the current trace level.
        model = nnx.merge(*nnx.split(self.base), copy=True)
        logits = model(
            decoder_input_tokens=cache["tokens"],
            decoder_positions=cache["positions"],
            decoder_segment_ids=cache["segments"],
        )
        return jax.lax.dynamic_slice_in_dim(logits, start, length, axis=1), cache


class JaxMaxTextRollout(vanilla_rollout.VanillaRollout):
    """Drop-in for MaxTextVllmRollout (same constructor) that samples with Tunix's JAX sampler."""

    def __init__(
        self,
        rollout_actor: Any,
        tokenizer: Any,
        mesh: jax.sharding.Mesh,
        rollout_config: base_rollout.RolloutConfig,
        maxtext_config: Any = None,
        cache_config_or_size: Any = None,
    ):  # pylint: disable=super-init-not-called
        del maxtext_config, cache_config_or_size  # vLLM settings; nothing to configure for JAX sampling
        self._mesh = mesh
        base = rollout_actor.base  # TunixMaxTextAdapter -> the MaxText Transformer
        config = base.config
        model = HistoryBufferLM(base, pad_id=tokenizer.pad_token_id)
        self._sampler = sampler_lib.Sampler(
            model,
            tokenizer,
            sampler_lib.CacheConfig(
                cache_size=rollout_config.kv_cache_size,
                num_layers=config.num_decoder_layers,
                num_kv_heads=config.num_kv_heads,
                head_dim=config.head_dim,
            ),
        )

    def generate(self, prompts, rollout_config, **kwargs):
        with self._mesh:
            return super().generate(prompts, rollout_config, **kwargs)

    def update_params(self, params, filter_types=None) -> None:
        del filter_types
        model = self._sampler.transformer
        resharded = reshard.reshard_pytree(params, nnx.state(model, nnx.Param))
        nnx.update(model, resharded)
        self._sampler.transformer_state = nnx.variables(model)
