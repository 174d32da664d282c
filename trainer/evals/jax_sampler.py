"""Generation with trainer/evals/jax_model.py: the sampler of a host without torch (a TPU job's), for sampling_generator.py.

It samples as hf_sampler.PrefixSampler does, so an eval job's scores mean the same on either engine: the logits
over the temperature, then top-k, one completion per (prompt seed, generation) with draws of its own, stopping at a
stop token, at max_new_tokens, or once `done(text)` says more text cannot change its score. The draws come from
JAX's threefry keyed by the same `completion_seed`, so a row's draws do not depend on its batch (its logits do only
through the padded width's reduction order, to float32 rounding); they are not torch's draws, so sampled text differs
between engines while its distribution does not (greedy agrees).

Shapes are fixed per call so XLA compiles a handful of programs, not one per prompt: the batch is padded to
`batch_rows` x generations, each prompt is left-padded to a multiple of PROMPT_BUCKET tokens (padding is masked,
so it changes no logit), and a finished completion keeps decoding unseen until every one has finished.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from trainer.contract.spec.eval_suite import EVAL_BATCH_ROWS

from .completion_seeds import Done, completion_seed, never_done
from .jax_model import HfShape, forward, load_params, read_config, read_shape, rope_inv_freq, stop_token_ids

PROMPT_BUCKET = 64


def _key_data(seed: int) -> np.ndarray:
    """A threefry key from a 63-bit completion seed (both halves, so no two seeds share a key)."""
    return np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF], dtype=np.uint32)


@partial(jax.jit, static_argnames=("top_k", "greedy"))
def pick_tokens(logits: jax.Array, keys: jax.Array, step: jax.Array, temperature: jax.Array, *, top_k: int, greedy: bool) -> jax.Array:
    """Each row's next token: argmax, or a draw among the top_k of logits / temperature with the row's own key
    folded with the step (torch.topk, softmax, multinomial in hf_sampler)."""
    if greedy:
        return jnp.argmax(logits, axis=-1)

    def one(row_logits: jax.Array, key: jax.Array) -> jax.Array:
        values, indices = jax.lax.top_k(row_logits / temperature, top_k)
        choice = jax.random.categorical(jax.random.fold_in(jax.random.wrap_key_data(key, impl="threefry2x32"), step), values)
        return indices[choice]

    return jax.vmap(one)(logits, keys)


class JaxModel:
    """A checkpoint on one JAX device with its compiled forward (prefill and decode are two shapes of one program)."""

    def __init__(self, model_dir: Path) -> None:
        self.config = read_config(model_dir)
        self.shape: HfShape = read_shape(self.config)
        self.device = jax.devices()[0]
        self.inv_freq = jax.device_put(rope_inv_freq(self.config, self.shape.head_dim), self.device)
        self.params = jax.device_put(load_params(model_dir, self.shape), self.device)
        self._forward = jax.jit(
            partial(forward, shape=self.shape), donate_argnames=("cache_k", "cache_v"), static_argnames=("every_position",)
        )

    def empty_cache(self, batch: int, total: int) -> tuple[jax.Array, jax.Array]:
        s = self.shape
        zeros = jnp.zeros((s.num_layers, batch, total, s.num_kv_heads, s.head_dim), jnp.float32, device=self.device)
        return zeros, jnp.copy(zeros)

    def __call__(
        self, tokens: Any, positions: Any, cache_k: Any, cache_v: Any, start: int, key_valid: Any, *, every_position: bool = False
    ) -> tuple[Any, Any, Any]:
        out: tuple[Any, Any, Any] = self._forward(
            self.params,
            self.inv_freq,
            tokens=jnp.asarray(tokens, jnp.int32),
            positions=jnp.asarray(positions, jnp.int32),
            cache_k=cache_k,
            cache_v=cache_v,
            start=jnp.asarray(start, jnp.int32),
            key_valid=jnp.asarray(key_valid),
            every_position=every_position,
        )
        return out


class JaxSampler:
    """PrefixSampler's interface (hf_sampler.py) over a JaxModel."""

    def __init__(self, model: JaxModel, tokenizer: Any, *, stop_ids: Collection[int], batch_rows: int = EVAL_BATCH_ROWS) -> None:
        self.model, self.tokenizer, self.stop_ids = model, tokenizer, frozenset(stop_ids)
        self.batch_rows = batch_rows
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(sorted(self.stop_ids)), 0)

    def sample(
        self,
        prompts: list[str],
        *,
        generations: int,
        temperature: float | None,
        top_k: int,
        new_tokens: int,
        seed: int | Sequence[int],
        done: Done = never_done,
    ) -> list[list[str]]:
        """temperature None: greedy. `seed`: one per prompt, or one for all (prompt i then draws with seed + i).
        Returns each prompt's completions (special tokens dropped), `batch_rows` prompts at a time."""
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return self.sample_ids(
            ids, generations=generations, temperature=temperature, top_k=top_k, new_tokens=new_tokens, seed=seed, done=done
        )

    def sample_ids(
        self,
        ids: list[list[int]],
        *,
        generations: int,
        temperature: float | None,
        top_k: int,
        new_tokens: int,
        seed: int | Sequence[int],
        done: Done = never_done,
    ) -> list[list[str]]:
        """`sample` of prompts given as token ids (the export check's, tokenized with the tokenizer's special tokens)."""
        seeds = [seed + i for i in range(len(ids))] if isinstance(seed, int) else list(seed)
        if len(seeds) != len(ids):
            raise ValueError(f"{len(seeds)} seeds for {len(ids)} prompts")
        out: list[list[str]] = []
        for start in range(0, len(ids), self.batch_rows):
            chunk = slice(start, start + self.batch_rows)
            out += self._sample_batch(ids[chunk], seeds[chunk], generations, temperature, top_k, new_tokens, done)
        return out

    def _sample_batch(
        self,
        ids: list[list[int]],
        seeds: list[int],
        generations: int,
        temperature: float | None,
        top_k: int,
        new_tokens: int,
        done: Done,
    ) -> list[list[str]]:
        width = -(-max(map(len, ids)) // PROMPT_BUCKET) * PROMPT_BUCKET
        rows = self.batch_rows * generations  # a fixed batch: short batches are padded with copies of the first row
        real = len(ids) * generations
        tokens = np.full((rows, width), self.pad_id, np.int32)
        valid = np.zeros((rows, width + new_tokens), bool)
        keys = np.zeros((rows, 2), np.uint32)
        for row in range(rows):
            prompt = row // generations if row < real else 0
            n = len(ids[prompt])
            tokens[row, width - n :] = ids[prompt]
            valid[row, width - n : width] = True
            keys[row] = _key_data(completion_seed(seeds[prompt], row % generations))
        positions = np.clip(np.cumsum(valid[:, :width], axis=1) - 1, 0, None)
        cache_k, cache_v = self.model.empty_cache(rows, width + new_tokens)
        logits, cache_k, cache_v = self.model(tokens, positions, cache_k, cache_v, 0, valid)
        position = positions[:, -1] + 1
        out: list[list[int]] = [[] for _ in range(real)]
        active = set(range(real))
        device_keys = jnp.asarray(keys)
        temp = jnp.float32(temperature if temperature is not None else 1.0)
        k = min(top_k, self.model.shape.vocab)
        for step in range(new_tokens):
            chosen = pick_tokens(logits, device_keys, jnp.int32(step), temp, top_k=k, greedy=temperature is None)
            picked = np.asarray(chosen)
            for row in sorted(active):
                token = int(picked[row])
                if token in self.stop_ids:
                    active.discard(row)
                    continue
                out[row].append(token)
                if done(self.tokenizer.decode(out[row], skip_special_tokens=True)):
                    active.discard(row)
            if not active or step == new_tokens - 1:
                break
            valid[:, width + step] = True
            logits, cache_k, cache_v = self.model(picked[:, None], position[:, None], cache_k, cache_v, width + step, valid)
            position = position + 1
        texts = [self.tokenizer.decode(t, skip_special_tokens=True) for t in out]
        return [texts[i * generations : (i + 1) * generations] for i in range(len(ids))]


def load_jax_sampler(
    model: str, tokenizer: str, *, local: bool, revision: str | None = None, batch_rows: int = EVAL_BATCH_ROWS
) -> JaxSampler:
    """The checkpoint on JAX's first device and its tokenizer. A hub id is fetched only where HF_HUB_OFFLINE
    allows, as transformers would (huggingface_hub's snapshot)."""
    import os

    from transformers import AutoTokenizer

    if not local:
        from huggingface_hub import snapshot_download

        token = os.environ.get("HF_TOKEN") or None
        same = tokenizer == model
        model = snapshot_download(model, revision=revision, token=token)
        tokenizer = model if same else snapshot_download(tokenizer, revision=revision, token=token)
    loaded_tokenizer = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    jax_model = JaxModel(Path(model))
    stops = stop_token_ids(Path(model), jax_model.config, loaded_tokenizer)
    return JaxSampler(jax_model, loaded_tokenizer, stop_ids=stops, batch_rows=batch_rows)
