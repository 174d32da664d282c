"""Stage 3: the chosen actor checkpoint (the last, or the best by evaluation) -> Hugging Face checkpoint with
to_huggingface, then a load check."""

from __future__ import annotations

import os
from typing import Any

from trainer.contract import JobSpec, RunLayout, join_uri
from trainer.contract.run.best_checkpoint import BestCheckpoint, ExportedCheckpoint
from trainer.contract.spec.eval_suite import GenerationEngine, export_check_engine, torch_installed
from trainer.runner import StageCommand, StageFailed
from trainer.sizing.hf_model import MaxTextModel
from trainer.sources import local_copy_path, stage_directory
from trainer.storage import StorageError, store_for

from .common import conversion_shim_args, hf_config_registration, stage_env, tokenizer_needs_hub
from .context import JobContext, latest_actor_step, stage_inputs
from .maxtext_paths import base_config

TO_HUGGINGFACE_MODULE = "maxtext.checkpoint_conversion.to_huggingface"
TO_HUGGINGFACE_ENTRY = "trainer.maxtext_entry.to_huggingface_entry"
VERIFY_EXPORT_MODULE = "trainer.checks.verify_export"


def actor_params_uri(layout: RunLayout, step: int) -> str:
    """Where Tunix saves the actor's parameters for a step (train_rl's checkpoint layout)."""
    return join_uri(layout.actor_checkpoints, str(step), "model_params")


def choose_checkpoint(spec: JobSpec, layout: RunLayout, last_step: int) -> ExportedCheckpoint:
    """The weights the spec asks to export. `best` without a record (every evaluation failed, or none ran
    on an older trainer) exports the last rather than failing after training was paid for, and says why."""
    last = actor_params_uri(layout, last_step)
    if spec.export.checkpoint == "last":
        return ExportedCheckpoint(asked="last", exported="last", step=last_step, params=last)
    store = store_for(layout.best_checkpoint_record)
    if not store.exists(layout.best_checkpoint_record):
        return ExportedCheckpoint(
            asked="best",
            exported="last",
            step=last_step,
            params=last,
            reason=f"no evaluation was recorded in {layout.best_checkpoint_record}",
        )
    best = BestCheckpoint.model_validate_json(store.read_bytes(layout.best_checkpoint_record))
    return ExportedCheckpoint(asked="best", exported="best", step=best.step, params=best.params, best=best)


def build_export_command(
    spec: JobSpec,
    layout: RunLayout,
    model: MaxTextModel,
    *,
    actor_step: int,
    params_uri: str | None = None,
    local_tokenizer: str | None = None,
    local_source: str | None = None,
) -> StageCommand:
    # The registered config is the checkpoint's own, so the export's config.json keeps its vocabulary,
    # RoPE, tied embeddings and token ids instead of MaxText's table entry for the full-size model.
    registration = hf_config_registration(spec, model, local_source)
    args = [
        *conversion_shim_args(registration),
        base_config(),
        f"model_name={model.name}",
        f"load_parameters_path={params_uri or actor_params_uri(layout, actor_step)}",
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


def build_verify_command(export_dir: str, *, wait_for_go: bool = False, engine: GenerationEngine = "transformers") -> StageCommand:
    """The load-and-generate check on the host's CPU, by transformers where torch is installed, else the JAX engine
    (trainer/contract/spec/eval_suite.py export_check_engine); with wait_for_go it imports first and checks on a line on stdin (the pipeline
    starts it alongside to_huggingface: trainer/checks/verify_export.py)."""
    args: tuple[str, ...] = ("--wait",) if wait_for_go else ()
    args += ("--engine", engine, export_dir)
    # The host's CPU, as to_huggingface: the chips are the trainer's, and the check needs none of them.
    return StageCommand(module=VERIFY_EXPORT_MODULE, args=args, env={"HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu"})


class VerificationFailed(Exception):
    """The export did not load or its logits were not finite."""


def run_export(ctx: JobContext) -> dict[str, Any]:
    spec, layout = ctx.spec, ctx.layout
    log = ctx.work_dir / "logs" / "export.log"
    step = latest_actor_step(layout)
    if step is None:
        raise StageFailed("export", 0, log, f"no actor checkpoint in {layout.actor_checkpoints}")
    inputs = stage_inputs(ctx)
    chosen = choose_checkpoint(spec, layout, step)
    command = build_export_command(
        spec,
        layout,
        ctx.model,
        actor_step=chosen.step,
        params_uri=chosen.params,
        local_tokenizer=inputs["local_tokenizer"],
        local_source=inputs["local_source"],
    )
    export_copy = ctx.work_dir / "export-copy"
    # The check starts now and imports its engine while to_huggingface runs (on the tiny spec those imports
    # were most of the check's 13 s); it reads the export only once told to below.
    check = None
    engine = export_check_engine(torch_installed())
    if spec.export.verify:
        verify = build_verify_command(local_copy_path(layout.export_dir, export_copy), wait_for_go=True, engine=engine)
        check = ctx.start_command(verify, with_stdin=True)
    try:
        ctx.run_command(command, log)
        outputs: dict[str, Any] = {
            "export": layout.export_dir,
            "actor_step": chosen.step,
            "exported_checkpoint": chosen.model_dump(mode="json"),
        }
        if chosen.reason:
            outputs["warning"] = f"export.checkpoint=best, but the last checkpoint was exported: {chosen.reason}"
        if spec.export.verify or spec.export.hub_repo:
            local_export = stage_directory(layout.export_dir, export_copy)
            if check is not None:
                try:
                    check.follow(log, stop=ctx.stop, stdin_line="go")
                except StageFailed as e:
                    raise VerificationFailed(f"the export in {layout.export_dir} failed the {engine} check: {e.tail[-500:]}") from e
                outputs["verified"] = True
            if spec.export.hub_repo:
                outputs["hub_repo"] = upload_to_hub(local_export, spec.export.hub_repo, private=spec.export.hub_private)
    finally:
        if check is not None:
            check.cancel()  # the export failed or was stopped before the check was told to go (no-op after it ran)
    return outputs


def upload_to_hub(local_dir: str, repo_id: str, *, private: bool) -> str:
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise StorageError(f"export.hub_repo={repo_id} needs HF_TOKEN in the environment")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=local_dir, commit_message="rljob export")
    return f"https://huggingface.co/{repo_id}"
