"""Stage 1: Hugging Face checkpoint -> MaxText checkpoint (`<converted>/0/items`) with to_maxtext."""

from __future__ import annotations

import json
from typing import Any

from trainer.contract import JobSpec, RunLayout, Stage, join_uri, location_kind
from trainer.conversion_cache import CacheKey, ConversionCache, cache_key_for, default_cache_root, storage_format
from trainer.runner import StageCommand
from trainer.sizing.hf_model import MaxTextModel
from trainer.storage import store_for

from .common import conversion_shim_args, hf_config_registration, stage_env
from .context import JobContext, stage_inputs
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
    registration = hf_config_registration(spec, model, local_source)
    args = [
        *conversion_shim_args(registration),
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


def conversion_cache(ctx: JobContext) -> tuple[ConversionCache, CacheKey] | None:
    """The cache and this job's key, or None when caching is off (RLJOB_CONVERSION_CACHE=off)."""
    root = default_cache_root(ctx.spec)
    if root is None:
        return None
    fmt = storage_format(use_ocdbt=USE_OCDBT, use_zarr3=USE_ZARR3)
    return ConversionCache(root), cache_key_for(ctx.spec, ctx.model, fmt=fmt)


def cached_conversion(ctx: JobContext) -> dict[str, Any] | None:
    """Convert-stage outputs served from the cache, or None on a miss."""
    found = conversion_cache(ctx)
    entry = found[0].lookup(found[1]) if found else None
    return None if entry is None else {"checkpoint": entry.checkpoint_uri, "cache_entry": entry.uri, "cache_hit": True}


def run_convert(ctx: JobContext) -> dict[str, Any]:
    inputs = stage_inputs(ctx)
    log = ctx.work_dir / "logs" / "convert.log"
    found = conversion_cache(ctx)
    if found is None:
        ctx.run_command(build_convert_command(ctx.spec, ctx.layout, ctx.model, local_source=inputs["local_source"]), log)
        return {"checkpoint": converted_items_uri(ctx.layout)}
    cache, key = found

    def convert(output_dir: str) -> None:
        command = build_convert_command(ctx.spec, ctx.layout, ctx.model, local_source=inputs["local_source"], output_dir=output_dir)
        ctx.run_command(command, log)

    # A concurrent job converting the same model may publish first; then this one uses its entry.
    result = cache.get_or_convert(key, convert)
    return {"checkpoint": result.entry.checkpoint_uri, "cache_entry": result.entry.uri, "cache_hit": result.hit}


def converted_checkpoint(layout: RunLayout) -> str:
    """Where the convert stage left the checkpoint: its marker says (a cache entry or maxtext/)."""
    store = store_for(layout.root)
    marker = layout.stage_marker(Stage.CONVERT)
    if store.exists(marker):
        return json.loads(store.read_bytes(marker))["outputs"].get("checkpoint") or converted_items_uri(layout)
    return converted_items_uri(layout)
