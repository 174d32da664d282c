"""The evaluation's Generator (runner.py) over either engine's sampler: train_rl's prompts, then per batch one greedy
pass and one sampled pass, each completion stopping at a stop token, max_new_tokens, or once `settled` says its scores
are fixed. hf_sampler.PrefixSampler (transformers) and jax_sampler.JaxSampler (the JAX engine) are such samplers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .completion_seeds import Done, never_done

if TYPE_CHECKING:
    from trainer.contract.spec.eval_suite import EvalSampling


class Sampler(Protocol):
    tokenizer: Any

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
    ) -> list[list[str]]: ...


class SamplingGenerator:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.tokenizer = sampler.tokenizer

    def prompt(self, question: str, template: dict[str, str]) -> str:
        from .prompts import build_prompt

        return build_prompt(question, template, self.tokenizer)

    def generate(
        self, prompts: list[str], seeds: list[int], sampling: EvalSampling, settled: Callable[[str], bool] | None
    ) -> list[tuple[str, list[str]]]:
        done = settled or never_done
        new_tokens, top_k = sampling.max_new_tokens, sampling.top_k
        greedy = self.sampler.sample(prompts, generations=1, temperature=None, top_k=top_k, new_tokens=new_tokens, seed=0, done=done)
        sampled = self.sampler.sample(
            prompts,
            generations=sampling.samples,
            temperature=sampling.temperature,
            top_k=top_k,
            new_tokens=new_tokens,
            seed=seeds,
            done=done,
        )
        return [(g[0], s) for g, s in zip(greedy, sampled, strict=True)]
