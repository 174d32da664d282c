"""An eval job's stages (trainer/contract/spec/eval_suite.py): export converts a training job's MaxText actor
checkpoint to Hugging Face with to_huggingface (the export stage's command, on the eval job's own <run>/hf),
and evaluate generates and scores the suite (trainer/evals/): with transformers on a cpu job's host, with the JAX
engine (trainer/evals/jax_model.py) on a TPU job's chips."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from trainer.contract import JobSpec, RunLayout, location_kind
from trainer.contract.accelerators.tpu import CPU_ACCELERATOR
from trainer.contract.run.events import EvalReported
from trainer.contract.spec.eval_suite import EvalTask, GenerationEngine, generation_engine, torch_installed
from trainer.runner import StageCommand, StageInterrupted
from trainer.sizing.hf_model import MaxTextModel
from trainer.sources import DataError, stage_directory
from trainer.storage import store_for

from .context import JobContext, stage_inputs
from .export import build_export_command

if TYPE_CHECKING:
    from trainer.evals.runner import Generator

HF_NEEDS_NO_CONVERSION = "a Hugging Face checkpoint needs no conversion"


class CheckpointMissing(DataError):
    """The MaxText checkpoint an eval job names is not there; retrying cannot bring it back."""


def eval_task(spec: JobSpec) -> EvalTask:
    if spec.evaluation is None:
        raise ValueError("not an eval job: spec.evaluation is unset")
    return spec.evaluation


def needs_conversion(spec: JobSpec) -> bool:
    return eval_task(spec).checkpoint.format == "maxtext"


def build_eval_export_command(
    spec: JobSpec, layout: RunLayout, model: MaxTextModel, *, local_tokenizer: str | None = None, local_source: str | None = None
) -> StageCommand:
    """to_huggingface on the named checkpoint with the spec's model settings, into this eval job's <run>/hf."""
    params = eval_task(spec).checkpoint.params
    if params is None:
        raise ValueError("a huggingface checkpoint has no conversion")
    return build_export_command(
        spec, layout, model, actor_step=0, params_uri=params, local_tokenizer=local_tokenizer, local_source=local_source
    )


def run_eval_export(ctx: JobContext) -> dict[str, Any]:
    task = eval_task(ctx.spec)
    params = task.checkpoint.params or ""
    if not store_for(params).list(params):
        owner = f" of job {task.checkpoint.job_id}" if task.checkpoint.job_id else ""
        raise CheckpointMissing(
            f"the checkpoint {params}{owner} has no files: it was deleted (a training job keeps only its last "
            f"grpo.keep_last_checkpoints={ctx.spec.grpo.keep_last_checkpoints} actor checkpoints unless told otherwise) "
            "or never written; evaluate a checkpoint that still exists (its export, best or last)"
        )
    inputs = stage_inputs(ctx)
    command = build_eval_export_command(
        ctx.spec, ctx.layout, ctx.model, local_tokenizer=inputs["local_tokenizer"], local_source=inputs["local_source"]
    )
    ctx.run_command(command, ctx.work_dir / "logs" / "export.log")
    return {"export": ctx.layout.export_dir, "params": params}


def model_location(ctx: JobContext) -> tuple[str, str, bool]:
    """(model, tokenizer, local): the converted export, which bundles the job's tokenizer, or model.source with
    model.tokenizer; gs:// copied down first; a hub id stays one."""
    spec, work = ctx.spec, ctx.work_dir
    if needs_conversion(spec):
        export = stage_directory(ctx.layout.export_dir, work / "inputs" / "eval-model")
        return export, export, True
    source, tokenizer = spec.model.source, spec.model.tokenizer_location
    if location_kind(source) == "gcs":
        source = stage_directory(source, work / "inputs" / "hf-source")
    if location_kind(tokenizer) == "gcs":
        tokenizer = source if tokenizer == spec.model.source else stage_directory(tokenizer, work / "inputs" / "tokenizer")
    return source, tokenizer, location_kind(source) != "hub" and location_kind(tokenizer) != "hub"


def load_generator(
    engine: GenerationEngine, model_dir: str, tokenizer_dir: str, *, local: bool, revision: str | None, on_cpu: bool = False
) -> Generator:
    """The engine's generator over the checkpoint (each imported only here, so a host without torch never imports
    it). A cpu job's JAX engine stays on the CPU: on a TPU VM the chips may be another job's."""
    if engine == "jax":
        if on_cpu:
            import jax

            jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
        from trainer.evals.jax_sampler import load_jax_sampler
        from trainer.evals.sampling_generator import SamplingGenerator

        return SamplingGenerator(load_jax_sampler(model_dir, tokenizer_dir, local=local, revision=revision))
    from trainer.evals.hf_sampler import HfGenerator, load_model

    model, tokenizer = load_model(model_dir, tokenizer_dir, local=local, revision=revision)
    return HfGenerator(model, tokenizer)


def run_evaluate(ctx: JobContext) -> dict[str, Any]:
    from trainer.evals.runner import Interrupted, evaluate_suite, load_suite
    from trainer.evals.suite_rewards import SuiteRewardFailed

    task = eval_task(ctx.spec)
    suite = load_suite(task.suite, ctx.work_dir)  # a user suite's rewards: loaded in a sandbox worker, closed below
    log_path = ctx.work_dir / "logs" / "evaluate.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log_file, contextlib.closing(suite.rewards):

        def log(line: str) -> None:
            print(f"rljob evaluate: {line}", flush=True)
            log_file.write(line + "\n")
            log_file.flush()

        model_dir, tokenizer_dir, local = model_location(ctx)
        log(f"suite {suite.name} ({len(suite.rows)} rows, content {suite.content_hash}); model {model_dir}")
        if suite.rewards.sandbox is not None:
            log(f"reward sandbox: {suite.rewards.sandbox.isolation_line()}")
        accelerator = ctx.spec.hardware.accelerator
        torch_here = torch_installed()
        engine = generation_engine(accelerator, torch_here)
        log(f"engine {engine} ({accelerator}{'' if torch_here else ', no torch installed'})")
        on_cpu = accelerator == CPU_ACCELERATOR
        generator = load_generator(engine, model_dir, tokenizer_dir, local=local, revision=ctx.spec.model.revision, on_cpu=on_cpu)
        evaluated = ctx.layout.export_dir if needs_conversion(ctx.spec) else ctx.spec.model.source
        try:
            report = evaluate_suite(
                suite,
                generator,
                engine=engine,
                layout=ctx.layout,
                checkpoint=task.checkpoint,
                model_source=evaluated,
                should_stop=ctx.stop.reason,
                log=log,
            )
        except Interrupted as e:
            raise StageInterrupted(str(e)) from e
        finally:
            if suite.rewards.sandbox is not None:
                log(suite.rewards.sandbox.summary_line())
        if suite.rewards.sandbox is not None and (problem := suite.rewards.sandbox.mostly_failed()):
            raise SuiteRewardFailed(problem)  # not a report: most of its scores are failed calls, not answers
    ctx.reporter.emit(EvalReported, report=report)
    primary = report.functions[report.primary]
    return {
        "report": ctx.layout.eval_report,
        "outcomes": ctx.layout.eval_outcomes,
        "suite_hash": suite.content_hash,
        "rows": report.n,
        "pass@1": primary.pass_at_1.value,
    }
