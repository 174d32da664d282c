"""A pure-JAX rollout engine for train_rl: Tunix's VanillaRollout sampler over the MaxText model.

train_rl constructs its rollout engine as `MaxTextVllmRollout(rollout_actor, tokenizer, mesh,
rollout_config, maxtext_config=...)`, which needs vLLM (TPU only). This class has the same
constructor and drives Tunix's own sampler instead, so it runs on CPU. The sampler's model is
`CachedLlamaLM` (cached_llama.py): a KV-cached forward over the actor's own parameters.

The sampler's model keeps a decoding layout of the actor's weights (cached_llama.refresh), so it does
not share all its arrays with the actor. Tunix decides whether to sync weights by comparing the leaves
of the actor's and `model()`'s states one to one (rl/utils.py is_sharing_weights), which raises on two
trees of different sizes. So `model()` is the MaxText Transformer the actor wraps (shared: no sync,
exactly as before the layout existed), and the layout is re-derived here, before each generation and
log-prob pass, whenever the actor's parameter arrays are no longer the ones it was derived from.
VanillaRollout.update_params rebuilds state from `nnx.Param` only, but the MaxText model also carries
RNG variables, so the sampler's structure check would fail: params are updated in place.

GRPO repeats each prompt num_generations times before it calls `generate` (Tunix's rl_learner
np.repeats the batch), so the sampler prefills each distinct prompt once and copies its cache.

Each call samples with its own key from the job's seed and the global step (rollout_keys.py): the seed train_rl
leaves unset would make Tunix's sampler draw PRNGKey(0) at every step.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
from flax import nnx
from tunix.generate import sampler as sampler_lib
from tunix.generate import tokenizer_adapter as tok_adapter
from tunix.rl import reshard
from tunix.rl.rollout import base_rollout, vanilla_rollout

from . import rollout_keys
from .cached_llama import build_cached_llama, shared_prefill
from .stop_token import SENTINEL_PAD


def prompt_copies(prompts: Sequence[str]) -> tuple[int, ...]:
    """For each prompt, the index of its first occurrence."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(p, i) for i, p in enumerate(prompts))


class SharedPrefillSampler(sampler_lib.Sampler):  # type: ignore[misc]  # Tunix ships no types
    """Tunix's sampler, with a prefill that computes each distinct prompt once (cached_llama.shared_prefill).

    The copies are a static argument of the compiled prefill, so a batch with another repetition pattern
    compiles its own prefill instead of reusing one traced for different rows.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._copies: tuple[int, ...] = ()
        shared = jax.jit(self._shared_prefill_fn, donate_argnums=(1,), static_argnames=("echo", "copies"))

        def prefill(params: Any, state: Any, images: Any = None, echo: bool = True) -> Any:
            return shared(params, state, images, echo=echo, copies=self._copies)

        self._compiled_prefill_fn: Callable[..., Any] = prefill

    def _shared_prefill_fn(self, params: Any, state: Any, images: Any = None, echo: bool = True, copies: tuple[int, ...] = ()) -> Any:
        with shared_prefill(copies):
            return self._prefill_fn(params, state, images, echo)

    def __call__(self, input_strings: str | Sequence[str], *args: Any, **kwargs: Any) -> Any:
        strings = [input_strings] if isinstance(input_strings, str) else list(input_strings)
        self._copies = prompt_copies(strings)
        return super().__call__(strings, *args, **kwargs)


class SentinelPadTokenizer(tok_adapter.TokenizerAdapter):  # type: ignore[misc]  # Tunix ships no types
    """The tokenizer as Tunix's sampler sees it, padding with an id no tokenizer produces (stop_token.py).

    The sampler masks `ids != pad_id` in its prefill and decode, and the learner takes this engine's pad id for
    its own masks; with the tokenizer's pad (EOS for Llama 3 and SmolLM2), every end-of-turn token of a chat
    prompt was masked as padding."""

    def pad_id(self) -> int:
        return SENTINEL_PAD


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
        self._derived_from: list[weakref.ref[Any]] = []  # the parameter arrays the layout was derived from
        self._keys = rollout_keys.for_this_job()
        model = build_cached_llama(rollout_actor.base)  # TunixMaxTextAdapter -> the MaxText Transformer
        shape = model.shape
        self._sampler = SharedPrefillSampler(
            model,
            SentinelPadTokenizer(tokenizer),
            sampler_lib.CacheConfig(
                cache_size=rollout_config.kv_cache_size,
                num_layers=shape.num_layers,
                num_kv_heads=shape.num_kv_heads,
                head_dim=shape.head_dim,
            ),
        )

    def model(self) -> nnx.Module:
        """The MaxText Transformer the actor wraps (see the module's docstring)."""
        base: nnx.Module = self._sampler.transformer.base
        return base

    def generate(self, prompts: list[str], rollout_config: base_rollout.RolloutConfig, **kwargs: Any) -> base_rollout.RolloutOutput:
        self._refresh_if_updated()
        rollout_config = dataclasses.replace(rollout_config, seed=self._keys.next_key())
        with self._mesh:
            return super().generate(prompts, rollout_config, **kwargs)

    def get_per_token_logps(self, *args: Any, **kwargs: Any) -> jax.Array:
        self._refresh_if_updated()
        logps: jax.Array = super().get_per_token_logps(*args, **kwargs)
        return logps

    def update_params(self, params: Any, filter_types: Any = None) -> None:
        del filter_types
        model = self._sampler.transformer
        resharded = reshard.reshard_pytree(params, nnx.state(model, nnx.Param))
        nnx.update(model, resharded)
        self._refresh_if_updated()

    def _refresh_if_updated(self) -> None:
        """Re-derive the decoding layout when the actor's parameter arrays are not the ones it was derived
        from (an optimizer step replaces them). Weak references: holding the old arrays would keep a
        second copy of the weights alive."""
        model = self._sampler.transformer
        leaves = jax.tree.leaves(nnx.state(model.base, nnx.Param))
        if len(leaves) == len(self._derived_from) and all(ref() is leaf for ref, leaf in zip(self._derived_from, leaves, strict=True)):
            return
        model.refresh()
        self._sampler.transformer_state = nnx.variables(model)
        self._derived_from = [weakref.ref(leaf) for leaf in leaves]
