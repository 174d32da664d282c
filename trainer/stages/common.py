"""Arguments more than one stage passes to MaxText."""

from __future__ import annotations

from trainer.contract import JobSpec, location_kind
from trainer.maxtext_entry.shim_flags import REGISTER_FLAG, REVISION_FLAG
from trainer.sizing.hf_model import MaxTextModel

# Child environment for every stage: hub access only where a source really is on the hub.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def uses_cpu(spec: JobSpec) -> bool:
    return spec.hardware.accelerator == "cpu"


def hf_config_registration_args(spec: JobSpec, model: MaxTextModel, local_source: str | None) -> list[str]:
    """Shim-only flags: register the checkpoint's own HF config (consumed before MaxText sees argv)."""
    if not model.register_hf_config:
        return []
    source = local_source or spec.model.source
    args = [f"{REGISTER_FLAG}{source}"]
    if spec.model.revision and location_kind(spec.model.source) == "hub":
        args.append(f"{REVISION_FLAG}{spec.model.revision}")
    return args


def stage_env(spec: JobSpec, *, needs_hub: bool) -> dict[str, str]:
    env = {"JAX_PLATFORMS": "cpu"} if uses_cpu(spec) else {}
    if not needs_hub:
        env.update(OFFLINE_ENV)
    return env


def tokenizer_needs_hub(spec: JobSpec, local_tokenizer: str | None) -> bool:
    return local_tokenizer is None and location_kind(spec.model.tokenizer_location) == "hub"
