"""What the service costs when nobody asks it anything: process CPU at rest, against the framework's.

Each server is started the way the image starts the service (`uvicorn ... --factory --workers 1`,
bench/control_plane/control_plane.py's `running`), left alone until it settles, then its CPU is read over
`--idle-s` seconds (psutil: user + system of the server process, so children are not counted; the
default 30 s holds one of the service's slow reconciles, RLJOB_ACTIVE_JOBS_RECONCILE_INTERVAL_S):
- minimal: control_plane.py's minimal app (the framework and a bearer check; the ceiling);
- rljob, 0 jobs: the real service, local launcher, empty database;
- rljob, 200 queued: the local launcher with room for one job, so one trainer (a process that only
  sleeps) runs and 199 wait in the launcher's queue;
- rljob, 200 running: a launcher that reports every job RUNNING at once and never ends it (no
  processes: their cost is the launcher's, not the service's), each job with an events file whose
  train step has been folded in and which then stays unchanged (trainers that write nothing new).
Each rljob row is also given as a ratio to the minimal app's CPU in the same run.

    python bench/control_plane/idle_cpu.py [--idle-s 30] [--jobs 200] [--json PATH]

writes bench/results/idle_cpu.json with the machine's facts (--no-write: not). bench/results/idle_cpu-4d5c520.json
is an earlier run's, before (4d5c520) and after (49293ed) the progress path work, recorded without them.

Numbers depend on what else runs on the machine: compare rows of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.control_plane.app_server import uvicorn_app  # noqa: E402
from bench.control_plane.control_plane import TOKEN, idle_cpu_percent, settle  # noqa: E402
from bench.result_meta import machine_facts, write_result  # noqa: E402
from service.domain.records.ports import LaunchResult, Observation, ObservationSink, ObservedState  # noqa: E402
from trainer.contract import JobSpec, RunLayout, RunStarted, StageStarted, TrainerEvent, TrainStep, dump_event  # noqa: E402
from trainer.contract.run.events import Stage  # noqa: E402

SLEEPING_TRAINER = [sys.executable, "-c", "import time; time.sleep(3600)"]


class AlwaysRunningLauncher:
    """The bench's launcher: every launched job is RUNNING at once and stays so; nothing is started."""

    backend = "bench"

    def __init__(self) -> None:
        self._sink: ObservationSink | None = None

    def start(self, sink: ObservationSink) -> None:
        self._sink = sink

    def stop(self) -> None:
        self._sink = None

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        if self._sink is not None:
            self._sink(self.observe(job_id))
        return LaunchResult(backend=self.backend, object_name=f"bench/{job_id}")

    def cancel(self, job_id: str) -> None:
        if self._sink is not None:
            self._sink(Observation(job_id, ObservedState.GONE, message="cancelled", object_name=f"bench/{job_id}"))

    def observe(self, job_id: str) -> Observation:
        return Observation(job_id, ObservedState.RUNNING, message="running (bench)", object_name=f"bench/{job_id}")

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        return iter(())


def create_running_jobs_app() -> Any:
    """`uvicorn bench.control_plane.idle_cpu:create_running_jobs_app --factory`: the real service with the bench launcher."""
    from service.app import create_app
    from service.config import Settings

    return create_app(Settings(), launcher=AlwaysRunningLauncher())


def spec(output: Path, i: int) -> dict[str, Any]:
    return {
        "name": f"idle-{i}",
        "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": str(output),
    }


def submit(port: int, output: Path, jobs: int) -> list[str]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:
        return [client.post("/v1/jobs", json=spec(output, i)).raise_for_status().json()["id"] for i in range(jobs)]


def phases(port: int) -> dict[str, int]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    counts: dict[str, int] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/jobs", params=params).raise_for_status().json()
            for job in page["data"]:
                key = job["phase"] + (f"@step{job['step']}" if job.get("step") is not None else "")
                counts[key] = counts.get(key, 0) + 1
            cursor = page["next_cursor"]
            if cursor is None:
                return counts


def wait_for(port: int, want: dict[str, int], timeout_s: float = 120) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while (seen := phases(port)) != want:
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs did not reach {want} within {timeout_s} s: {seen}")
        time.sleep(0.5)
    return seen


def write_events(output: Path, job_id: str) -> None:
    """A trainer that started training, reported one step, and then wrote nothing more."""
    layout = RunLayout(str(output), job_id)
    path = Path(layout.events)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    events: list[TrainerEvent] = [
        RunStarted(seq=0, time=now, job_id=job_id, attempt=1, run_uri=str(path.parent)),
        StageStarted(seq=1, time=now, job_id=job_id, stage=Stage.TRAIN),
        TrainStep(seq=2, time=now, job_id=job_id, step=1, total_steps=1000, loss=0.5, kl=0.01, metrics={"reward_mean": 0.3}),
    ]
    path.write_text("".join(dump_event(e) + "\n" for e in events))


def kill_local_trainers(state_dir: Path) -> None:
    """The local launcher leaves trainers running when the service stops (a restart re-attaches them)."""
    for process_file in state_dir.glob("local-jobs/*/process.json"):
        try:
            os.killpg(int(json.loads(process_file.read_text())["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def measure_idle(pid: int, seconds: float) -> float:
    settle(pid)
    return round(idle_cpu_percent(pid, seconds), 2)


def run(args: argparse.Namespace) -> dict[str, float]:
    rows: dict[str, float] = {}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    base_env["BENCH_ACCESS_LOG"] = "0"
    with tempfile.TemporaryDirectory(prefix="rljob-bench-idle-") as tmp:
        work = Path(tmp)
        (work / "jobs.json").write_text("[]")
        env = {**base_env, "BENCH_JOBS_FILE": str(work / "jobs.json"), "BENCH_TOKEN": TOKEN}
        with uvicorn_app("bench.control_plane.control_plane:create_minimal_app", env, work, "minimal", app_dir=REPO) as (pid, _):
            rows["minimal app"] = measure_idle(pid, args.idle_s)

        def rljob_env(name: str, **extra: str) -> dict[str, str]:
            return {
                **base_env,
                "PYTHONPATH": str(REPO),
                "RLJOB_ENVIRONMENT": "dev",
                "RLJOB_LAUNCHER": "local",
                "RLJOB_STATE_DIR": str(work / name),
                "RLJOB_BOOTSTRAP_TOKEN": TOKEN,
                "RLJOB_BOOTSTRAP_TEAM": "bench",
                **extra,
            }

        with uvicorn_app("service.app:create_app_from_env", rljob_env("empty"), work, "rljob-empty") as (pid, _):
            rows["rljob, 0 jobs"] = measure_idle(pid, args.idle_s)

        queued_env = rljob_env("queued", RLJOB_MAX_CONCURRENT_JOBS="1", RLJOB_TRAINER_COMMAND=json.dumps(SLEEPING_TRAINER))
        try:
            with uvicorn_app("service.app:create_app_from_env", queued_env, work, "rljob-queued") as (pid, port):
                submit(port, work / "runs-queued", args.jobs)
                wait_for(port, {"RUNNING": 1, "QUEUED": args.jobs - 1})
                rows[f"rljob, {args.jobs} queued (1 running)"] = measure_idle(pid, args.idle_s)
        finally:
            kill_local_trainers(work / "queued")

        running_env = rljob_env("running")
        app = "bench.control_plane.idle_cpu:create_running_jobs_app"
        with uvicorn_app(app, running_env, work, "rljob-running", app_dir=REPO) as (pid, port):
            ids = submit(port, work / "runs-running", args.jobs)
            for job_id in ids:
                write_events(work / "runs-running", job_id)
            wait_for(port, {"RUNNING@step1": args.jobs})
            rows[f"rljob, {args.jobs} running"] = measure_idle(pid, args.idle_s)
    return rows


def print_report(rows: dict[str, float], idle_s: float) -> None:
    base = rows["minimal app"]
    print(f"idle CPU over {idle_s} s, % of one core (psutil, server process only)")
    print("| server | idle CPU % | x minimal app |")
    print("|---|---|---|")
    for name, cpu in rows.items():
        ratio = f"{cpu / base:.1f}x" if base else "-"
        print(f"| {name} | {cpu} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle-s", type=float, default=30.0, help="how long each server's idle CPU is read (30 s: one reconcile)")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/idle_cpu.json")
    args = parser.parse_args()
    machine = machine_facts()
    rows = run(args)
    print_report(rows, args.idle_s)
    report = {"idle_s": args.idle_s, "jobs": args.jobs, "idle_cpu_percent": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if not args.no_write:
        write_result("idle_cpu.json", report, machine)


if __name__ == "__main__":
    main()
