"""Run as a subprocess: the jax rollout's shared prefill against the same rollout prefilling every row.

`python shared_prefill_check.py TOKENIZER_DIR OVERRIDE...` builds the MaxText model (fp32, random
weights) and JaxMaxTextRollout over it, then generates for prompts repeated the way GRPO repeats them
(two prompts, three and two copies), sampled and greedy, twice each: as shipped (each distinct prompt
prefilled once, its cache copied to its repeats) and with the dedupe switched off (every row
prefilled). Prints one JSON line: the tokens of both, and the batch sizes the forward was traced with.
"""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

PROMPTS = ["Ada has 3 apples and gets 4 more. How many apples?"] * 3 + ["Two plus two is"] * 2


from types import SimpleNamespace  # noqa: E402


def main() -> None:
    tokenizer_dir, *overrides = sys.argv[1:]

    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer
    from tunix.rl.rollout import base_rollout

    from trainer.rollout import cached_llama, jax_rollout
    from trainer.stages.maxtext_paths import base_config

    config = pyconfig.initialize(
        [
            "",
            base_config(),
            "model_name=llama3.1-8b",
            "scan_layers=true",
            "weight_dtype=float32",
            "dtype=float32",
            "attention=dot_product",
            "skip_jax_distributed_system=true",
            "enable_checkpointing=false",
            "per_device_batch_size=1",
            "max_target_length=48",
            "max_prefill_predict_length=32",
            "run_name=shared-prefill-check",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/shared-prefill",
            *overrides,
        ]
    )
    model, mesh = model_creation_utils.from_pretrained(config)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    traced_batches: list[int] = []
    forward = cached_llama.CachedLlamaLM._forward

    def recording_forward(self, input_tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        if input_tokens.shape[1] > 1:  # a prefill (decode steps feed one token)
            traced_batches.append(int(input_tokens.shape[0]))
        return forward(self, input_tokens, *args, **kwargs)

    cached_llama.CachedLlamaLM._forward = recording_forward

    def run(shared: bool, temperature: float | None) -> list[list[int]]:
        config = base_rollout.RolloutConfig(
            max_tokens_to_generate=12,
            max_prompt_length=32,
            kv_cache_size=48,
            temperature=temperature or 1.0,
            top_p=1.0 if temperature else None,
            top_k=50 if temperature else None,
            seed=7,
            eos_tokens=[-1],
        )
        original = jax_rollout.prompt_copies
        if not shared:
            jax_rollout.prompt_copies = lambda prompts: tuple(range(len(prompts)))
        try:
            rollout = jax_rollout.JaxMaxTextRollout(SimpleNamespace(base=model), tokenizer, mesh, config)
            out = rollout.generate(PROMPTS, config)
        finally:
            jax_rollout.prompt_copies = original
        return [[int(t) for t in row] for row in out.tokens]

    result = {}
    for mode, temperature in (("sampled", 1.0), ("greedy", None)):
        traced_batches.clear()
        shared = run(True, temperature)
        result[f"{mode}_shared_prefill_batches"] = list(traced_batches)
        traced_batches.clear()
        result[f"{mode}_shared"], result[f"{mode}_every_row"] = shared, run(False, temperature)
        result[f"{mode}_every_row_prefill_batches"] = list(traced_batches)
    result.update(after_an_update(model, mesh, tokenizer))
    result.update(fresh_keys(model, mesh, tokenizer))
    print(json.dumps(result))


def after_an_update(model, mesh, tokenizer) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """As in train_rl: Tunix asks whether the rollout shares the actor's weights (its leaf-by-leaf check,
    which raises on trees of different sizes); then an optimizer step replaces the actor's parameter arrays
    and the same rollout generates again. Its tokens must be those of a rollout built on the new weights."""
    import jax
    from flax import nnx
    from tunix.rl import utils as rl_utils
    from tunix.rl.rollout import base_rollout

    from trainer.rollout import jax_rollout, rollout_keys

    config = base_rollout.RolloutConfig(
        max_tokens_to_generate=12, max_prompt_length=32, kv_cache_size=48, temperature=1.0, seed=7, eos_tokens=[-1]
    )
    rollout = jax_rollout.JaxMaxTextRollout(SimpleNamespace(base=model), tokenizer, mesh, config)
    shares = bool(rl_utils.is_sharing_weights(model, rollout.model()))
    before = [[int(t) for t in row] for row in rollout.generate(PROMPTS, config).tokens]
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda x: -1.5 * x + 0.02, params))  # new arrays, as an optimizer step leaves
    # Each engine counts its calls within a step (rollout_keys.py): both draw step 1's first key.
    with rollout_keys.sampling_step(1):
        after = [[int(t) for t in row] for row in rollout.generate(PROMPTS, config).tokens]
    fresh = jax_rollout.JaxMaxTextRollout(SimpleNamespace(base=model), tokenizer, mesh, config)
    with rollout_keys.sampling_step(1):
        rebuilt = [[int(t) for t in row] for row in fresh.generate(PROMPTS, config).tokens]
    return {"shares_weights": shares, "update_before": before, "update_after": after, "update_rebuilt": rebuilt}


def fresh_keys(model, mesh, tokenizer) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Issue 53: each step's rollout draws its own key. The same prompt at steps 1 and 2 (temperature 1), and the
    first token drawn once per step over DRAWS steps beside the softmax of the logits the engine samples from, at a
    temperature that puts the likeliest token near 1/2 (random weights give a nearly flat softmax otherwise)."""
    import numpy as np
    from tunix.rl.rollout import base_rollout

    from trainer.rollout import cached_llama, jax_rollout, rollout_keys

    def config(tokens: int, temperature: float, top_p: float | None) -> base_rollout.RolloutConfig:
        return base_rollout.RolloutConfig(
            max_tokens_to_generate=tokens, max_prompt_length=32, kv_cache_size=48, temperature=temperature, top_p=top_p, eos_tokens=[-1]
        )

    rollout = jax_rollout.JaxMaxTextRollout(SimpleNamespace(base=model), tokenizer, mesh, config(12, 1.0, 1.0))
    two_steps = []
    for step in (1, 2):
        with rollout_keys.sampling_step(step):
            out = rollout.generate(PROMPTS[:1] * 4, config(12, 1.0, 1.0))
        two_steps.append([[int(t) for t in row] for row in out.tokens])
    # The logits of the first decoding position, from the engine's own sampler (greedy: no key involved). Tunix sizes
    # its logits buffer by the model's num_embed, which only its return_logits path reads and the engine leaves out.
    cached_llama.CachedLlamaLM.num_embed = int(model.config.vocab_size)  # the sampler merges a fresh module per call
    greedy = rollout._sampler(input_strings=PROMPTS[:1], max_generation_steps=1, echo=False, return_logits=True, pad_output=False)
    logits = np.asarray(greedy.logits[0], dtype=np.float64)[0]
    temperatures = np.geomspace(1e-3, 10.0, 400)
    top = [float(np.max(_softmax(logits / t))) for t in temperatures]
    temperature = float(temperatures[int(np.argmin(np.abs(np.array(top) - 0.5)))])
    first_tokens = []
    for step in range(1, DRAWS + 1):
        with rollout_keys.sampling_step(step):
            out = rollout.generate(PROMPTS[:1], config(1, temperature, 1.0))
        first_tokens.append(int(out.tokens[0][0]))
    probs = _softmax(logits / temperature)
    likeliest = [int(i) for i in np.argsort(-probs)[:3]]
    return {
        "two_steps": two_steps,
        "draws": len(first_tokens),
        "distinct_first_tokens": len(set(first_tokens)),
        "top_tokens": likeliest,
        "top_probs": [float(probs[i]) for i in likeliest],
        "top_freqs": [first_tokens.count(i) / len(first_tokens) for i in likeliest],
    }


DRAWS = 300


def _softmax(x):  # type: ignore[no-untyped-def]
    import numpy as np

    e = np.exp(x - np.max(x))
    return e / e.sum()


if __name__ == "__main__":
    main()
