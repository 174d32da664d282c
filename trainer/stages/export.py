"""Stage 3: latest actor checkpoint -> Hugging Face checkpoint with to_huggingface, then a load check."""

from __future__ import annotations

from trainer.contract import JobSpec, RunLayout, join_uri
from trainer.contract.hf_model import MaxTextModel
from trainer.runner import StageCommand

from .common import hf_config_registration_args, stage_env, tokenizer_needs_hub
from .maxtext_paths import base_config

TO_HUGGINGFACE_MODULE = "maxtext.checkpoint_conversion.to_huggingface"
TO_HUGGINGFACE_ENTRY = "trainer.maxtext_entry.to_huggingface_entry"
VERIFY_EXPORT_MODULE = "trainer.checks.verify_export"


def actor_params_uri(layout: RunLayout, step: int) -> str:
    """Where Tunix saves the actor's parameters for a step (train_rl's checkpoint layout)."""
    return join_uri(layout.actor_checkpoints, str(step), "model_params")


def build_export_command(
    spec: JobSpec,
    layout: RunLayout,
    model: MaxTextModel,
    *,
    actor_step: int,
    local_tokenizer: str | None = None,
    local_source: str | None = None,
) -> StageCommand:
    # The registered config is the checkpoint's own, so the export's config.json keeps its vocabulary,
    # RoPE, tied embeddings and token ids instead of MaxText's table entry for the full-size model.
    registration = hf_config_registration_args(spec, model, local_source)
    args = [
        *registration,
        base_config(),
        f"model_name={model.name}",
        f"load_parameters_path={actor_params_uri(layout, actor_step)}",
        f"base_output_directory={layout.export_dir}",
        f"scan_layers={str(spec.model.scan_layers).lower()}",
        "use_multimodal=false",
        "skip_jax_distributed_system=true",
        f"weight_dtype={spec.model.dtype}",
        *model.args(),
        # The tokenizer bundled with the export is the job's own, not MaxText's default hub id.
        f"--hf_model_path={local_tokenizer or spec.model.tokenizer_location}",
    ]
    env = stage_env(spec, needs_hub=tokenizer_needs_hub(spec, local_tokenizer))
    env["JAX_PLATFORMS"] = "cpu"  # to_huggingface runs on the host
    module = TO_HUGGINGFACE_ENTRY if registration else TO_HUGGINGFACE_MODULE
    return StageCommand(module=module, args=tuple(args), env=env)


def build_verify_command(export_dir: str, *, wait_for_go: bool = False) -> StageCommand:
    """The transformers load check; with wait_for_go it imports first and checks on a line on stdin
    (the pipeline starts it alongside to_huggingface: trainer/checks/verify_export.py)."""
    args = ("--wait", export_dir) if wait_for_go else (export_dir,)
    return StageCommand(module=VERIFY_EXPORT_MODULE, args=args, env={"HF_HUB_OFFLINE": "1"})
