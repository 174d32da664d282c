"""Registers a checkpoint's own HF config in MaxText's hard-coded model table.

MaxText builds its HF<->MaxText weight mapping from `HF_MODEL_CONFIGS[model_name]` (the real model's
shapes). A smaller checkpoint served under the same MaxText model name (the tiny CPU model, a user's
narrower Llama) needs that entry to be its own config, or the shapes disagree.
"""

from __future__ import annotations

REGISTER_FLAG = "--rljob_register_hf_config="
REVISION_FLAG = "--rljob_hf_config_revision="


def pop_registration_args(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """Split our shim-only flags from the MaxText argv (which must reach MaxText unmodified)."""
    source = revision = None
    rest = []
    for arg in argv:
        if arg.startswith(REGISTER_FLAG):
            source = arg[len(REGISTER_FLAG) :]
        elif arg.startswith(REVISION_FLAG):
            revision = arg[len(REVISION_FLAG) :]
        else:
            rest.append(arg)
    return source, revision, rest


def model_name_from_argv(argv: list[str]) -> str:
    for arg in argv:
        if arg.startswith("model_name="):
            return arg.split("=", 1)[1]
    raise SystemExit("model_name=... is missing from the MaxText arguments")


def register_hf_config(model_name: str, source: str, revision: str | None) -> None:
    import os

    from transformers import AutoConfig

    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    # The token, when needed for a gated hub repo, comes from the environment only.
    config = AutoConfig.from_pretrained(source, revision=revision, token=os.environ.get("HF_TOKEN") or None)
    HF_MODEL_CONFIGS[model_name] = config
