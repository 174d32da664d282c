"""Generation with Hugging Face transformers (torch) on the host: a KV-cache sampler and the model loader.

The sampler (first written for bench/learning/arith_difficulty.py, which imports it from here) computes the prompts'
shared prefix once, then each prompt's remainder, then decodes all completions together, dropping each one
at a stop token or once `done(text)` says more text cannot change its score. Sampling is Tunix's: the logits
over the temperature, then top-k. With one seed, one torch generator draws for the whole batch (the benches);
with a seed per prompt, each completion has a generator of its own, so its draws do not depend on which
other rows share its batch, on where a resumed evaluation restarts, or on when its neighbours stop.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from .completion_seeds import Done, completion_seed
from .completion_seeds import never_done as _never_done
from .sampling_generator import SamplingGenerator


class PrefixSampler:
    """Samples `generations` completions per prompt with a KV cache: shared prefix once, then each
    prompt's remainder, then the completions together, dropping each one once `done(text)` says so."""

    def __init__(self, model: Any, tokenizer: Any, *, stop_ids: Collection[int] | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.stop_ids = frozenset(stop_ids) if stop_ids is not None else frozenset({tokenizer.eos_token_id})

    def _prefill(self, prompts: list[str]) -> tuple[Any, Any, Any, Any]:
        import torch

        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        shared = 0
        while shared < min(map(len, ids)) - 1 and len({i[shared] for i in ids}) == 1:
            shared += 1
        with torch.no_grad():
            cache = self.model(input_ids=torch.tensor([ids[0][:shared]]), use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(ids))
        rest = [i[shared:] for i in ids]
        width = max(map(len, rest))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        tokens = torch.tensor([[pad] * (width - len(r)) + r for r in rest])
        # Padding sits between the shared prefix and each remainder; the mask hides it and positions skip it.
        mask = torch.tensor([[1] * shared + [0] * (width - len(r)) + [1] * len(r) for r in rest])
        positions = (mask.cumsum(-1) - 1)[:, shared:].clamp(min=0)
        with torch.no_grad():
            out = self.model(input_ids=tokens, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
        return out.logits[:, -1], cache, mask, positions[:, -1] + 1

    def sample(
        self,
        prompts: list[str],
        *,
        generations: int,
        temperature: float | None,
        top_k: int,
        new_tokens: int,
        seed: int | Sequence[int],
        done: Done = _never_done,
    ) -> list[list[str]]:
        """temperature None: greedy. `seed`: one for the batch, or one per prompt (each completion then draws
        from its own generator). Returns each prompt's completions (special tokens dropped)."""
        import torch

        logits, cache, mask, position = self._prefill(prompts)
        cache.batch_repeat_interleave(generations)
        logits, mask, position = (t.repeat_interleave(generations, 0) for t in (logits, mask, position))
        if isinstance(seed, int):
            shared_generator, generators = torch.Generator().manual_seed(seed), None
        else:
            if len(seed) != len(prompts):
                raise ValueError(f"{len(seed)} seeds for {len(prompts)} prompts")
            shared_generator = None
            generators = [torch.Generator().manual_seed(completion_seed(s, g)) for s in seed for g in range(generations)]
        tokens: list[list[int]] = [[] for _ in range(len(prompts) * generations)]
        active = torch.arange(len(tokens))
        for step in range(new_tokens):
            if temperature is None:
                chosen = logits.argmax(-1)
            else:
                top = torch.topk(logits.float() / temperature, min(top_k, logits.shape[-1]), dim=-1)
                probs = torch.softmax(top.values, -1)
                if generators is None:
                    pick = torch.multinomial(probs, 1, generator=shared_generator)
                else:
                    pick = torch.stack(
                        [torch.multinomial(p, 1, generator=generators[row]) for p, row in zip(probs, active.tolist(), strict=True)]
                    )
                chosen = top.indices.gather(-1, pick).squeeze(-1)
            keep = []
            for i, (row, token) in enumerate(zip(active.tolist(), chosen.tolist(), strict=True)):
                if token in self.stop_ids:
                    continue
                tokens[row].append(token)
                if not done(self.tokenizer.decode(tokens[row], skip_special_tokens=True)):
                    keep.append(i)
            if not keep or step == new_tokens - 1:
                break
            index = torch.tensor(keep)
            cache.batch_select_indices(index)
            active, mask, position, chosen = active[index], mask[index], position[index], chosen[index]
            mask = torch.cat([mask, torch.ones(len(keep), 1, dtype=mask.dtype)], dim=-1)
            with torch.no_grad():
                out = self.model(
                    input_ids=chosen[:, None], attention_mask=mask, position_ids=position[:, None], past_key_values=cache, use_cache=True
                )
            logits, position = out.logits[:, -1], position + 1
        texts = [self.tokenizer.decode(t, skip_special_tokens=True) for t in tokens]
        return [texts[i * generations : (i + 1) * generations] for i in range(len(prompts))]


def stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokenizer's end of text and every end token the checkpoint's generation config names (a chat
    model's end of turn is often only there)."""
    ids = {tokenizer.eos_token_id} - {None}
    config = getattr(model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, list):
        ids.update(i for i in configured if isinstance(i, int))
    return ids


def load_model(model: str, tokenizer: str, *, local: bool, revision: str | None = None) -> tuple[Any, Any]:
    """The checkpoint in float32 for the CPU, in eval mode, and its tokenizer. A local directory is read
    with local_files_only; a hub id is fetched only where HF_HUB_OFFLINE allows (transformers reads it)."""
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hub = {} if local else {"revision": revision, "token": os.environ.get("HF_TOKEN") or None}
    loaded_tokenizer = AutoTokenizer.from_pretrained(tokenizer, local_files_only=local, **hub)
    loaded_model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, local_files_only=local, **hub).eval()
    return loaded_model, loaded_tokenizer


class HfGenerator(SamplingGenerator):
    """The evaluation's Generator over a transformers model (sampling_generator.py)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        super().__init__(PrefixSampler(model, tokenizer, stop_ids=stop_token_ids(model, tokenizer)))
