"""Registers a checkpoint's own HF config in MaxText's hard-coded model table.

MaxText builds its HF<->MaxText weight mapping from `HF_MODEL_CONFIGS[model_name]` (the real model's
shapes). A smaller checkpoint served under the same MaxText model name (the tiny CPU model, a user's
narrower Llama) needs that entry to be its own config, or the shapes disagree.
"""

from __future__ import annotations

from trainer.contract.run.shim_config import HfConfigRegistration, pop_shim_config


def model_name_from_argv(argv: list[str]) -> str:
    for arg in argv:
        if arg.startswith("model_name="):
            return arg.split("=", 1)[1]
    raise SystemExit("model_name=... is missing from the MaxText arguments")


def register_hf_config(model_name: str, source: str, revision: str | None) -> None:
    import os

    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS
    from transformers import AutoConfig

    # The token, when needed for a gated hub repo, comes from the environment only.
    config = AutoConfig.from_pretrained(source, revision=revision, token=os.environ.get("HF_TOKEN") or None)
    HF_MODEL_CONFIGS[model_name] = config


def register_hf_config_of(registration: HfConfigRegistration | None, maxtext_argv: list[str]) -> None:
    if registration is not None:
        register_hf_config(model_name_from_argv(maxtext_argv), registration.source, registration.revision)


def conversion_argv(argv: list[str]) -> list[str]:
    """A conversion entry's argv for MaxText, its checkpoint's config registered first. A conversion stage's shim
    configuration names that checkpoint only: anything else in it is a stage built wrong, not a setting to ignore."""
    config, maxtext_argv = pop_shim_config(argv)
    extra = sorted(config.model_fields_set - {"hf_config"})
    if extra:
        raise SystemExit(f"a conversion's shim configuration holds {', '.join(extra)}; only hf_config applies to it")
    register_hf_config_of(config.hf_config, maxtext_argv)
    return maxtext_argv


def run_as_main(module: str, maxtext_argv: list[str]) -> None:
    """Run a MaxText CLI module unmodified: they parse flags and set up JAX under `__main__`."""
    import runpy
    import sys

    sys.argv = [module, *maxtext_argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
