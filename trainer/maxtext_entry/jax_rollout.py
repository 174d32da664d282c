"""A pure-JAX rollout engine for train_rl: Tunix's VanillaRollout sampler over the MaxText model.

train_rl constructs its rollout engine as `MaxTextVllmRollout(rollout_actor, tokenizer, mesh,
rollout_config, maxtext_config=...)`, which needs vLLM (TPU only). This class has the same
constructor and drives Tunix's own sampler instead, so it runs on CPU. The sampler's model is
`CachedLlamaLM` (cached_llama.py): a KV-cached forward over the actor's own parameters.

VanillaRollout.update_params rebuilds state from `nnx.Param` only, but the MaxText model also
carries RNG variables, so the sampler's structure check would fail: params are updated in place.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from tunix.generate import sampler as sampler_lib
from tunix.rl import reshard
from tunix.rl.rollout import base_rollout, vanilla_rollout

from .cached_llama import build_cached_llama


# Tunix ships no types, so its VanillaRollout is Any to mypy; subclassing it is the point of this class.
class JaxMaxTextRollout(vanilla_rollout.VanillaRollout):  # type: ignore[misc]
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
        model = build_cached_llama(rollout_actor.base)  # TunixMaxTextAdapter -> the MaxText Transformer
        shape = model.shape
        self._sampler = sampler_lib.Sampler(
            model,
            tokenizer,
            sampler_lib.CacheConfig(
                cache_size=rollout_config.kv_cache_size,
                num_layers=shape.num_layers,
                num_kv_heads=shape.num_kv_heads,
                head_dim=shape.head_dim,
            ),
        )

    def generate(
        self, prompts: list[str], rollout_config: base_rollout.RolloutConfig, **kwargs: Any
    ) -> base_rollout.RolloutOutput:
        with self._mesh:
            return super().generate(prompts, rollout_config, **kwargs)

    def update_params(self, params: Any, filter_types: Any = None) -> None:
        del filter_types
        model = self._sampler.transformer
        resharded = reshard.reshard_pytree(params, nnx.state(model, nnx.Param))
        nnx.update(model, resharded)
        self._sampler.transformer_state = nnx.variables(model)
