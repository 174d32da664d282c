"""What bench/control_plane/kill_loop.py records while it kills the service, and the audit after the last restart.

The driver records every submission (acknowledged ids per idempotency key), every acknowledged cancel,
and two watchers run beside it: `PhaseWatcher` lists the jobs through the API while the service is up
and flags any phase change no chain of legal transitions explains (a terminal phase left, above all);
`TrainerSampler` counts live stand-in trainer processes per job id from /proc.

`audit()` then reads the store itself (every job, every job's phase event log) and the run directories,
and says which acknowledged jobs were lost and which were duplicated, and how.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.control_plane.kill_loop_backends import Backend, live_trainers
from service.adapters.store import SqlJobStore
from service.domain.records.models import JobFilters, JobRecord
from service.domain.records.phases import JobPhase, can_reach, can_transition

NONCE_LABEL = "kill-loop-nonce"


@dataclass
class Submission:
    nonce: int
    key: str | None  # Idempotency-Key, if the submission carries one
    body: dict[str, Any]
    expected: JobPhase  # SUCCEEDED, or FAILED for a trainer told to fail; CANCELLED once a cancel is acknowledged
    gate_after_s: float  # the trainer's gate opens this long after the first acknowledgement
    acked_ids: list[str] = field(default_factory=list)  # ids from every 201/200, in order
    acked_at: float | None = None
    gate_opened: bool = False
    cancel_acked: bool = False
    cancel_unanswered: bool = False  # a cancel whose answer a kill swallowed: it may or may not have landed


class PhaseWatcher:
    """Polls GET /v1/jobs while the service is up; keeps every job's observed phase sequence."""

    def __init__(self, client: httpx.Client, is_up: Callable[[], bool], interval_s: float = 0.3) -> None:
        self.client, self.is_up, self.interval_s = client, is_up, interval_s
        self.last: dict[str, JobPhase] = {}
        self.regressions: list[str] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="phase-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.is_up():
                try:
                    self.poll_once()
                except (httpx.HTTPError, ValueError, KeyError):
                    pass  # killed mid-poll, or not ready: the next poll sees the next life

    def poll_once(self) -> None:
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            response = self.client.get("/v1/jobs", params=params)
            if response.status_code != 200:
                return
            page = response.json()
            for job in page["data"]:
                self.see(job["id"], JobPhase(job["phase"]))
            cursor = page["next_cursor"]
            if not cursor:
                break
        self.polls += 1

    def see(self, job_id: str, phase: JobPhase) -> None:
        before = self.last.get(job_id)
        self.last[job_id] = phase
        if before is None or before is phase:
            return
        if before.is_terminal():
            self.regressions.append(f"{job_id}: left terminal {before} for {phase}")
        elif not can_reach(before, phase):
            self.regressions.append(f"{job_id}: illegal {before} -> {phase}")


class TrainerSampler:
    """Samples live stand-in trainers per job id; two at once for one job is a duplicate launch."""

    def __init__(self, owned: Callable[[str], bool], interval_s: float = 0.25) -> None:
        """owned: whether a job id is this run's (other stand-in trainers may run on the machine)."""
        self.owned, self.interval_s = owned, interval_s
        self.max_per_job: dict[str, int] = {}
        self.max_total = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainer-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            live = {job_id: pids for job_id, pids in live_trainers().items() if self.owned(job_id)}
            self.samples += 1
            self.max_total = max(self.max_total, sum(len(p) for p in live.values()))
            for job_id, pids in live.items():
                self.max_per_job[job_id] = max(self.max_per_job.get(job_id, 0), len(pids))


def all_jobs(store: SqlJobStore) -> list[JobRecord]:
    out, before = [], None
    while True:
        page = store.list_jobs(JobFilters(), before_pk=before, limit=500)
        out += [record for _, record in page]
        if len(page) < 500:
            return out
        before = page[-1][0]


def event_log_violations(store: SqlJobStore, job_id: str) -> list[str]:
    """The job's phase events must be one legal chain from QUEUED with exactly one terminal phase, last."""
    phases = [JobPhase(e.data["phase"]) for e in store.events_after(0, job_id=job_id, limit=100_000) if e.kind == "phase"]
    problems = []
    if not phases or phases[0] is not JobPhase.QUEUED:
        problems.append(f"{job_id}: event log starts {phases[:1]}, not QUEUED")
    for before, after in itertools.pairwise(phases):
        if not can_transition(before, after):
            problems.append(f"{job_id}: event log has illegal {before} -> {after}")
    terminal = [p for p in phases if p.is_terminal()]
    if len(terminal) != 1 or not phases[-1].is_terminal():
        problems.append(f"{job_id}: event log has {len(terminal)} terminal phases, ends {phases[-1:]}")
    return problems


def trainer_starts(backend: Backend, job_id: str) -> int:
    path = Path(backend.runs_dir) / job_id / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def audit(backend: Backend, submissions: list[Submission], watcher: PhaseWatcher, sampler: TrainerSampler) -> dict[str, Any]:
    store = SqlJobStore(backend.database_url)
    try:
        records = {r.id: r for r in all_jobs(store)}
        violations = [v for job_id in records for v in event_log_violations(store, job_id)]
    finally:
        store.close()
    acked = {job_id for s in submissions for job_id in s.acked_ids}
    lost = sorted(
        f"{job_id}: {'absent from the store' if job_id not in records else f'stuck {records[job_id].phase}'}"
        for job_id in acked
        if job_id not in records or not records[job_id].phase.is_terminal()
    )
    by_nonce: dict[str, list[str]] = {}
    for record in records.values():
        by_nonce.setdefault(record.labels.get(NONCE_LABEL, "?"), []).append(record.id)
    nonce_of = {j: r.labels.get(NONCE_LABEL, "?") for j, r in records.items()}
    starts = {j: trainer_starts(backend, j) for j in records}
    # Each finding names the submission (nonce) it duplicates; `duplicated_submissions` counts those.
    duplicated: dict[str, dict[str, str]] = {
        "one_key_many_ids": {
            str(s.nonce): f"key {s.key} answered with {sorted(set(s.acked_ids))}" for s in submissions if len(set(s.acked_ids)) > 1
        },
        "one_submission_many_jobs": {n: f"{len(ids)} jobs {sorted(ids)}" for n, ids in by_nonce.items() if len(ids) > 1},
        "trainers_at_once": {nonce_of.get(j, j): f"{j}: {n} trainers alive together" for j, n in sampler.max_per_job.items() if n > 1},
        "more_trainer_starts_than_launches": {
            nonce_of[j]: f"{j}: {starts[j]} trainer starts, {r.resumes + 1} launch(es)"
            for j, r in records.items()
            if starts[j] > r.resumes + 1
        },
        "more_k8s_jobs_than_launches": {
            nonce_of.get(j, j): f"{j}: {len(uids)} Jobs created, {records[j].resumes + 1 if j in records else '?'} launch(es)"
            for j, uids in backend.jobs_created.items()
            if j not in records or len(uids) > records[j].resumes + 1
        },
    }
    duplicated_submissions = {n for findings in duplicated.values() for n in findings}
    # Every stored job has its submission (by nonce), acknowledged or not: each must end as it was told to.
    by_nonce_sub = {str(s.nonce): s for s in submissions}
    expected = {j: by_nonce_sub[n] for j, n in nonce_of.items() if n in by_nonce_sub}
    wrong = sorted(
        f"{job_id}: {records[job_id].phase}, expected {s.expected} ({records[job_id].message[:160]})"
        for job_id, s in expected.items()
        if job_id in records
        and records[job_id].phase.is_terminal()
        and records[job_id].phase is not s.expected
        and not (s.cancel_unanswered and records[job_id].phase is JobPhase.CANCELLED)
    )
    left = {j: pids for j, pids in live_trainers().items() if j in records}
    finals: dict[str, int] = {}
    for record in records.values():
        finals[record.phase.value] = finals.get(record.phase.value, 0) + 1
    return {
        "submitted_acknowledged": len(acked),
        "jobs_in_store": len(records),
        "created_without_acknowledgement": sorted(j for n, ids in by_nonce.items() for j in ids if j not in acked),
        "lost": lost,
        "duplicated_submissions": len(duplicated_submissions),
        "duplicated": duplicated,
        "phase_regressions_seen_by_poller": watcher.regressions,
        "event_log_violations": violations,
        "wrong_final_phase": wrong,
        "final_phases": finals,
        "resumed_jobs": sum(1 for r in records.values() if r.resumes > 0),
        "k8s_jobs_created": sum(len(u) for u in backend.jobs_created.values()) if backend.jobs_created else None,
        "max_trainers_alive_together": sampler.max_total,
        "trainers_left_running": {j: len(p) for j, p in left.items()},
        "poller_polls": watcher.polls,
        "sampler_samples": sampler.samples,
        "cluster_failure": backend.cluster_failure,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
