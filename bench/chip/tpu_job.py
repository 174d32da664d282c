"""A whole rljob job on the TPU chip, through the service: issue 64's first question, "submit my model on a TPU,
does it come back better, and at what cost?", asked the way a user asks it.

On the chip's machine `rljob serve` listens on a unix socket (no TCP there), the CLI submits a v5e-1 job for
SmolLM2-135M-Instruct (built there by `make-model`, without torch) on the arithmetic task's fold A with eval jobs
attached on the chip (the built-in suite arith-b, fold B, held out; base and export), follows it to its end, and reads
status, logs, samples, goodput and both evaluations back through the CLI; then the export is loaded and generates once
more, by the JAX engine the TPU host has.

    .venv/bin/python bench/chip/tpu_job.py prepare [--task gsm8k]       # here: bench/.tpu-job/ (job files, the commit)
    python3.12 bench/chip/tpu_job.py run --out DIR [--task gsm8k] --jobs trained:1,control:1 [--base]   # on the chip
    python3.12 bench/chip/tpu_job.py run --out DIR [--task gsm8k] --continue   # the next call: what the last one left running
    python3.12 bench/chip/tpu_job.py run --out DIR --task gsm8k --jobs trained:4 --logits-dtype float32   # issue 66 §2
    .venv/bin/python bench/chip/tpu_job.py collect DIR                  # here: the task's bench/results file, then
    .venv/bin/python bench/chip/tpu_job.py recollect [--task gsm8k]     # (or: the result again from the kept records)
    .venv/bin/python bench/readme_sections.py                      # bench/chip/README.md's block
Keep each call's record beside the result (bench/results/tpu_job-call-<time>.json, tpu_job_gsm8k-call-<time>.json for
gsm8k, and its .service.log): tests/bench/chip/test_tpu_job.py collects them again and expects the committed result. A
call also leaves each job's trainer events in OUT/events/ and lists the compilation cache in its record: keep the
events as bench/results/tpu_job_gsm8k-events-<date>/ (bench/chip/tpu_compile_cache.py and
bench/estimate/tpu_held_out_setting.py read them). The tasks and their registrations: bench/chip/tpu_job_inputs.py.

A `--logits-dtype` call's jobs are the registered ones but for `model.logits_dtype`, without eval jobs: keep its
record apart (bench/results/tpu_agreement_logits-call-<time>.json) and its events, for the sampler-trainer agreement
step by step against the registered job of the same seed; the task's results never collect it.

Everything `run` executes is a command a user would type (`rljob serve --uds`, `rljob submit`, `rljob status`, ...);
each is recorded with its exit status, its time and the end of its output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.chip.tpu_job_collect import RECORD, TERMINAL, collect, host_line, recollect  # noqa: E402
from bench.chip.tpu_job_inputs import INPUTS, TASKS, job_spec, prepare  # noqa: E402

TAIL = 4000
# What a call does once its waits end (the views, logs, samples, comparisons, usage, the export loaded again, the chip's
# probe): 49 s on the chip's machine (the call of 2026-12-06T23:07). The waits stop this long before --max-s, so --max-s
# bounds the whole call; a call run past the device's limit is killed before it writes its record.
WRAP_UP_S = 90


class Recorder:
    """Runs commands as a user would and keeps each one's argv, exit status, seconds and output's end."""

    def __init__(self, env: dict[str, str], deadline: float) -> None:
        self.env, self.deadline, self.calls = env, deadline, []

    def run(self, *argv: str, timeout_s: float = 120, keep: int = TAIL) -> subprocess.CompletedProcess[str]:
        began = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout_s)
        self.calls.append(
            {
                "argv": [a.replace(str(REPO), "$REPO") for a in argv],
                "rc": done.returncode,
                "s": round(time.monotonic() - began, 2),
                "stdout_tail": done.stdout[-keep:],
                "stderr_tail": done.stderr[-keep:],
            }
        )
        return done

    def rljob(self, *args: str, timeout_s: float = 120, keep: int = TAIL) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "service.cli.main", *args, timeout_s=timeout_s, keep=keep)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _wait(rec: Recorder, job_id: str, poll_s: float = 5.0) -> dict[str, Any] | None:
    """The job's view once terminal, or the last one read when the time is up (quiet polls, not recorded)."""
    view = None
    while rec.left_s() > 0:
        done = subprocess.run(
            [sys.executable, "-m", "service.cli.main", "status", job_id, "-o", "json"],
            cwd=REPO, env=rec.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        view = _json(done)
        if view is not None and view.get("phase") in TERMINAL:
            return view
        time.sleep(poll_s)
    return view


def _attached(rec: Recorder, job_id: str) -> dict[str, str]:
    """label -> eval job id of the evaluations the service attached to the job."""
    view = _json(rec.rljob("status", job_id, "-o", "json")) or {}
    return {e["label"]: e["eval_id"] for e in view.get("attached_evals") or [] if e.get("eval_id")}


ARMS = ("trained", "control")


def _job_record(rec: Recorder, job_id: str, first: bool) -> dict[str, Any]:
    """One job followed to its end, its attached evals to theirs, and what the CLI says of them."""
    found: dict[str, Any] = {"job_id": job_id, "view": _wait(rec, job_id)}
    evals: dict[str, Any] = {}
    for label, eval_id in _attached(rec, job_id).items():
        _wait(rec, eval_id)
        evals[label] = _json(rec.rljob("status", eval_id, "-o", "json"))
    found["evals"] = evals
    found["view"] = _json(rec.rljob("status", job_id, "-o", "json")) or found["view"]
    if first:  # what a user reads, once: the human views of status, logs and samples
        rec.rljob("status", job_id)
        rec.rljob("logs", job_id, keep=20000)
        rec.rljob("samples", job_id)
    return found


def run(
    out: Path,
    task: str,
    jobs: list[tuple[str, int]],
    base: bool,
    max_s: float,
    smoke: bool = False,
    follow: bool = False,
    logits_dtype: str | None = None,
) -> None:
    """Submit every (arm, seed) job at once (the local launcher runs TPU jobs one at a time) and follow them all.

    `follow` (run --continue): submit nothing; serve the same state again and follow the jobs the last submitting call
    left, as a service restarted on its machine does (each job resumes from its checkpoint, each eval from its scored
    rows). A device call's time is shorter than a GSM8K job with its evaluations."""
    work = Path(os.environ.get("RLJOB_TPU_JOB_WORK", "/tmp/rljob-tpu-job"))
    work.mkdir(parents=True, exist_ok=True)
    submitted_file = work / "submitted.json"
    earlier = json.loads(submitted_file.read_text()) if follow and submitted_file.exists() else None
    if follow and (earlier is None or earlier.get("task") != task):
        raise SystemExit(
            f"nothing to continue: {submitted_file} names no {task} jobs (the machine was released since the call that "
            "submitted them, or that call ran another task); run without --continue"
        )
    socket = work / "rljob.sock"
    token = os.urandom(16).hex()
    env = dict(os.environ, RLJOB_URL=f"unix:{socket}", RLJOB_TOKEN=token, HF_HUB_OFFLINE="1", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    # No JAX_COMPILATION_CACHE_DIR here: each job's trainer gives its processes the run's cache (trainer/compile_cache.py,
    # <output>/_cache/jax), the mechanism a user gets; the calls before it set one for the session.
    rec = Recorder(env, time.monotonic() + max_s - WRAP_UP_S)
    record: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "task": task, "max_s": max_s, "jobs": {}}
    if (INPUTS / "COMMIT.json").exists():
        record.update(json.loads((INPUTS / "COMMIT.json").read_text()))
    began = time.monotonic()
    if not (work / "smollm2" / "config.json").exists():
        rec.run(sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(work / "smollm2"), timeout_s=600)
    server_env = dict(env, RLJOB_BOOTSTRAP_TOKEN=token, RLJOB_ENVIRONMENT="dev", RLJOB_LAUNCHER="local")
    with (work / "service.log").open("ab") as log:
        argv = [sys.executable, "-m", "service.cli.main", "serve", "--uds", str(socket), "--state-dir", str(work / "state")]
        server = subprocess.Popen(argv, cwd=REPO, env=server_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while not socket.exists() and server.poll() is None and time.monotonic() - began < 120:
            time.sleep(0.5)
        record["serve"] = {"argv": argv[2:], "socket_mode": oct(socket.stat().st_mode & 0o777) if socket.exists() else None}
        submitted: dict[str, str] = {}
        if earlier is not None:
            submitted, record["continues"] = earlier["jobs"], earlier["started"]
        for index, (arm, seed) in enumerate([] if follow else jobs):
            spec = job_spec(work, task, arm, seed, smoke=smoke, logits_dtype=logits_dtype)
            if "eval" in spec:
                spec["eval"]["base"] = base and index == 0  # the base model is evaluated once per call at most
            variant = f"/logits-{logits_dtype}" if logits_dtype else ""
            spec_path = work / f"spec-{arm}-s{seed}{variant.replace('/', '-')}.json"
            spec_path.write_text(json.dumps(spec, indent=2))
            job = _json(rec.rljob("submit", str(spec_path), "-o", "json"))
            if job is not None:
                submitted[f"{arm}/{seed}{variant}"] = job["id"]
        if not follow:
            submitted_file.write_text(json.dumps({"task": task, "started": record["started"], "jobs": submitted}))
        for index, (name, job_id) in enumerate(submitted.items()):
            record["jobs"][name] = _job_record(rec, job_id, first=index == 0)
        first = next(iter(record["jobs"].values()), None)
        # Each export against the call's base eval, rows paired (the registration's row-level report): only evals of
        # one service compare, so a call that is to report it evaluates the base again (--base).
        base_id = next((f["evals"]["base"]["id"] for f in record["jobs"].values() if f["evals"].get("base")), None)
        record["compares"] = {}
        for name, found in record["jobs"].items():
            export = found["evals"].get("export")
            if base_id and export and export.get("phase") == "SUCCEEDED":
                record["compares"][name] = _json(rec.rljob("eval-compare", export["id"], base_id, "-o", "json"))
        if base_id and first and first["evals"].get("export"):
            rec.rljob("eval-compare", first["evals"]["export"]["id"], base_id)  # the human view, once
        rec.rljob("usage", "--since", "2000-01-01")
        if first:
            export = str(work / "runs" / first["job_id"] / "hf")
            # The export loads and generates on the TPU host with its engine (no JAX_PLATFORMS: JAX takes the chip).
            # On the host's CPU, as the export stage checks it: an eval job may still hold the chip (libtpu lets one
            # process at a time open it; the first chip call's check failed on that lock).
            rec.env = dict(env, JAX_PLATFORMS="cpu")
            record["export_check"] = _json(
                rec.run(sys.executable, "-m", "trainer.checks.verify_export", "--engine", "jax", export, timeout_s=300)
            )
            rec.env = env
            repro = work / "runs" / first["job_id"] / "repro.json"
            record["versions"] = json.loads(repro.read_text()).get("versions") if repro.exists() else None
        # Read last, once every job has let go of the chip (one process at a time may hold it).
        probe = (
            "import json, os, jax; d = jax.devices()[0]; print(json.dumps({'platform': d.platform, 'device_kind': d.device_kind, "
            "'devices': jax.device_count(), 'tpu_accelerator_type': os.environ.get('TPU_ACCELERATOR_TYPE')}))"
        )
        unfinished = [name for name, found in record["jobs"].items() if (found.get("view") or {}).get("phase") not in TERMINAL]
        unfinished += [
            f"{name} eval {label}"
            for name, found in record["jobs"].items()
            for label, e in found["evals"].items()
            if (e or {}).get("phase") not in TERMINAL
        ]
        if unfinished:
            record["device"] = {"skipped": f"not read: {', '.join(unfinished)} had not ended when the time was up and may hold the chip"}
        else:
            record["device"] = _json(rec.run(sys.executable, "-c", probe, timeout_s=120))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        record["calls"] = rec.calls
        record["wall_s"] = round(time.monotonic() - began, 1)
        service_log = (work / "service.log").read_text(errors="replace")
        record["service_log_tail"], record["host_tpu"] = service_log[-TAIL:], host_line(service_log)
        out.mkdir(parents=True, exist_ok=True)
        record["compile_cache"] = keep_job_outputs(work, record, out)
        (out / RECORD).write_text(json.dumps(record, indent=2))
        print(f"wrote {out / RECORD} ({record['wall_s']} s)")


def keep_job_outputs(work: Path, record: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    """Copy each job's and eval job's trainer events into OUT/events/ (what bench/chip/tpu_compile_cache.py reads) and
    list the run's compilation cache: its entries with their size and time (JAX's `-atime` files are rewritten at each
    hit, so a later job's hits show there)."""
    events = out / "events"
    for found in record["jobs"].values():
        for job_id in [found["job_id"], *(e["id"] for e in found["evals"].values() if e)]:
            source = work / "runs" / job_id / "events.jsonl"
            if source.is_file() and not source.is_symlink():
                events.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, events / f"{job_id}.jsonl")
    cache = work / "runs" / "_cache" / "jax"
    entries = sorted(cache.iterdir()) if cache.is_dir() else []
    return [
        {"name": entry.name, "bytes": entry.stat().st_size, "mtime": datetime.fromtimestamp(entry.stat().st_mtime, UTC).isoformat()}
        for entry in entries
        if entry.is_file()
    ]


def _job_list(text: str) -> list[tuple[str, int]]:
    jobs = []
    for item in text.split(","):
        arm, _, seed = item.partition(":")
        if arm not in ARMS or not seed.isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: give ARM:SEED with ARM one of {', '.join(ARMS)}")
        jobs.append((arm, int(seed)))
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prepare_p = sub.add_parser("prepare")
    prepare_p.add_argument("--task", choices=TASKS, default="arith")
    run_p = sub.add_parser("run")
    run_p.add_argument("--task", choices=TASKS, default="arith")
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument("--jobs", type=_job_list, default=[("trained", 1)], help="ARM:SEED,... (arms: trained, control)")
    run_p.add_argument("--base", action="store_true", help="also evaluate the base model (the first job's attached base eval)")
    run_p.add_argument("--max-s", type=float, default=540, help=f"the call's whole wall time: the waits end {WRAP_UP_S} s before it")
    run_p.add_argument("--smoke", action="store_true", help="on this machine's CPU: two steps, a four-row suite")
    run_p.add_argument(
        "--continue", dest="follow", action="store_true", help="submit nothing: follow the jobs the last call left unfinished"
    )
    run_p.add_argument(
        "--logits-dtype",
        choices=("float32",),  # bfloat16 is the registered job itself
        default=None,
        help="the jobs with model.logits_dtype set, without eval jobs: the sampler-trainer agreement against the registered "
        "job of the same seed (not a registered run: keep its record apart from the task's call records)",
    )
    collect_p = sub.add_parser("collect")
    collect_p.add_argument("dir", type=Path)
    recollect_p = sub.add_parser("recollect", help="make the task's result again from its committed call records")
    recollect_p.add_argument("--task", choices=TASKS, default="arith")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.task)
    elif args.command == "run":
        if args.follow and args.base:
            parser.error("--continue follows the jobs an earlier call submitted; --base belongs to that call")
        if args.logits_dtype and args.base:
            parser.error("--logits-dtype jobs run without eval jobs; --base evaluates the base model as one of them")
        run(args.out, args.task, args.jobs, args.base, args.max_s, args.smoke, args.follow, args.logits_dtype)
    elif args.command == "recollect":
        print(f"wrote {recollect(args.task)}")
    else:
        collect(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
