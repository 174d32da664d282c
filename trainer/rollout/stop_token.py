"""The token that ends a completion inside GRPO's loss, and padding never mistaken for a real token.

Tunix 0.1.7, which MaxText 0.2.5's train_rl runs (the upstream description is in docs/trainer.md):
- its sampler returns a completion up to but excluding its first EOS (generate/sampler.py, `np_find_first_eos_idx`),
  and `GRPOLearner._generate_and_compute_advantage` builds the completion mask as `completion_ids != pad_id`;
  so the decision to stop never gets a gradient, and an empty completion drops out of the loss and the KL;
- every mask is `ids != pad_id`: the sampler's prefill and decode, the learner's prompt mask and
  `common.process_ids` (the reference, old and policy log-probs). Tunix's TokenizerAdapter sets pad to EOS for
  tokenizers without a pad token (Llama 3's), and SmolLM2 ships pad == EOS: the chat template's end-of-turn
  tokens in every prompt are then hidden from the model as if they were padding.

What this module changes, for every rollout engine:
1. `RLCluster.generate`: a completion shorter than max_tokens_to_generate ended on EOS, so EOS is appended to its
   tokens (not to its text: rewards see what they saw). Its length, EOS included, is kept for step 2.
2. `GRPOLearner._generate_and_compute_advantage`: the completion mask is rebuilt from those lengths and the prompt
   mask from position (the left padding is the run of pad ids before the first real token); the step's
   `completions/empty_fraction` and `completions/stopped_fraction` go to Tunix's metrics. Tunix's own
   `completions/mean_length` counts the tokens its mask lets into the loss, the EOS included on this path.
3. `common.process_ids`: the same prompt rule; every completion position is attended, since under causal
   attention a pad after a completion cannot change a token before it, and the loss mask decides what counts.
The jax rollout engine also pads with `SENTINEL_PAD` (jax_rollout.py), so the sampler's own masks see every
real token.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

# No tokenizer produces a negative id; JAX's gathers wrap -1 to the last row, so a pad position still computes a
# finite value that every mask then drops.
SENTINEL_PAD = -1

_last = threading.local()  # the lengths of the completions RLCluster.generate returned last, in this thread


def with_stop_tokens(tokens: Sequence[Any], max_tokens: int, eos_id: int) -> list[np.ndarray]:
    """Each completion with its EOS when it stopped before `max_tokens` (an engine that kept it is left as is)."""
    out = []
    for completion in tokens:
        ids = np.asarray(completion)
        if len(ids) < max_tokens and (len(ids) == 0 or int(ids[-1]) != eos_id):
            ids = np.concatenate([ids, np.asarray([eos_id], dtype=ids.dtype if ids.size else np.int32)])
        out.append(ids)
    return out


def mask_from_lengths(lengths: Sequence[int], width: int) -> np.ndarray:
    return np.arange(width)[None, :] < np.asarray(lengths)[:, None]


def completion_metrics(lengths: Sequence[int], stopped: Sequence[bool]) -> dict[str, tuple[float, Any]]:
    """Per step, in Tunix's buffer_metrics form: the share of completions that are empty (EOS first: the sign of a
    collapse) and the share that stopped on EOS rather than running out of tokens."""
    n = max(len(lengths), 1)
    empty = sum(1 for length, s in zip(lengths, stopped, strict=True) if s and length == 1)
    return {"completions/empty_fraction": (empty / n, np.mean), "completions/stopped_fraction": (sum(stopped) / n, np.mean)}


def left_padding_mask(ids: Any, pad_id: int) -> Any:
    """True from each row's first token that is not pad: left padding is a leading run, never a token inside."""
    import jax.numpy as jnp

    return jnp.cumsum(ids != pad_id, axis=-1) > 0


def install() -> None:
    import dataclasses
    import inspect

    import jax.numpy as jnp
    from tunix.rl import common, rl_cluster
    from tunix.rl.grpo import grpo_learner

    generate = rl_cluster.RLCluster.generate
    compute_advantage = grpo_learner.GRPOLearner._generate_and_compute_advantage
    process_ids = common.process_ids

    signature = inspect.signature(generate)

    def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = generate(self, *args, **kwargs)
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        config = self.cluster_config.rollout_config  # as generate itself reads it
        if isinstance(config, dict):
            config = config[call.arguments["mode"]]
        steps = call.arguments["max_generation_steps"]
        max_tokens = int(steps if steps is not None else config.max_tokens_to_generate)
        eos_id = int(self.rollout.eos_id())
        tokens = with_stop_tokens(output.tokens, max_tokens, eos_id)
        _last.lengths = [len(t) for t in tokens]
        _last.stopped = [len(t) > 0 and int(t[-1]) == eos_id for t in tokens]
        return dataclasses.replace(output, tokens=tokens)

    advantage_signature = inspect.signature(compute_advantage)

    def _generate_and_compute_advantage(self: Any, *args: Any, **kwargs: Any) -> Any:
        _last.lengths = _last.stopped = None
        example = compute_advantage(self, *args, **kwargs)
        lengths, stopped = _last.lengths, _last.stopped
        if lengths is None or len(lengths) != example.completion_ids.shape[0]:
            raise RuntimeError("rljob: the completion lengths of this batch were not recorded by RLCluster.generate")
        call = advantage_signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        self.rl_cluster.buffer_metrics(completion_metrics(lengths, stopped), mode=call.arguments["mode"])
        pad_id = int(self.rl_cluster.rollout.pad_id())
        return example.replace(
            completion_mask=jnp.asarray(mask_from_lengths(lengths, example.completion_ids.shape[1])),
            prompt_mask=left_padding_mask(example.prompt_ids, pad_id),
        )

    def _process_ids(
        prompt_tokens: Any, completion_tokens: Any, pad_id: int, eos_id: int, segment_ids: Any = None, segment_positions: Any = None
    ) -> Any:
        if segment_ids is not None:  # packed sequences carry their own segment ids and positions
            return process_ids(prompt_tokens, completion_tokens, pad_id, eos_id, segment_ids, segment_positions)
        prompt_completion_ids = jnp.concatenate([prompt_tokens, completion_tokens], axis=1)
        mask = jnp.concatenate([left_padding_mask(prompt_tokens, pad_id), jnp.ones(completion_tokens.shape, dtype=bool)], axis=-1)
        positions = common.build_positions_from_mask(mask)
        return prompt_completion_ids, positions, common.make_causal_attn_mask(mask), mask.astype(jnp.int32)

    rl_cluster.RLCluster.generate = _generate
    grpo_learner.GRPOLearner._generate_and_compute_advantage = _generate_and_compute_advantage
    common.process_ids = _process_ids
