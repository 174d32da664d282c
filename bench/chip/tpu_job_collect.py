"""bench/chip/tpu_job.py's records made into the task's result: each chip call's record merged by arm and seed under the
registration's rerun policy, a job a later call continued (`run --continue`) read as the same run."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.chip import tpu_job_inputs
from bench.chip.tpu_job_inputs import REPO, TASKS, registration_path, result_path
from trainer.contract import JobSpec

RECORD = "tpu_job-record.json"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _eval_summary(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """An eval job's view (rljob status -o json) cut to what the result keeps."""
    if not found:
        return None
    summary = found.get("eval_job") or {}
    scores = summary.get("scores") or {}
    primary = summary.get("primary")
    kept = {k: scores[primary][k] for k in ("pass@1", "sampled", "pass@k", "maj@k")} if primary in scores else None
    return {
        "eval_id": found["id"],
        "phase": found["phase"],
        "engine": summary.get("engine"),
        "suite": (summary.get("suite") or {}).get("name"),
        "suite_hash": (summary.get("suite") or {}).get("content_hash"),
        "n": summary.get("n"),
        "k": summary.get("k"),
        "function": primary,
        "scores": kept,
        "generate_s": summary.get("generate_s"),
        "chip_hours": (found.get("usage") or {}).get("billed_chip_hours"),
        "cost_usd": (found.get("usage") or {}).get("cost_usd"),
        "wall_s": (found.get("goodput") or {}).get("wall_s"),
    }


def _run_summary(name: str, found: dict[str, Any], compared: dict[str, Any] | None) -> dict[str, Any]:
    view = found.get("view") or {}
    usage, goodput = view.get("usage") or {}, view.get("goodput") or {}
    arm, _, seed = name.partition("/")
    export = next((e for e in view.get("attached_evals") or [] if e["label"] == "export"), None)
    return {
        "arm": arm,
        "seed": int(seed),
        "job_id": found["job_id"],
        "phase": view.get("phase"),
        "message": view.get("message"),
        "steps": [view.get("step"), view.get("total_steps")],
        "spec_sha256": hashlib.sha256(json.dumps(view.get("spec"), sort_keys=True).encode()).hexdigest()[:16],
        "run_spec_sha256": _run_spec_hash(view.get("spec")),
        "health": {k: (view.get("health") or {}).get(k) for k in ("verdict", "message")},
        # export.verify fails the job when the export does not load, give finite logits and generate
        "export_checked": view.get("phase") == "SUCCEEDED" and bool(((view.get("spec") or {}).get("export") or {}).get("verify")),
        "stage_s": {k: round(v["duration_s"], 1) for k, v in (view.get("stage_times") or {}).items() if v.get("duration_s") is not None},
        "goodput": goodput,
        "chip_hours": usage.get("billed_chip_hours"),
        "price_usd_per_chip_hour": usage.get("price_usd_per_chip_hour"),
        "cost_usd": usage.get("cost_usd"),
        "metrics": view.get("metrics"),
        "export_eval": _eval_summary(found["evals"].get("export")),
        # rows paired against the base eval: the attached comparison (base and export on one job) or eval-compare's
        "vs_base": (export.get("vs_base") if export else None) or compared,
    }


def host_line(service_log: str) -> str | None:
    """What the local launcher read of the machine's TPU at start (service/adapters/local/host_tpu.py)."""
    for line in service_log.splitlines():
        if "local launcher: this machine's TPU" in line:
            message: str = json.loads(line)["message"]
            return message
    return None


def collect(directory: Path) -> None:
    """Merge one chip call's record into bench/results/tpu_job.json (runs by arm and seed).

    A run is replaced only where the registration's rerun policy allows it (`_rerun_reason`); the old one is kept
    under `reruns` with its reason."""
    record = json.loads((directory / RECORD).read_text())
    task = record.get("task", "arith")  # the first calls' records predate the gsm8k task
    result_file = result_path(task)
    registration = str(registration_path(task).relative_to(REPO))
    results = json.loads(result_file.read_text()) if result_file.exists() else {"registration": registration}
    call = {
        k: record.get(k) for k in ("started", "wall_s", "commit", "uncommitted", "device", "versions", "serve", "export_check", "compare")
    }
    if record.get("continues"):
        call["continues"] = record["continues"]
    call["jobs"] = {name: found["job_id"] for name, found in record["jobs"].items()}
    # Where each job and its eval jobs stood when the call ended: a run's summary is its latest state, and a call that
    # a later one continued would otherwise be told with what only the later one saw.
    call["ended"] = {
        name: {
            "phase": (found.get("view") or {}).get("phase"),
            "evals": {label: (found_eval or {}).get("phase") for label, found_eval in found["evals"].items()},
        }
        for name, found in record["jobs"].items()
    }
    call["cli"] = [
        {"argv": c["argv"][3:] if _is_rljob(c) else c["argv"], "rljob": _is_rljob(c), "rc": c["rc"], "s": c["s"]} for c in record["calls"]
    ]
    call["failed"] = [
        {"argv": c["argv"][3:] if _is_rljob(c) else c["argv"][1:4], "stderr_tail": c["stderr_tail"][-400:]}
        for c in record["calls"]
        if c["rc"] != 0
    ]
    log = (directory / "service.log").read_text(errors="replace") if (directory / "service.log").exists() else ""
    call["host_tpu"] = record.get("host_tpu") or host_line(log)
    runs = results.setdefault("runs", {})
    compares = record.get("compares") or {}
    for name, found in record["jobs"].items():
        if name in runs and not _continued(record, runs[name], found):
            _check_rerun(name, runs[name], _run_summary(name, found, None), results.get("reruns", []))
    results.setdefault("calls", []).append(call)
    for name, found in record["jobs"].items():
        if name in runs and not _continued(record, runs[name], found):
            old = runs[name]
            results.setdefault("reruns", []).append({**old, "replaced_by_call": record.get("started"), "reason": _rerun_reason(old)})
        runs[name] = _run_summary(name, found, (compares.get(name) or {}).get("comparison"))
        base = _eval_summary(found["evals"].get("base"))
        if base is None:
            continue
        base["call"] = record.get("started")
        # The registered base is the first scored one; a later call's base eval (its sampling seed is fixed) is kept
        # beside it, which shows whether the chip's evaluation repeats.
        if not (results.get("base") or {}).get("scores") or results["base"].get("eval_id") == base["eval_id"]:
            results["base"] = base  # the first scored one, or the same eval job read again by a later call
        else:
            results.setdefault("base_repeats", []).append(base)
    result_file.write_text(json.dumps(results, indent=2) + "\n")
    phases = ", ".join(f"{name} {run['phase']}" for name, run in runs.items())
    print(f"wrote {result_file}: {phases}; keep the record as bench/results/{TASKS[task]['records']}<time>.json")


def recollect(task: str) -> Path:
    """The task's result made again from its committed call records, in the order they ran (after a change to what
    collect keeps); the records are the measurement, the result is derived."""
    facts = TASKS[task]
    records = sorted(tpu_job_inputs.RESULTS.glob(f"{facts['records']}*[0-9].json"))
    result = result_path(task)
    result.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for record in records:
            call = Path(scratch) / record.stem
            call.mkdir()
            shutil.copy(record, call / RECORD)
            if (log := record.with_suffix(".service.log")).exists():
                shutil.copy(log, call / "service.log")
            collect(call)
    return result


def _is_rljob(call: dict[str, Any]) -> bool:
    """A call of the CLI (python -m service.cli.main ...), as against the runner's own commands."""
    return bool(call["argv"][2:3] == ["service.cli.main"])


def _continued(record: dict[str, Any], old: dict[str, Any], found: dict[str, Any]) -> bool:
    """The call followed the job an earlier call submitted (`run --continue`): the same run, read later, not a rerun.
    A record collected twice is no continuation."""
    return bool(record.get("continues")) and old.get("job_id") == found["job_id"]


def _rerun_reason(run: dict[str, Any]) -> str | None:
    """Why the registration's rerun policy lets a recorded run be run again: the device call's time ran out before
    it, or its export eval, ended. A run that ended (FAILED or CANCELLED included: how it ended is its result) has
    none; a cause outside the experiment that this record cannot show is a deviation to write up, not to collect."""
    if run.get("phase") not in TERMINAL:
        return f"the job was {run.get('phase')} when its device call's time was up"
    export = run.get("export_eval") or {}
    if run.get("phase") == "SUCCEEDED" and export.get("phase") not in TERMINAL:
        return f"its export eval was {export.get('phase') or 'not made'} when its device call's time was up"
    return None


def _check_rerun(name: str, old: dict[str, Any], new: dict[str, Any], reruns: list[dict[str, Any]]) -> None:
    """SystemExit unless the registration allows `new` to replace `old`: once, for a reason outside the experiment,
    with the identical spec (whether the call's first job also evaluated the base model aside)."""
    if _rerun_reason(old) is None:
        raise SystemExit(
            f"{name} already has a run that ended ({old['job_id']}, {old.get('phase')}); the registration reruns only a run "
            "cut short by something outside the experiment, never one that ended"
        )
    if any(f"{r['arm']}/{r['seed']}" == name for r in reruns):
        raise SystemExit(f"{name} was rerun once already; the registration reruns a run once")
    if old.get("run_spec_sha256") and new.get("run_spec_sha256") != old["run_spec_sha256"]:
        raise SystemExit(f"{name}'s rerun ({new['job_id']}) has another spec than {old['job_id']}: a rerun is the identical spec")


def _run_spec_hash(spec: dict[str, Any] | None) -> str | None:
    """The spec's content hash without eval.base (the runner attaches the base eval to a call's first job only). The
    service's content hash leaves out a field added since at its default (trainer/contract/spec/hashing.py), so a run and
    its rerun at a commit whose JobSpec gained a field still compare equal; a spec this code cannot read compares byte
    for byte."""
    if spec is None:
        return None
    trimmed = {**spec, "eval": {k: v for k, v in (spec.get("eval") or {}).items() if k != "base"}}
    try:
        return JobSpec.model_validate(trimmed).content_hash()[:16]
    except ValidationError:
        return hashlib.sha256(json.dumps(trimmed, sort_keys=True).encode()).hexdigest()[:16]
