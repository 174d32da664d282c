"""LocalProcessLauncher: one `trainer run` child process per job on this machine.

Per job, under <state_dir>/<job_id>/: spec.json (what the trainer runs), process.json (pid and
start time, for re-attach after a service restart), exit.json (written by job_runner.py when the
trainer exits) and output.log (stdout and stderr, appended across attempts; the runner caps each line and the
job's total, job_runner.OutputCap).

Each job runs in its own session, so its process group holds the runner, the trainer and anything
they start; a cancel signals the group (SIGTERM, then SIGKILL after a grace period) and the job is
reported stopped only when no process of the group is left. At most `max_concurrent` jobs run, and
each team within its quota (admission.py); the rest wait in their team's queue, reported as QUEUED
with the reason and their place in line, and again whenever either changes. The launcher only
observes: it pushes Observations into the sink and the job service decides the phases.

A TPU job is refused at submit unless this process can run that TPU slice (host_tpu.py): the trainer
runs here, so a v6e-8 job is right on a v6e-8 VM and would only fail after launch anywhere else. TPU
jobs run one at a time, a cpu job beside them: libtpu lets one process hold a chip, so admission
counts the machine's chips too (HostChips).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from service.background_loop import BackgroundLoop
from service.domain.records.errors import InvalidRequest, LaunchFailed
from service.domain.records.ports import LaunchResult, Observation, ObservationSink, ObservedState
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import tpu_slice
from trainer.contract.spec.base import STORED_SPEC_CONTEXT

from . import job_runner, procs
from .admission import NO_TEAM, JobClaim, TeamQuotas, admit, chips_of, never_fits
from .capacity import local_capacity, local_capacity_problem
from .child_env import trainer_env
from .host_tpu import HostTpu, HostTpuOnce, host_accelerator_problem, probe_host_tpu
from .local_job import LocalJob, observation, read_json
from .local_launch_lock import job_dir_lock
from .output_log import output_lines

log = logging.getLogger(__name__)

RUNNER_PATH = str(Path(job_runner.__file__).resolve())
RUNNER_MARKER = "job_runner.py"


class LocalProcessLauncher:
    backend = "local"

    def __init__(
        self,
        state_dir: Path,
        trainer_command: Sequence[str],
        *,
        max_concurrent: int = 2,
        poll_interval_s: float = 0.2,
        cancel_grace_s: float = 10.0,
        env: dict[str, str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        probe_tpu: Callable[[], HostTpu] = probe_host_tpu,
        quotas: TeamQuotas | None = None,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.state_dir = Path(state_dir)
        self.trainer_command = list(trainer_command)
        self.max_concurrent = max_concurrent
        self.quotas = quotas or TeamQuotas()
        self.poll_interval_s = poll_interval_s
        self.cancel_grace_s = cancel_grace_s
        self._env = env
        self._monotonic = monotonic
        self._host = HostTpuOnce(probe_tpu)
        self._jobs: dict[str, LocalJob] = {}
        self._next_seq = 0  # submission order of the jobs handed to this launcher
        self._lock = threading.RLock()
        self._sink: ObservationSink | None = None
        self._monitor: BackgroundLoop | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, sink: ObservationSink) -> None:
        self._sink = sink
        log.info("local launcher: this machine's TPU: %s", self._host.get().summary())
        self._adopt_all()
        # The monitor must outlive any one bad job: a failed poll is logged and the next one runs.
        # poll_once is looked up each round (as a plain loop would), so a wrapped one is what runs.
        self._monitor = BackgroundLoop("local-launcher", lambda: self.poll_once(), interval_s=self.poll_interval_s, what="poll")
        self._monitor.start()

    def stop(self) -> None:
        """Stop watching. Running trainers keep running; the next service start re-attaches them."""
        if self._monitor is not None:
            self._monitor.stop(timeout_s=10)
            self._monitor = None

    # ---- the port ----------------------------------------------------------------------------

    def check_submittable(self, spec: JobSpec) -> None:
        """Refuse, before anything is stored, a job whose accelerator this machine does not have."""
        problem = self._hardware_problem(spec) or self._quota_problem(spec)
        if problem:
            raise InvalidRequest(("body", "hardware", "accelerator"), problem)
        problem = local_capacity_problem(spec)
        if problem:
            raise InvalidRequest(("body", "hardware", "capacity"), problem)

    def queue_position_for(self, spec: JobSpec) -> int | None:
        """QueuePreview: where a job of `spec` handed over now would stand among its team's waiting jobs."""
        new = JobClaim("", spec.team or NO_TEAM, chips_of(spec.hardware.accelerator), spec.priority, seq=self._next_seq + 1)
        host_chips = self._host.get().job_chips  # before the jobs lock: a first probe may wait on the metadata server
        with self._lock:
            waiting = [j.claim for j in self._jobs.values() if j.state == "queued"] + [new]
            running = [j.claim for j in self._jobs.values() if j.state == "running"]
        answer = next(a for a in admit(waiting, running, self.quotas, self.max_concurrent, host_chips) if a.job_id == "")
        return 0 if answer.queue is None else answer.queue.position

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        # A job stored before these checks, on other hardware, or before the team's quota shrank.
        problem = self._hardware_problem(spec) or self._quota_problem(spec)
        if problem:
            raise LaunchFailed(problem)
        out: list[Observation] = []
        with self._lock:
            job = self._jobs.get(job_id) or self._adopt(job_id)
            if job is None or job.state in ("exited", "removed"):
                job = self._enqueue(job_id, spec)
            self._start_admitted(out)
            if job.spawn_error:
                del self._jobs[job_id]
                raise LaunchFailed(job.spawn_error)
            if job.state == "queued" and not any(o.job_id == job_id for o in out):
                out.append(observation(job))  # a repeated launch: the job service may not know it waits
            result = LaunchResult(backend=self.backend, object_name=job.object_name or "queued")
        self._emit(out)
        return result

    def cancel(self, job_id: str) -> None:
        out: list[Observation] = []
        with self._lock:
            job = self._jobs.get(job_id) or self._adopt(job_id)
            if job is None:
                return
            if job.state == "queued":
                job.state = "removed"
                out.append(observation(job))
                self._start_admitted(out)  # the jobs behind it move up
            elif job.state == "running" and job.kill_at is None:
                log.info("cancelling %s: SIGTERM to process group %s", job_id, job.pid)
                procs.signal_group(job.pid, signal.SIGTERM)  # type: ignore[arg-type]
                job.kill_at = self._monotonic() + self.cancel_grace_s
        self._emit(out)

    def observe(self, job_id: str) -> Observation:
        with self._lock:
            job = self._jobs.get(job_id) or self._adopt(job_id)
            if job is None:
                job = self._finished_while_away(job_id)
            if job is None:
                record = read_json(self._dir(job_id) / "process.json")
                if record:  # it was started here, and is gone without an exit record
                    message = (
                        f"the trainer process (pid {record['pid']}) ended without recording an exit code (killed, or the machine restarted)"
                    )
                else:
                    message = "no trainer process for this job on this machine"
                name = f"pid:{record['pid']}" if record else None  # names the attempt: a relaunch replaces it
                return Observation(job_id, ObservedState.GONE, message=message, object_name=name)
            return observation(job)

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        path = self._dir(job_id) / "output.log"
        return output_lines(path, lambda: self._is_active(job_id), self._monotonic, follow=follow, tail_lines=tail_lines)

    # ---- internals ---------------------------------------------------------------------------

    def _hardware_problem(self, spec: JobSpec) -> str | None:
        if tpu_slice(spec.hardware.accelerator) is None:
            return None  # cpu: any machine
        return host_accelerator_problem(spec.hardware.accelerator, self._host.get())

    def _quota_problem(self, spec: JobSpec) -> str | None:
        return never_fits(spec.team or NO_TEAM, chips_of(spec.hardware.accelerator), self.quotas)

    def _claim(self, job_id: str, spec: JobSpec | None) -> JobClaim:
        self._next_seq += 1
        if spec is None:  # a runner whose spec.json cannot be read: it still takes a slot
            return JobClaim(job_id, NO_TEAM, 0, seq=self._next_seq)
        chips = chips_of(spec.hardware.accelerator)
        return JobClaim(job_id, spec.team or NO_TEAM, chips, spec.priority, seq=self._next_seq)

    def _dir(self, job_id: str) -> Path:
        return self.state_dir / job_id

    def _is_active(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            return job is not None and job.state in ("queued", "running")

    def _enqueue(self, job_id: str, spec: JobSpec) -> LocalJob:
        job_dir = self._dir(job_id)
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the job's spec, log and lock: its user's alone
        (job_dir / "spec.json").write_text(spec.model_dump_json(indent=2))
        job = LocalJob(job_id=job_id, dir=job_dir, claim=self._claim(job_id, spec), capacity=local_capacity(spec))
        self._jobs[job_id] = job
        return job

    def _start_admitted(self, out: list[Observation]) -> None:
        """Start what admission lets start; report each waiting job whose place or reason changed."""
        waiting = [j.claim for j in self._jobs.values() if j.state == "queued"]
        running = [j.claim for j in self._jobs.values() if j.state == "running"]
        # A started launcher has probed (start() does), so this does not wait on the metadata server under the jobs lock.
        for answer in admit(waiting, running, self.quotas, self.max_concurrent, self._host.get().job_chips):
            job = self._jobs[answer.job_id]
            if answer.queue is None:
                self._spawn(job)
                out.append(observation(job))
            elif answer.queue != job.queue:
                job.queue = answer.queue
                out.append(observation(job))

    def _spawn(self, job: LocalJob) -> None:
        """Start the job's runner, unless one is alive already: another service process on this state
        directory (a second replica, a leader that has not noticed it was replaced) may have started it
        since this one queued the job. The job directory's lock makes check-and-start one step, so a
        job id gets one runner however many launchers are asked (local_launch_lock.py)."""
        with job_dir_lock(job.dir):
            running = self._adopt(job.job_id)
            if running is not None:  # the queued job becomes the one already running
                job.state, job.pid, job.message = "running", running.pid, running.message
                self._jobs[job.job_id] = job
                return
            for stale in ("exit.json", "exit.json.reserved", "process.json"):  # from an earlier attempt: must not describe this one
                (job.dir / stale).unlink(missing_ok=True)
            self._start_runner(job)

    def _start_runner(self, job: LocalJob) -> None:
        command = [
            sys.executable,
            RUNNER_PATH,
            "--job-id",
            job.job_id,
            "--exit-file",
            str(job.dir / "exit.json"),
            "--",
            *self.trainer_command,
            "run",
            "--spec",
            str(job.dir / "spec.json"),
            "--job-id",
            job.job_id,
        ]
        env = trainer_env(os.environ if self._env is None else self._env, job.job_id)
        with (job.dir / "output.log").open("ab") as logf:
            logf.write(f"=== rljob: starting {' '.join(self.trainer_command)} at {time.ctime()} ===\n".encode())
            logf.flush()
            try:
                popen = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    cwd=job.dir,
                    env=env,
                    start_new_session=True,
                )
            except OSError as e:
                job.state, job.exit_code = "exited", 127
                job.spawn_error = job.message = f"cannot start the runner {sys.executable}: {e}"
                logf.write(f"rljob: {job.spawn_error}\n".encode())
                return
        job.popen, job.pid, job.state = popen, popen.pid, "running"
        job.message = f"running as process group {popen.pid}"
        ticks = procs.start_ticks(popen.pid)
        # Recorded only once it reads as ours: the job directory's lock is what keeps a second runner out.
        if not procs.wait_until_ours(popen.pid, marker=RUNNER_MARKER, job_id=job.job_id, ticks=ticks):
            log.warning("runner %s of %s does not read as ours (or died at once): recording it anyway", popen.pid, job.job_id)
        record = {"pid": popen.pid, "ticks": ticks, "job_id": job.job_id}
        tmp = job.dir / "process.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(job.dir / "process.json")
        # Only a recorded runner may start the trainer: if this service dies before the line below, the
        # runner reads EOF and exits, rather than run a trainer beside the one the next start relaunches.
        try:
            popen.stdin.write(job_runner.START_LINE)  # type: ignore[union-attr]
            popen.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass  # the runner is already gone: the monitor sees its exit

    def _adopt(self, job_id: str) -> LocalJob | None:
        """Re-attach to a runner started by an earlier service process, if it is really ours."""
        record = read_json(self._dir(job_id) / "process.json")
        if not record:
            return None
        pid, ticks = int(record["pid"]), record.get("ticks")
        if not procs.is_our_process(pid, marker=RUNNER_MARKER, job_id=job_id, ticks=ticks):
            return None
        spec = self._read_spec(job_id)
        claim = self._claim(job_id, spec)
        job = LocalJob(job_id=job_id, dir=self._dir(job_id), claim=claim, state="running", pid=pid)
        job.capacity = local_capacity(spec) if spec is not None else None
        job.message = f"re-attached to process group {pid}"
        self._jobs[job_id] = job
        log.info("re-attached %s to pid %s", job_id, pid)
        return job

    def _adopt_all(self) -> None:
        """Re-attach every runner still alive from an earlier service process, before anything is
        admitted: a job relaunched after a restart must see what already holds the team's quota."""
        with self._lock:
            for process_file in sorted(self.state_dir.glob("*/process.json")):
                job_id = process_file.parent.name
                if job_id not in self._jobs:
                    self._adopt(job_id)

    def _read_spec(self, job_id: str) -> JobSpec | None:
        try:
            return JobSpec.model_validate_json((self._dir(job_id) / "spec.json").read_text(), context=STORED_SPEC_CONTEXT)
        except (OSError, ValueError):
            return None

    def _finished_while_away(self, job_id: str) -> LocalJob | None:
        """The runner exited while no service watched it: its exit file says how."""
        if not (self._dir(job_id) / "process.json").exists():
            return None
        exit_record = read_json(self._dir(job_id) / "exit.json")
        if not exit_record:
            return None
        code = int(exit_record["exit_code"])
        job = LocalJob(job_id, self._dir(job_id), claim=JobClaim(job_id, NO_TEAM, 0), state="exited", exit_code=code)
        self._jobs[job_id] = job
        return job

    def poll_once(self) -> None:
        """Check every running job once: collect exits, escalate cancels, start queued jobs if one
        ended (launch() and cancel() admit on their own, so a long queue costs nothing otherwise)."""
        out: list[Observation] = []
        with self._lock:
            for job in [j for j in self._jobs.values() if j.state == "running"]:
                if self._check(job):
                    out.append(observation(job))
            if out:
                self._start_admitted(out)
        self._emit(out)

    def _check(self, job: LocalJob) -> bool:
        """Advance one running job; True when it has fully stopped."""
        if job.pid is None:
            return False
        if job.kill_at is not None and self._monotonic() >= job.kill_at:
            procs.signal_group(job.pid, signal.SIGKILL)
        if not job.leader_exited:
            if job.popen is not None:
                returncode = job.popen.poll()
                if returncode is None:
                    return False
                job.exit_code = returncode if returncode >= 0 else 128 - returncode
            elif procs.is_our_process(job.pid, marker=RUNNER_MARKER, job_id=job.job_id, ticks=None):
                return False
            recorded = read_json(job.dir / "exit.json")
            if recorded:  # the trainer's own code, as the runner saw it
                job.exit_code = int(recorded["exit_code"])
                job.output_dropped_bytes = int(recorded.get("output_dropped_bytes") or 0)
            elif job.popen is None:
                job.exit_code = None  # re-attached and no record: we cannot know how it ended
            job.leader_exited = True
        leftovers = procs.group_members(job.pid)
        if leftovers:
            # The runner is gone but something it started lives on: it must not outlive the job.
            procs.signal_group(job.pid, signal.SIGKILL)
            return False
        job.state = "exited"
        job.message = f"process group {job.pid} exited with code {job.exit_code}"
        if job.output_dropped_bytes:  # the log's own marker line is where the cut is; this says how much
            job.message += f"; {job.output_dropped_bytes:,} bytes of its output were left out of output.log (over its limits)"
        return True

    def _emit(self, observations: list[Observation]) -> None:
        if self._sink is None:
            return
        for obs in observations:
            self._sink(obs)
