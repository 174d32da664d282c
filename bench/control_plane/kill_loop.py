"""Service kill loop: SIGKILL the real service at random moments while its jobs run; count what is lost.

For each backend (local+SQLite, local+PostgreSQL, Kubernetes on kmock; see kill_loop_backends.py) the
real service runs as `rljob serve` in a subprocess. Each of `--iterations` lives: start it, act at random
(submit new jobs, half with an Idempotency-Key; resubmit keyed ones, above all those whose answer a kill
swallowed; cancel a few), and SIGKILL it at a random moment (some before it is ready, during recovery)
while trainers run. Trainers are the stand-in (harness/fake_trainer.py), each held at a gate the
bench opens a random time after submission, also while the service is down. After the last kill the
service is started once more, every gate opens, and the bench waits for every job to end.

Reported per backend (kill_loop_audit.py): jobs acknowledged (201/200), lost (acknowledged, then absent
or not terminal after recovery), duplicated (one key answered with two ids, one submission stored twice,
two trainers alive at once for one job, more trainer starts or Kubernetes Jobs than the service launched),
phase regressions a poller saw, event-log violations, and jobs that ended in the wrong phase.
Goal: 0 lost, 0 duplicated. Results go to bench/results/kill_loop.json (one entry per backend, each with the
machine's facts at its start (bench/result_meta.py); a run of some backends keeps the others' entries).

    .venv/bin/python bench/control_plane/kill_loop.py [--backend local-sqlite|local-postgres|k8s-kmock|all]
                                        [--iterations 20] [--seed N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.control_plane.kill_loop_audit import NONCE_LABEL, PhaseWatcher, Submission, TrainerSampler, audit  # noqa: E402
from bench.control_plane.kill_loop_backends import BACKENDS, Backend, live_trainers, open_backend  # noqa: E402
from bench.result_meta import machine_facts  # noqa: E402
from service.domain.records.phases import JobPhase  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kill_loop.json"
RLJOB = Path(sys.executable).parent / "rljob"
TEAM = "bench"
READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 180.0


class ServiceProcess:
    """`rljob serve` as a child in its own session; killed with SIGKILL to its pid only, so the
    trainers it started (their own sessions) keep running, as they would after a crash."""

    def __init__(self, backend: Backend, work: Path, port: int, token: str) -> None:
        self.work, self.port = work, port
        base = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
        self.env = {
            **base,
            **backend.env,
            "RLJOB_ENVIRONMENT": "dev",
            "RLJOB_STATE_DIR": str(work / "state"),
            "RLJOB_BOOTSTRAP_TOKEN": token,
            "RLJOB_BOOTSTRAP_TEAM": TEAM,
            "RLJOB_PROGRESS_POLL_INTERVAL_S": "0.2",
            "RLJOB_ACTIVE_JOBS_RECONCILE_INTERVAL_S": "2",
            "PYTHONUNBUFFERED": "1",
            # The code of the checkout this bench lives in, whatever the venv's editable install points at.
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives = 0
        self.killed = False  # by us: an exit the bench did not cause fails the run

    def start(self) -> None:
        self.lives += 1
        self.killed = False
        log = (self.work / f"service-{self.lives:02d}.log").open("wb")
        self.proc = subprocess.Popen(
            [str(RLJOB), "serve", "--port", str(self.port)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def check_alive(self) -> None:
        """A service that exits by itself (it cannot start) ends the bench with its log's tail."""
        if self.proc is not None and self.proc.poll() is not None and not self.killed:
            tail = (self.work / f"service-{self.lives:02d}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the service exited with code {self.proc.returncode} by itself:\n{tail}")

    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            self.killed = True
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KillLoop:
    def __init__(self, backend: Backend, work: Path, rng: random.Random, *, max_life_s: float) -> None:
        """max_life_s: the longest a ready service lives before its SIGKILL."""
        self.backend, self.work, self.rng, self.max_life_s = backend, work, rng, max_life_s
        token = "kill-loop-" + secrets.token_hex(20)
        self.service = ServiceProcess(backend, work, free_port(), token)
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.service.port}", timeout=15.0, headers={"Authorization": f"Bearer {token}"}
        )
        self.submissions: list[Submission] = []
        self.counts: dict[str, int] = {}
        self.watcher = PhaseWatcher(self.client, self.service.up)
        self.sampler = TrainerSampler(owned=lambda job_id: (Path(backend.runs_dir) / job_id).is_dir())

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # -- one life ------------------------------------------------------------------------------------

    def life(self) -> None:
        """Start, act, SIGKILL from a timer thread, so the kill can land in the middle of a request. One
        life in five is killed at a random moment of start-up (migrations, recovery); the others a
        random time after they became ready."""
        self.service.start()
        started = time.monotonic()
        killer: threading.Timer | None = None
        if self.rng.random() < 0.2:
            killer = threading.Timer(self.rng.uniform(0.3, 6.0), self.service.kill)
            killer.start()
        ready = False
        while self.service.up():
            self.open_due_gates()
            if not ready:
                self.service.check_alive()
                if time.monotonic() > started + READY_TIMEOUT_S:
                    raise RuntimeError(f"the service was not ready {READY_TIMEOUT_S:.0f}s after start: {self.readiness()}")
                ready = self.is_ready()
                if ready and killer is None:
                    killer = threading.Timer(self.rng.uniform(0.3, self.max_life_s), self.service.kill)
                    killer.start()
                time.sleep(0.1)
                continue
            self.act()
            time.sleep(self.rng.uniform(0.02, 0.3))
        assert killer is not None
        killer.join()
        self.count("kills_after_ready" if ready else "kills_before_ready")
        down_until = time.monotonic() + self.rng.uniform(0.0, 1.5)  # trainers run on, some gates open
        while time.monotonic() < down_until:
            self.open_due_gates()
            time.sleep(0.05)

    def is_ready(self) -> bool:
        try:
            return self.client.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def readiness(self) -> str:
        try:
            return self.client.get("/readyz").text
        except httpx.HTTPError as e:
            return repr(e)

    def act(self) -> None:
        roll = self.rng.random()
        keyed = [s for s in self.submissions if s.key is not None]
        if roll < 0.35 or not self.submissions:
            self.submit(self.new_submission())
        elif roll < 0.5 and keyed:
            unanswered = [s for s in keyed if not s.acked_ids]
            self.submit(self.rng.choice(unanswered or keyed), again=True)
        elif roll < 0.6:
            self.cancel(self.rng.choice(self.submissions))

    def new_submission(self) -> Submission:
        nonce = len(self.submissions)
        fail = self.rng.random() < 0.15
        labels = {"fake-gate": "true", "fake-steps": "2", NONCE_LABEL: str(nonce), **({"fake-exit": "65"} if fail else {})}
        body = {"name": f"kill-{nonce}", **self.backend.spec_base, "labels": labels}
        key = f"kill-loop-{nonce}-{secrets.token_hex(4)}" if self.rng.random() < 0.5 else None
        sub = Submission(nonce, key, body, JobPhase.FAILED if fail else JobPhase.SUCCEEDED, self.rng.uniform(0.5, 12.0))
        self.submissions.append(sub)
        return sub

    def submit(self, sub: Submission, *, again: bool = False) -> None:
        headers = {"Idempotency-Key": sub.key} if sub.key else {}
        self.count("resubmits" if again else "submits")
        try:
            response = self.client.post("/v1/jobs", json=sub.body, headers=headers)
        except httpx.HTTPError:
            self.count("submits_cut_by_kill")
            return
        self.count(f"submit_http_{response.status_code}")
        if response.status_code in (200, 201):
            sub.acked_ids.append(response.json()["id"])
            sub.acked_at = sub.acked_at or time.monotonic()

    def cancel(self, sub: Submission) -> None:
        if not sub.acked_ids or sub.cancel_acked:
            return
        try:
            response = self.client.post(f"/v1/jobs/{sub.acked_ids[0]}/cancel")
        except httpx.HTTPError:
            self.count("cancels_cut_by_kill")
            sub.cancel_unanswered = True  # did it land? the audit accepts CANCELLED as well
            return
        self.count(f"cancel_http_{response.status_code}")
        if response.status_code != 200:
            return
        phase = JobPhase(response.json()["phase"])
        if phase in (JobPhase.CANCELLING, JobPhase.CANCELLED):
            sub.cancel_acked, sub.expected = True, JobPhase.CANCELLED
        else:  # it ended between the service's read and its write: 200, and the cancel did nothing
            self.count(f"cancel_http_200_but_{phase.value.lower()}")

    def open_due_gates(self, *, all_now: bool = False) -> None:
        now = time.monotonic()
        for sub in self.submissions:
            if sub.gate_opened or sub.acked_at is None or (not all_now and now < sub.acked_at + sub.gate_after_s):
                continue
            for job_id in set(sub.acked_ids):
                self.open_gate(job_id)
            sub.gate_opened = True

    def open_gate(self, job_id: str) -> None:
        run_dir = Path(self.backend.runs_dir) / job_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "gate").touch()

    # -- the end -------------------------------------------------------------------------------------

    def drain(self) -> dict[str, Any]:
        """Start once more, resolve unanswered keys, open every gate, wait for every job to end."""
        self.service.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.is_ready():
            self.service.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the service was not ready {READY_TIMEOUT_S:.0f}s after the last start: {self.readiness()}")
            time.sleep(0.2)
        for sub in self.submissions:
            if sub.key is not None and not sub.acked_ids:
                self.submit(sub, again=True)
        self.open_due_gates(all_now=True)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        waited_s = 0.0
        while time.monotonic() < deadline:
            jobs = self.list_jobs()
            for job in jobs:  # created by a submission whose answer a kill swallowed: its gate too
                self.open_gate(job["id"])
            if all(JobPhase(j["phase"]).is_terminal() for j in jobs):
                break
            time.sleep(0.5)
            waited_s += 0.5
        time.sleep(1.0)  # a last poll sees the final phases
        self.service.stop()
        return {"drain_wait_s": waited_s}

    def list_jobs(self) -> list[dict[str, Any]]:
        jobs, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = self.client.get("/v1/jobs", params=params).json()
            jobs += page["data"]
            cursor = page["next_cursor"]
            if not cursor:
                return jobs


def run_backend(name: str, iterations: int, seed: int, keep: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"rljob-kill-{name}-"))
    rng = random.Random(seed)
    started = time.monotonic()
    try:
        with open_backend(name, work) as backend:
            # The Kubernetes service starts slower (the client, watches): a longer life evens out the jobs per backend.
            loop = KillLoop(backend, work, rng, max_life_s=9.0 if name == "k8s-kmock" else 6.0)
            loop.watcher.start()
            loop.sampler.start()
            try:
                for i in range(iterations):
                    loop.life()
                    print(f"  {name}: life {i + 1}/{iterations}, {len(loop.submissions)} submissions", flush=True)
                drained = loop.drain()
            finally:
                loop.watcher.stop()
                loop.sampler.stop()
                loop.service.kill()
                if sys.exc_info()[0] is not None:  # interrupted: leave no trainer of ours behind
                    stop_leftover_trainers({j for j in live_trainers() if (Path(backend.runs_dir) / j).is_dir()})
            result = audit(backend, loop.submissions, loop.watcher, loop.sampler)
            stop_leftover_trainers(set(result["trainers_left_running"]))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    acked = result["submitted_acknowledged"]
    return {
        "backend": name,
        "iterations": iterations,
        "seed": seed,
        "wall_s": round(time.monotonic() - started, 1),
        "work_dir": str(work) if keep else None,
        **loop.counts,
        **drained,
        "submissions": len(loop.submissions),
        "keyed_submissions": sum(1 for s in loop.submissions if s.key),
        "cancels_acknowledged": sum(1 for s in loop.submissions if s.cancel_acked),
        "lost_count": len(result["lost"]),
        "lost_ratio": round(len(result["lost"]) / acked, 4) if acked else None,
        "duplicated_ratio": round(result["duplicated_submissions"] / acked, 4) if acked else None,
        **result,
    }


def stop_leftover_trainers(job_ids: set[str]) -> None:
    """Trainers of this run's jobs still alive after the audit (reported there) are ours to stop."""
    for job_id, pids in live_trainers().items():
        for pid in pids if job_id in job_ids else []:
            os.kill(pid, signal.SIGKILL)


def summary_line(entry: dict[str, Any]) -> str:
    ok = (
        entry["lost_count"] == 0
        and entry["duplicated_submissions"] == 0
        and not any(
            entry[k]
            for k in (
                "phase_regressions_seen_by_poller",
                "event_log_violations",
                "wrong_final_phase",
                "trainers_left_running",
                "cluster_failure",
            )
        )
    )
    return (
        f"{entry['backend']}: {entry.get('kills_after_ready', 0)} kills when ready + {entry.get('kills_before_ready', 0)} "
        "during start-up, "
        f"{entry['submitted_acknowledged']} jobs acknowledged, {entry['lost_count']} lost ({entry['lost_ratio']}), "
        f"{entry['duplicated_submissions']} duplicated ({entry['duplicated_ratio']}), "
        f"{len(entry['phase_regressions_seen_by_poller'])} phase regressions, "
        f"{len(entry['event_log_violations'])} event-log violations, {len(entry['wrong_final_phase'])} wrong final phases, "
        f"{entry['resumed_jobs']} resumed, {entry['wall_s']}s -> {'OK' if ok else 'FAIL'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument("--iterations", type=int, default=20, help="service lives, each ended by SIGKILL")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directories (service logs, runs)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULTS.relative_to(REPO)}")
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error("--iterations must be at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    names = list(BACKENDS) if args.backend == "all" else [args.backend]
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    failed = False
    for name in names:
        print(f"{name}: {args.iterations} lives, seed {seed}", flush=True)
        machine = machine_facts()
        entry = run_backend(name, args.iterations, seed, args.keep)
        entry["machine"] = machine | {"load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
        print(summary_line(entry), flush=True)
        for key in ("lost", "duplicated", "phase_regressions_seen_by_poller", "event_log_violations", "wrong_final_phase"):
            if entry[key] and (key != "duplicated" or entry["duplicated_submissions"]):
                print(f"  {key}: {json.dumps(entry[key], indent=1)[:3000]}", flush=True)
        failed |= "FAIL" in summary_line(entry)
        results[name] = entry
        if not args.no_write:
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
