"""Will an eval job on a TPU slice fit on its chip? The JAX engine's memory (trainer/evals/jax_sampler.py), at submit.
A cpu eval job gets the same figures as host memory, which is not checked (fit.py's "unchecked").

An eval job trains nothing, so fit.py's GRPO phases say nothing about it. The JAX engine holds, on one device:
- the checkpoint in float32 (jax_model.load_params; a tied model's logits are computed against the embedding itself);
- the KV cache of its largest batch: EVAL_BATCH_ROWS prompts x k samples, each of PROMPT_ALLOWANCE prompt tokens
  (assumed: prompts are not read at submit) plus the suite's max_new_tokens, keys and values in float32;
- the step's float32 logits over the vocabulary, twice (the logits and the sampler's top-k over them).
Not covered: XLA's temporaries of the forward (a layer's activations, small beside the cache) and fragmentation.
"""

from __future__ import annotations

from trainer.contract.spec.eval_suite import EVAL_BATCH_ROWS
from trainer.contract.spec.job import JobSpec

from .fit_phases import PerChipBytes, PhaseBytes
from .model_shapes import ModelShape

PROMPT_ALLOWANCE = 512  # tokens: above the chat-templated GSM8K and arithmetic prompts (at most ~300)
FLOAT32 = 4


def eval_per_chip_bytes(spec: JobSpec, shape: ModelShape) -> PerChipBytes:
    task = spec.evaluation
    if task is None:
        raise ValueError("not an eval job")
    sampling = task.suite.sampling
    rows = EVAL_BATCH_ROWS * sampling.samples
    positions = PROMPT_ALLOWANCE + sampling.max_new_tokens
    weights = shape.parameters * FLOAT32
    cache = 2 * shape.num_layers * rows * positions * shape.num_kv_heads * shape.head_dim * FLOAT32
    logits = 2 * rows * shape.vocab_size * FLOAT32
    return PerChipBytes(
        params=weights,
        optimizer=0,
        gradients=0,
        reference=0,
        activations=logits,
        rollout_weights=0,
        kv_cache=cache,
        decode_weights=0,
        logprobs=0,
    )


def eval_phase(spec: JobSpec, shape: ModelShape) -> tuple[PerChipBytes, PhaseBytes]:
    parts = eval_per_chip_bytes(spec, shape)
    return parts, PhaseBytes(name="evaluation", resident=parts.params, arrays=parts.kv_cache + parts.activations, program=0)
