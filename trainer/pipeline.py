"""Runs a job's stages in order, skipping the ones an earlier attempt finished, and maps failures
to the exit-code contract (trainer/contract/run/exit_codes.py). Orchestration only: each stage's runner
lives with its command builder in trainer/stages/.

A stage's completion marker is written last, after its outputs; a stage without a marker is run
again, and train_rl itself resumes from the newest actor checkpoint in the same run directory.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.contract import STAGE_ORDER, ExitCode, JobSpec, RunLayout, Stage, location_kind
from trainer.contract.run.best_checkpoint import ExportedCheckpoint
from trainer.contract.run.events import EVAL_STAGE_ORDER
from trainer.contract.spec.hang import HangPolicy
from trainer.hang_watchdog import HangStop, HangWatchdog
from trainer.repro import write_repro
from trainer.run_size import report_run_storage
from trainer.run_stop import StopRequest
from trainer.runner import StageCommand, StageFailed, StageInterrupted, run_stage_command, running_stages
from trainer.sizing.hf_model import MaxTextModel
from trainer.sources import DataError
from trainer.stages.context import JobContext, RunCommand, local_work_dir
from trainer.stages.convert import build_convert_command, cached_conversion, run_convert
from trainer.stages.evaluate import HF_NEEDS_NO_CONVERSION, build_eval_export_command, needs_conversion, run_eval_export, run_evaluate
from trainer.stages.export import VerificationFailed, build_export_command, build_verify_command, run_export
from trainer.stages.train import build_train_command, run_train, total_train_steps
from trainer.storage import ArtifactStore, StorageError, store_for
from trainer.storage.manifest import write_manifest

# Output of a failed stage that means "try again later", not "this job cannot work".
TRANSIENT_FAILURE = re.compile(
    r"ConnectionError|ConnectTimeout|ReadTimeout|Temporary failure in name resolution|"
    r"HTTPError: 5\d\d|503 Service Unavailable|DEADLINE_EXCEEDED|UNAVAILABLE:|preempt",
    re.IGNORECASE,
)
PERMISSION_FAILURE = re.compile(r"403 Forbidden|PermissionDenied|Permission denied|401 Unauthorized|GatedRepoError")


def remove_scratch(layout: RunLayout, work_dir: Path) -> None:
    """A gs:// run's local work dir holds only copies (data, tokenizer, logs already published):
    remove it when the run ends, or every run leaves gigabytes behind. A local run's work dir is
    the run directory itself and is never touched."""
    if location_kind(layout.root) != "local":
        shutil.rmtree(work_dir, ignore_errors=True)


STAGE_RUNNERS: dict[Stage, Callable[[JobContext], dict[str, Any]]] = {
    Stage.CONVERT: run_convert,
    Stage.TRAIN: run_train,
    Stage.EXPORT: run_export,
}
# An eval job (spec.evaluation): export converts a MaxText checkpoint, evaluate scores the suite (stages/evaluate.py).
EVAL_STAGE_RUNNERS: dict[Stage, Callable[[JobContext], dict[str, Any]]] = {
    Stage.EXPORT: run_eval_export,
    Stage.EVALUATE: run_evaluate,
}


def stage_order(spec: JobSpec) -> tuple[Stage, ...]:
    return EVAL_STAGE_ORDER if spec.is_eval else STAGE_ORDER


def _skip_reason(spec: JobSpec, stage: Stage) -> str | None:
    """Why a stage is not run at all for this spec (None: it runs)."""
    if stage is not Stage.EXPORT:
        return None
    if spec.is_eval:
        return None if needs_conversion(spec) else HF_NEEDS_NO_CONVERSION
    return None if spec.export.enabled else "export disabled in the spec"


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


def watch_for_hangs(ctx: JobContext) -> HangWatchdog:
    """The trainer's hang watchdog on this run (trainer/hang_watchdog.py): on a hang, the stacks go to the running
    stage's log (its local copy, published to a gs:// run directory before the exit), the run ends with exit HUNG."""
    first = stage_order(ctx.spec)[0]

    def local_log(stage: Stage | None) -> Path:
        return ctx.work_dir / "logs" / f"{(stage or first).value}.log"

    def before_exit() -> None:
        _publish_logs(ctx)
        ctx.reporter.close()

    stop = HangStop(
        ctx.reporter.emit,
        attempt=lambda: ctx.reporter.attempt,
        log_path=local_log,
        stacks_uri=lambda stage: ctx.layout.stage_log(stage or first),
        stages=lambda: running_stages(dumping_stacks=True),
        seal=ctx.reporter.seal,
        before_exit=before_exit,
    )
    watchdog = HangWatchdog(HangPolicy.from_env(override_s=ctx.spec.hang_timeout_s), stop)
    ctx.reporter.listeners.append(watchdog.progress)
    return watchdog.start()


def run_pipeline(ctx: JobContext, *, clock: Callable[[], float] = time.monotonic) -> ExitCode:
    """Run every unfinished stage; returns the exit code (events already emitted)."""
    watchdog = watch_for_hangs(ctx)
    try:
        return _run_stages(ctx, clock)
    finally:
        watchdog.stop()
        try:
            ctx.reporter.close()  # stops the periodic flusher; run_finished already wrote every line
        finally:
            remove_scratch(ctx.layout, ctx.work_dir)  # after run_finished and the manifest, however it ended


def _run_stages(ctx: JobContext, clock: Callable[[], float]) -> ExitCode:
    store = store_for(ctx.layout.root)
    reporter = ctx.reporter
    current: Stage | None = None
    try:
        write_repro(ctx.spec, ctx.layout)  # before any stage: what this attempt runs with
        runners = EVAL_STAGE_RUNNERS if ctx.spec.is_eval else STAGE_RUNNERS
        for stage in stage_order(ctx.spec):
            current = stage
            if (skipped := _skip_reason(ctx.spec, stage)) is not None:
                reporter.stage_finished(stage, 0.0, skipped=True, reason=skipped)
                continue
            if store.exists(ctx.layout.stage_marker(stage)):
                reporter.stage_finished(stage, 0.0, skipped=True, reason="completed by an earlier attempt")
                continue
            if (why := ctx.stop.reason()) is not None:
                raise StageInterrupted(f"stopped by {why} before the {stage.value} stage")
            started = clock()
            if stage is Stage.CONVERT and (cached := cached_conversion(ctx)) is not None:
                write_marker(ctx.layout, stage, clock() - started, cached)
                reporter.stage_finished(
                    stage,
                    clock() - started,
                    skipped=True,
                    reason=f"converted checkpoint found in the conversion cache: {cached['cache_entry']}",
                )
                continue
            reporter.stage_started(stage)
            outputs = runners[stage](ctx)
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
    reporter.run_finished(True, int(ExitCode.SUCCESS), message=_success_message(ctx, store))
    _write_manifest(ctx)  # last: it lists the final events file and logs with their checksums
    return ExitCode.SUCCESS


def _success_message(ctx: JobContext, store: ArtifactStore) -> str:
    """Where the export is and, when the spec asked for the best weights, which ones it holds; for an eval job,
    its primary score and where the report is."""
    if ctx.spec.evaluation is not None:
        return _eval_success_message(ctx, store)
    message = f"export at {ctx.layout.export_dir}"
    marker = ctx.layout.stage_marker(Stage.EXPORT)
    if ctx.spec.export.checkpoint != "best" or not store.exists(marker):
        return message
    try:
        chosen = ExportedCheckpoint.model_validate(json.loads(store.read_bytes(marker))["outputs"]["exported_checkpoint"])
    except (StorageError, KeyError, ValueError):
        return message  # an export by an older trainer, or an unreadable marker: the run still succeeded
    if chosen.best is None:
        return f"{message}, of the last weights (step {chosen.step}): {chosen.reason}"
    lo, hi = chosen.best.ci95
    return (
        f"{message}, of the best-evaluated weights: the {chosen.best.label} evaluation, accuracy "
        f"{chosen.best.accuracy:.3f} (95% CI {lo:.3f}-{hi:.3f}, {chosen.best.n} rows), actor step {chosen.step}"
    )


def _eval_success_message(ctx: JobContext, store: ArtifactStore) -> str:
    from trainer.contract.run.eval_report import EvalReport

    try:
        report = EvalReport.model_validate_json(store.read_bytes(ctx.layout.eval_report))
    except (StorageError, ValueError):
        return f"evaluated; report at {ctx.layout.eval_report}"
    primary = report.functions[report.primary]
    lo, hi = primary.pass_at_1.ci95
    return (
        f"{report.suite.name} (content {report.suite.content_hash}), {report.n} rows: {report.primary} pass@1 "
        f"{primary.pass_at_1.value:.3f} (95% CI {lo:.3f}-{hi:.3f}), maj@{report.k} {primary.maj_at_k.value:.3f}; "
        f"report at {ctx.layout.eval_report}"
    )


def _write_manifest(ctx: JobContext) -> None:
    references = {}
    store = store_for(ctx.layout.root)
    try:
        marker = ctx.layout.stage_marker(Stage.CONVERT)
        if store.exists(marker):
            outputs = json.loads(store.read_bytes(marker))["outputs"]
            if "cache_entry" in outputs:
                references["converted_checkpoint"] = outputs["checkpoint"]
        exported = None
        marker = ctx.layout.stage_marker(Stage.EXPORT)
        if store.exists(marker):
            exported = json.loads(store.read_bytes(marker))["outputs"].get("exported_checkpoint")
        write_manifest(ctx.layout, store=store, references=references, exported_checkpoint=exported)
    except StorageError:
        pass  # the events already say how the run ended; a missing manifest must not change the exit code


def _publish_logs(ctx: JobContext) -> None:
    """Stage logs are written locally; a gs:// run directory gets a copy at logs/<stage>.log."""
    if location_kind(ctx.layout.root) == "local":
        return
    for stage in stage_order(ctx.spec):
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
    if spec.is_eval:
        # Evaluate runs inside the trainer (transformers on the host): only a conversion has a command.
        return (
            [(Stage.EXPORT, build_eval_export_command(spec, layout, model, local_tokenizer=local_tokenizer))]
            if needs_conversion(spec)
            else []
        )
    work = local_work_dir(layout)
    local_data = None
    if spec.dataset.uses_files:
        local_data = (str(work / "data" / "train.parquet"), str(work / "data" / "eval.parquet") if spec.dataset.eval_files else None)
    plan = [
        (Stage.CONVERT, build_convert_command(spec, layout, model)),
        (Stage.TRAIN, build_train_command(spec, layout, model, local_data=local_data, local_tokenizer=local_tokenizer)),
    ]
    if spec.export.enabled:
        export = build_export_command(spec, layout, model, actor_step=total_train_steps(spec), local_tokenizer=local_tokenizer)
        plan.append((Stage.EXPORT, export))
        if spec.export.verify:
            plan.append((Stage.EXPORT, build_verify_command(layout.export_dir)))
    return plan
