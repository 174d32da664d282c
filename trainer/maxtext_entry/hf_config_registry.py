"""Registers a checkpoint's own HF config in MaxText's hard-coded model table.

MaxText builds its HF<->MaxText weight mapping from `HF_MODEL_CONFIGS[model_name]` (the real model's
shapes). A smaller checkpoint served under the same MaxText model name (the tiny CPU model, a user's
narrower Llama) needs that entry to be its own config, or the shapes disagree.
"""

from __future__ import annotations

from .shim_flags import REGISTER_FLAG, REVISION_FLAG, pop_flags


def pop_registration_args(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """Split our shim-only flags from the MaxText argv (which must reach MaxText unmodified)."""
    found, rest = pop_flags(argv, REGISTER_FLAG, REVISION_FLAG)
    return found.get(REGISTER_FLAG), found.get(REVISION_FLAG), rest


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


def register_from_argv(argv: list[str]) -> list[str]:
    """Register the config our flags name (if any); return the argv meant for MaxText."""
    source, revision, maxtext_argv = pop_registration_args(argv)
    if source:
        register_hf_config(model_name_from_argv(maxtext_argv), source, revision)
    return maxtext_argv


def run_as_main(module: str, maxtext_argv: list[str]) -> None:
    """Run a MaxText CLI module unmodified: they parse flags and set up JAX under `__main__`."""
    import runpy
    import sys

    sys.argv = [module, *maxtext_argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
