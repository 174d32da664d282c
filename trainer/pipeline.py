"""Runs a job's stages in order, skipping the ones an earlier attempt finished, and maps failures
to the exit-code contract (trainer/contract/exit_codes.py).

A stage's completion marker is written last, after its outputs; a stage without a marker is run
again, and train_rl itself resumes from the newest actor checkpoint in the same run directory.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.contract import STAGE_ORDER, ExitCode, JobSpec, RunLayout, Stage, TrainStep, local_path, location_kind
from trainer.contract.hf_model import MaxTextModel
from trainer.conversion_cache import CacheKey, ConversionCache, cache_key_for, default_cache_root, storage_format
from trainer.progress import EventReporter
from trainer.run_size import report_run_storage
from trainer.run_stop import StopRequest
from trainer.runner import StageCommand, StageFailed, StageInterrupted, StartedStage, run_stage_command, start_stage_command
from trainer.sources import DataError, local_copy_path, materialise_dataset, stage_directory
from trainer.stages import convert as convert_stage
from trainer.stages.convert import build_convert_command, converted_items_uri
from trainer.stages.export import build_export_command, build_verify_command
from trainer.stages.train import build_train_command, total_train_steps
from trainer.storage import StorageError, store_for
from trainer.storage.manifest import write_manifest
from trainer.tensorboard_metrics import EventFileTailer
from trainer.train_progress import EvalLineReader, TrainProgressWatcher, TrainStepAssembler, goodput_from_line

RunCommand = Callable[..., None]
StartCommand = Callable[..., StartedStage]

# Output of a failed stage that means "try again later", not "this job cannot work".
TRANSIENT_FAILURE = re.compile(
    r"ConnectionError|ConnectTimeout|ReadTimeout|Temporary failure in name resolution|"
    r"HTTPError: 5\d\d|503 Service Unavailable|DEADLINE_EXCEEDED|UNAVAILABLE:|preempt",
    re.IGNORECASE,
)
PERMISSION_FAILURE = re.compile(r"403 Forbidden|PermissionDenied|Permission denied|401 Unauthorized|GatedRepoError")


class VerificationFailed(Exception):
    """The export did not load or its logits were not finite."""


@dataclass(frozen=True)
class JobContext:
    spec: JobSpec
    layout: RunLayout
    work_dir: Path  # local scratch: the run dir itself for local output, else a per-job temp dir
    reporter: EventReporter
    run_command: RunCommand
    model: MaxTextModel  # resolved once from the checkpoint's config.json, before any stage
    stop: StopRequest = field(default_factory=StopRequest)  # a stop signal or the deadline, read between stages
    start_command: StartCommand = start_stage_command  # a process followed later: the export check


def local_work_dir(layout: RunLayout) -> Path:
    if location_kind(layout.root) == "local":
        return Path(local_path(layout.root))
    base = Path(os.environ.get("RLJOB_WORK_DIR", "/tmp/rljob-work"))
    return base / layout.job_id


def remove_scratch(layout: RunLayout, work_dir: Path) -> None:
    """A gs:// run's local work dir holds only copies (data, tokenizer, logs already published):
    remove it when the run ends, or every run leaves gigabytes behind. A local run's work dir is
    the run directory itself and is never touched."""
    if location_kind(layout.root) != "local":
        shutil.rmtree(work_dir, ignore_errors=True)


def latest_actor_step(layout: RunLayout) -> int | None:
    steps = set()
    prefix = layout.actor_checkpoints.rstrip("/") + "/"
    for obj in store_for(layout.actor_checkpoints).list(layout.actor_checkpoints):
        head = obj.uri[len(prefix) :].split("/", 1)
        if len(head) == 2 and head[0].isdigit() and head[1].startswith("model_params/"):
            steps.add(int(head[0]))
    return max(steps) if steps else None


def _stage_inputs(ctx: JobContext) -> dict[str, Any]:
    """Local paths for inputs MaxText cannot read from gs:// itself."""
    spec, work = ctx.spec, ctx.work_dir
    inputs: dict[str, Any] = {
        "local_source": None, "local_tokenizer": None, "local_rewards": None, "local_template": None
    }
    if location_kind(spec.model.source) == "gcs":
        inputs["local_source"] = stage_directory(spec.model.source, work / "inputs" / "hf-source")
    if location_kind(spec.model.tokenizer_location) == "gcs":
        inputs["local_tokenizer"] = stage_directory(spec.model.tokenizer_location, work / "inputs" / "tokenizer")
    elif location_kind(spec.model.tokenizer_location) == "local":
        inputs["local_tokenizer"] = spec.model.tokenizer_location
    rewards = spec.grpo.rewards.functions_path
    if rewards and location_kind(rewards) == "gcs":
        inputs["local_rewards"] = _stage_file(rewards, work / "inputs" / "rewards")
    template = spec.dataset.prompt_template
    if template and location_kind(template) == "gcs":
        inputs["local_template"] = _stage_file(template, work / "inputs" / "template")
    return inputs


def _stage_file(uri: str, directory: Path) -> str:
    """A local copy of one gs:// file, for MaxText arguments that name a local path."""
    target = directory / Path(uri).name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(store_for(uri).read_bytes(uri))
    return str(target)


def conversion_cache(ctx: JobContext) -> tuple[ConversionCache, CacheKey] | None:
    """The cache and this job's key, or None when caching is off (RLJOB_CONVERSION_CACHE=off)."""
    root = default_cache_root(ctx.spec)
    if root is None:
        return None
    fmt = storage_format(use_ocdbt=convert_stage.USE_OCDBT, use_zarr3=convert_stage.USE_ZARR3)
    return ConversionCache(root), cache_key_for(ctx.spec, ctx.model, fmt=fmt)


def cached_conversion(ctx: JobContext) -> dict[str, Any] | None:
    """Convert-stage outputs served from the cache, or None on a miss."""
    found = conversion_cache(ctx)
    entry = found[0].lookup(found[1]) if found else None
    return None if entry is None else {"checkpoint": entry.checkpoint_uri, "cache_entry": entry.uri, "cache_hit": True}


def run_convert(ctx: JobContext) -> dict[str, Any]:
    inputs = _stage_inputs(ctx)
    log = ctx.work_dir / "logs" / "convert.log"
    found = conversion_cache(ctx)
    if found is None:
        ctx.run_command(build_convert_command(ctx.spec, ctx.layout, ctx.model, local_source=inputs["local_source"]), log)
        return {"checkpoint": converted_items_uri(ctx.layout)}
    cache, key = found

    def convert(output_dir: str) -> None:
        command = build_convert_command(ctx.spec, ctx.layout, ctx.model, local_source=inputs["local_source"],
                                        output_dir=output_dir)
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


def run_train(ctx: JobContext, *, poll_interval_s: float = 2.0) -> dict[str, Any]:
    spec, layout, reporter = ctx.spec, ctx.layout, ctx.reporter
    inputs = _stage_inputs(ctx)
    local_data = materialise_dataset(spec, ctx.work_dir / "data")
    command = build_train_command(
        spec,
        layout,
        ctx.model,
        local_data=local_data,
        local_tokenizer=inputs["local_tokenizer"],
        local_source=inputs["local_source"],
        local_rewards=inputs["local_rewards"],
        local_template=inputs["local_template"],
        load_parameters_path=converted_checkpoint(layout),
    )
    total = total_train_steps(spec)
    start_step = latest_actor_step(layout) or 0
    reported = {e.step for e in reporter.previous_events if isinstance(e, TrainStep)}
    assembler = TrainStepAssembler(total_steps=total, already_reported=reported)
    tensorboard_uri = f"{layout.rl_run}/tensorboard"
    watcher = TrainProgressWatcher(
        EventFileTailer(store_for(tensorboard_uri), tensorboard_uri), reporter, assembler, poll_interval_s=poll_interval_s
    )

    eval_lines = EvalLineReader(start_step=start_step, total_steps=total)

    def on_line(line: str) -> None:
        fields = eval_lines.fields(line)
        if fields:
            reporter.eval_result(**fields)
        elif (goodput := goodput_from_line(line)) is not None:
            reporter.goodput(goodput)

    log = ctx.work_dir / "logs" / "train.log"
    watcher.start()
    try:
        ctx.run_command(command, log, on_line=on_line)
    finally:
        metrics_warning = _final_metrics_read(watcher, log)
    final = latest_actor_step(layout)
    if final is None:
        raise StageFailed(command.module, 0, log, "no actor checkpoint was written")
    outputs = {"actor_step": final, "resumed_from_step": start_step, "checkpoint": f"{layout.actor_checkpoints}/{final}"}
    if metrics_warning:
        outputs["warning"] = metrics_warning
    return outputs


def _final_metrics_read(watcher: TrainProgressWatcher, log: Path) -> str | None:
    """Stop the TensorBoard watcher (its last read) without letting that read decide the stage.

    Training has ended by now and its outcome is train_rl's exit and the checkpoint, not the metrics:
    a storage error here would otherwise turn a finished stage into exit 77, or, raised in a `finally`,
    replace the real failure of train_rl. It becomes a warning in the log and the stage's outputs.
    """
    try:
        watcher.stop()
    except Exception as e:  # noqa: BLE001 - any failure to read metrics; the stage keeps its own result
        warning = (f"the final read of training metrics failed ({type(e).__name__}: {e}); progress may miss the "
                   f"last steps, the checkpoint is unaffected")
        print(f"rljob: warning: {warning}", file=sys.stderr)
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"rljob: warning: {warning}\n")
        except OSError:
            pass  # stderr has it
        return warning
    return None


def run_export(ctx: JobContext) -> dict[str, Any]:
    spec, layout = ctx.spec, ctx.layout
    log = ctx.work_dir / "logs" / "export.log"
    step = latest_actor_step(layout)
    if step is None:
        raise StageFailed("export", 0, log, f"no actor checkpoint in {layout.actor_checkpoints}")
    inputs = _stage_inputs(ctx)
    command = build_export_command(spec, layout, ctx.model, actor_step=step, local_tokenizer=inputs["local_tokenizer"],
                                   local_source=inputs["local_source"])
    export_copy = ctx.work_dir / "export-copy"
    # The check starts now and imports torch and transformers while to_huggingface runs (on the tiny
    # spec those imports were most of the check's 13 s); it reads the export only once told to below.
    check = None
    if spec.export.verify:
        verify = build_verify_command(local_copy_path(layout.export_dir, export_copy), wait_for_go=True)
        check = ctx.start_command(verify, with_stdin=True)
    try:
        ctx.run_command(command, log)
        outputs: dict[str, Any] = {"export": layout.export_dir, "actor_step": step}
        if spec.export.verify or spec.export.hub_repo:
            local_export = stage_directory(layout.export_dir, export_copy)
            if check is not None:
                try:
                    check.follow(log, stop=ctx.stop, stdin_line="go")
                except StageFailed as e:
                    raise VerificationFailed(f"the export in {layout.export_dir} failed the transformers check: {e.tail[-500:]}") from e
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


STAGE_RUNNERS: dict[Stage, Callable[[JobContext], dict[str, Any]]] = {
    Stage.CONVERT: run_convert,
    Stage.TRAIN: run_train,
    Stage.EXPORT: run_export,
}


def _artifact_size(uri: str) -> int | None:
    try:
        return sum(o.size_bytes for o in store_for(uri).list(uri))
    except StorageError:
        return None


def classify_failure(error: BaseException) -> ExitCode:
    if isinstance(error, StorageError):
        return ExitCode.STORAGE
    if isinstance(error, StageInterrupted):
        return ExitCode.RETRYABLE
    if isinstance(error, StageFailed):
        if error.returncode == ExitCode.RETRYABLE:
            return ExitCode.RETRYABLE  # the stage saved its state and stopped to be resumed (graceful_stop.py)
        if error.returncode < 0 or error.returncode > 128:
            return ExitCode.RETRYABLE  # killed by a signal: OOM killer, preemption, node drain
        if PERMISSION_FAILURE.search(error.tail):
            return ExitCode.STORAGE
        if TRANSIENT_FAILURE.search(error.tail):
            return ExitCode.RETRYABLE
        return ExitCode.NON_RETRYABLE
    if isinstance(error, (DataError, VerificationFailed)):
        return ExitCode.NON_RETRYABLE
    return ExitCode.NON_RETRYABLE


def write_marker(layout: RunLayout, stage: Stage, duration_s: float, outputs: dict[str, Any]) -> None:
    body = {"stage": stage.value, "duration_s": round(duration_s, 3), "finished_at": time.time(), "outputs": outputs}
    store_for(layout.root).write_bytes(layout.stage_marker(stage), json.dumps(body, sort_keys=True).encode())


def run_pipeline(ctx: JobContext, *, clock: Callable[[], float] = time.monotonic) -> ExitCode:
    """Run every unfinished stage; returns the exit code (events already emitted)."""
    try:
        return _run_stages(ctx, clock)
    finally:
        try:
            ctx.reporter.close()  # stops the periodic flusher; run_finished already wrote every line
        finally:
            remove_scratch(ctx.layout, ctx.work_dir)  # after run_finished and the manifest, however it ended


def _run_stages(ctx: JobContext, clock: Callable[[], float]) -> ExitCode:
    store = store_for(ctx.layout.root)
    reporter = ctx.reporter
    current: Stage | None = None
    try:
        for stage in STAGE_ORDER:
            current = stage
            if stage is Stage.EXPORT and not ctx.spec.export.enabled:
                reporter.stage_finished(stage, 0.0, skipped=True, reason="export disabled in the spec")
                continue
            if store.exists(ctx.layout.stage_marker(stage)):
                reporter.stage_finished(stage, 0.0, skipped=True, reason="completed by an earlier attempt")
                continue
            if (why := ctx.stop.reason()) is not None:
                raise StageInterrupted(f"stopped by {why} before the {stage.value} stage")
            started = clock()
            if stage is Stage.CONVERT and (cached := cached_conversion(ctx)) is not None:
                write_marker(ctx.layout, stage, clock() - started, cached)
                reporter.stage_finished(stage, clock() - started, skipped=True,
                                        reason=f"converted checkpoint found in the conversion cache: {cached['cache_entry']}")
                continue
            reporter.stage_started(stage)
            outputs = STAGE_RUNNERS[stage](ctx)
            duration = clock() - started
            for name in ("checkpoint", "export"):
                if name in outputs:
                    uri = outputs[name]
                    reporter.artifact(f"{stage.value}.{name}", uri, _artifact_size(uri))
            write_marker(ctx.layout, stage, duration, outputs)  # last: the stage is done only now
            reporter.stage_finished(stage, duration, reason=outputs.get("warning"))
            report_run_storage(reporter, ctx.layout, stage)
    except Exception as error:  # noqa: BLE001 - every failure becomes an exit code and a final event
        code = classify_failure(error)
        report_run_storage(reporter, ctx.layout, current)  # what a failed run leaves behind (checkpoints)
        _publish_logs(ctx)
        reporter.run_finished(False, int(code), message=str(error)[:2000], failed_stage=current)
        _write_manifest(ctx)
        return code
    _publish_logs(ctx)
    reporter.run_finished(True, int(ExitCode.SUCCESS), message=f"export at {ctx.layout.export_dir}")
    _write_manifest(ctx)  # last: it lists the final events file and logs with their checksums
    return ExitCode.SUCCESS


def _write_manifest(ctx: JobContext) -> None:
    references = {}
    store = store_for(ctx.layout.root)
    try:
        marker = ctx.layout.stage_marker(Stage.CONVERT)
        if store.exists(marker):
            outputs = json.loads(store.read_bytes(marker))["outputs"]
            if "cache_entry" in outputs:
                references["converted_checkpoint"] = outputs["checkpoint"]
        write_manifest(ctx.layout, store=store, references=references)
    except StorageError:
        pass  # the events already say how the run ended; a missing manifest must not change the exit code


def _publish_logs(ctx: JobContext) -> None:
    """Stage logs are written locally; a gs:// run directory gets a copy at logs/<stage>.log."""
    if location_kind(ctx.layout.root) == "local":
        return
    for stage in STAGE_ORDER:
        path = ctx.work_dir / "logs" / f"{stage.value}.log"
        if path.exists():
            try:
                store_for(ctx.layout.root).upload_file(str(path), ctx.layout.stage_log(stage))
            except StorageError:
                pass  # the events already say what happened; a missing log copy must not mask it


def default_run_command(stop: StopRequest | None = None) -> RunCommand:
    return functools.partial(run_stage_command, stop=stop)  # stop: see run_stage_command


def describe_plan(spec: JobSpec, layout: RunLayout, model: MaxTextModel) -> list[tuple[Stage, StageCommand]]:
    """The exact command of each stage, as `run` would issue it on a fresh run directory (the check
    without --wait: `run` starts it that way alongside to_huggingface and tells it when to go)."""
    local_tokenizer = spec.model.tokenizer_location if location_kind(spec.model.tokenizer_location) == "local" else None
    work = local_work_dir(layout)
    local_data = None
    if spec.dataset.uses_files:
        local_data = (str(work / "data" / "train.parquet"), str(work / "data" / "eval.parquet") if spec.dataset.eval_files else None)
    plan = [
        (Stage.CONVERT, build_convert_command(spec, layout, model)),
        (Stage.TRAIN, build_train_command(spec, layout, model, local_data=local_data, local_tokenizer=local_tokenizer)),
    ]
    if spec.export.enabled:
        export = build_export_command(spec, layout, model, actor_step=total_train_steps(spec),
                                      local_tokenizer=local_tokenizer)
        plan.append((Stage.EXPORT, export))
        if spec.export.verify:
            plan.append((Stage.EXPORT, build_verify_command(layout.export_dir)))
    return plan
