"""Stage 1: Hugging Face checkpoint -> MaxText checkpoint (`<converted>/0/items`) with to_maxtext."""

from __future__ import annotations

from trainer.contract import JobSpec, RunLayout, join_uri, location_kind
from trainer.contract.hf_model import MaxTextModel
from trainer.runner import StageCommand

from .common import hf_config_registration_args, stage_env
from .maxtext_paths import base_config

TO_MAXTEXT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"
TO_MAXTEXT_ENTRY = "trainer.maxtext_entry.to_maxtext_entry"


# rl.yml reads checkpoints with OCDBT and zarr3 off (Pathways); write what it reads. Part of the
# conversion cache key (trainer.conversion_cache.storage_format).
USE_OCDBT = False
USE_ZARR3 = False


def converted_items_uri(layout: RunLayout) -> str:
    return join_uri(layout.converted_dir, "0", "items")


def build_convert_command(
    spec: JobSpec,
    layout: RunLayout,
    model: MaxTextModel,
    *,
    local_source: str | None = None,
    output_dir: str | None = None,
) -> StageCommand:
    """The tutorial's to_maxtext call; `local_source` is where a gs:// source was downloaded to,
    `output_dir` a conversion-cache staging prefix (default: the run's maxtext/ directory)."""
    source = spec.model
    registration = hf_config_registration_args(spec, model, local_source)
    args = [
        *registration,
        base_config(),
        f"model_name={model.name}",
        f"base_output_directory={output_dir or layout.converted_dir}",
        f"scan_layers={str(source.scan_layers).lower()}",
        "use_multimodal=false",
        # Conversion is host work in the tutorial too (to_maxtext forces the CPU platform itself).
        "hardware=cpu",
        "skip_jax_distributed_system=true",
        f"checkpoint_storage_use_ocdbt={str(USE_OCDBT).lower()}",
        f"checkpoint_storage_use_zarr3={str(USE_ZARR3).lower()}",
        *model.args(),
        f"--lazy_load_tensors={str(source.lazy_load_tensors).lower()}",
        f"--hf_model_path={local_source or source.source}",
        f"--save_dtype={source.dtype}",
    ]
    if source.revision and local_source is None:
        args.append(f"--revision={source.revision}")
    module = TO_MAXTEXT_ENTRY if registration else TO_MAXTEXT_MODULE
    needs_hub = local_source is None and location_kind(source.source) == "hub"
    return StageCommand(module=module, args=tuple(args), env=stage_env(spec, needs_hub=needs_hub))
