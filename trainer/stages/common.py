"""Arguments more than one stage passes to MaxText."""

from __future__ import annotations

from trainer.contract import JobSpec, location_kind
from trainer.contract.run.shim_config import HfConfigRegistration, ShimConfig
from trainer.sizing.hf_model import MaxTextModel

# Child environment for every stage: hub access only where a source really is on the hub.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def uses_cpu(spec: JobSpec) -> bool:
    return spec.hardware.accelerator == "cpu"


def hf_config_registration(spec: JobSpec, model: MaxTextModel, local_source: str | None) -> HfConfigRegistration | None:
    """The checkpoint whose own HF config the entry registers in MaxText's table, where the model needs it."""
    if not model.register_hf_config:
        return None
    revision = spec.model.revision if spec.model.revision and location_kind(spec.model.source) == "hub" else None
    return HfConfigRegistration(source=local_source or spec.model.source, revision=revision)


def conversion_shim_args(registration: HfConfigRegistration | None) -> list[str]:
    """A conversion stage's shim configuration as its one argument; none where there is nothing to register (the
    stage then runs MaxText's module directly)."""
    return [ShimConfig(hf_config=registration).as_argument()] if registration else []


def stage_env(spec: JobSpec, *, needs_hub: bool) -> dict[str, str]:
    env = {"JAX_PLATFORMS": "cpu"} if uses_cpu(spec) else {}
    if not needs_hub:
        env.update(OFFLINE_ENV)
    return env


def tokenizer_needs_hub(spec: JobSpec, local_tokenizer: str | None) -> bool:
    return local_tokenizer is None and location_kind(spec.model.tokenizer_location) == "hub"
