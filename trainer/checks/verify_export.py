"""`python -m trainer.checks.verify_export [--wait] [--engine transformers|jax] DIR`: the export loads, gives finite
logits and generates.

Prints one JSON line with what was checked; exits 1 when the export does not load or is not finite.

The engine is transformers (torch) where torch is installed, else the JAX engine (trainer/evals/jax_model.py; a TPU
VM's host has no torch): trainer/contract/spec/eval_suite.py `export_check_engine`. Either way the check runs on the
host's CPU; the JAX check also reads the config with transformers' AutoConfig, which needs no torch.

With --wait it imports its engine first, then waits for a line on stdin before it reads DIR: the pipeline starts it
that way when the export stage starts, so those imports (most of the check's time) overlap to_huggingface instead of
following it. End of input without a line checks nothing and exits 2, never 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

USAGE = "usage: python -m trainer.checks.verify_export [--wait] [--engine transformers|jax] EXPORT_DIR"
ENGINES = ("transformers", "jax")
PROMPT = "Natalia sold clips to 48 of her friends. How many clips did she sell?"
NEW_TOKENS = 8


def import_loaders(engine: str) -> None:
    """What every check of `engine` imports whatever the export holds (transformers imports its model and fast
    tokenizer bases lazily, on the first from_pretrained)."""
    import transformers.tokenization_utils_tokenizers
    from transformers import AutoTokenizer  # noqa: F401

    if engine == "jax":
        import trainer.evals.jax_model
        import trainer.evals.jax_sampler  # noqa: F401
    else:
        import torch  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
        from transformers import AutoModelForCausalLM  # noqa: F401


def _verify_transformers(export_dir: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    model.eval()
    inputs = tokenizer([PROMPT], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
        out = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.eos_token_id)
    return {
        "architecture": type(model).__name__,
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "logits_shape": list(logits.shape),
        "finite": bool(torch.isfinite(logits).all()),
        "generated": tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True),
    }


def _verify_jax(export_dir: str) -> dict[str, Any]:
    import numpy as np
    from transformers import AutoConfig, AutoTokenizer

    from trainer.evals.jax_model import FAMILIES
    from trainer.evals.jax_sampler import JaxModel, JaxSampler

    AutoConfig.from_pretrained(export_dir)  # the config transformers would load it by (no torch needed for that)
    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    model = JaxModel(Path(export_dir))
    ids = tokenizer(PROMPT)["input_ids"]
    valid = np.ones((1, len(ids)), bool)
    cache_k, cache_v = model.empty_cache(1, len(ids))
    logits, _, _ = model(np.array([ids]), np.arange(len(ids))[None, :], cache_k, cache_v, 0, valid, every_position=True)
    logits = np.asarray(logits)
    sampler = JaxSampler(model, tokenizer, stop_ids=set(), batch_rows=1)
    generated = sampler.sample_ids([ids], generations=1, temperature=None, top_k=1, new_tokens=NEW_TOKENS, seed=0)
    return {
        "architecture": FAMILIES[model.shape.family],
        "num_parameters": int(sum(np.asarray(v).size for v in model.params.values())),
        "logits_shape": list(logits.shape),
        "finite": bool(np.isfinite(logits).all()),
        "generated": generated[0][0],
    }


def verify_export(export_dir: str, engine: str = "transformers") -> dict[str, Any]:
    checked = _verify_jax(export_dir) if engine == "jax" else _verify_transformers(export_dir)
    return {"export_dir": export_dir, "engine": engine, **checked}


def main(argv: list[str]) -> int:
    args = list(argv)
    wait = args[:1] == ["--wait"]
    if wait:
        args = args[1:]
    engine = "transformers"
    if args[:1] == ["--engine"]:
        if len(args) < 2 or args[1] not in ENGINES:
            print(f"verify_export: --engine takes one of {', '.join(ENGINES)}\n{USAGE}", file=sys.stderr)
            return 2
        engine, args = args[1], args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    if wait:
        import_loaders(engine)
        if not sys.stdin.readline():
            print("verify_export: stdin ended before the go line; nothing was checked", file=sys.stderr)
            return 2
    result = verify_export(args[0], engine)
    print(json.dumps(result))
    return 0 if result["finite"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
