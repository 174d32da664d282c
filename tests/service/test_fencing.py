"""Two leaders at once, and only one of them can write: leadership terms fence a deposed leader.

Two replicas (two real apps, each with its own store connection, on one PostgreSQL database) share one
emulated cluster whose launches are idempotent per job id, as Kubernetes Job names are. Replica A leads
and is part-way through launching a job (its launch call is in flight) when its lock's database session
is killed: a network partition, or a process paused and resumed. A does not notice (its next lock check
is an hour away). B takes the lock and a newer term, re-attaches the job and hands it to the cluster.
Then A's launch call comes back failed ("timed out"), and A does what a leader does with a failed
launch: it marks the job FAILED. That write belongs to A's ended term: it is refused in its own
transaction, the job stays B's, A stops its leader work at once, and the cluster created the job once.

Stopping means what the replica does, not what /readyz says: once deposed, whether fenced by a refused write
or by its own lock check finding the lock gone, the old leader makes no more launch, observe or progress calls
(its launcher and progress source count them while the new leader works on), hands over no job, and the process
runs one supervisor, the new leader's (threads counted by name).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from service.adapters.leader_locks import LEADER_LOCK_KEY
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.domain.records.errors import LaunchFailed
from service.domain.records.models import JobRecord
from service.domain.records.ports import LaunchResult, Observation, ObservedState, ProgressBatch
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import SUPERVISOR_LOOPS, TOKEN_A, spec_body, supervisor_threads, wait_until
from trainer.contract import JobSpec

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]
AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


class Cluster:
    """What both replicas' launchers talk to: each job's workload is created at most once."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.lock = threading.Lock()


class ClusterClient(FakeLauncher):
    """One replica's client of the cluster. With `hold`, a launch waits for `release` and then fails
    as a call cut off by a partition does (it never reached the API server)."""

    def __init__(self, cluster: Cluster, *, hold: bool = False) -> None:
        super().__init__()
        self.cluster = cluster
        self.hold = hold
        self.in_flight = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[str, str]] = []  # (what, job id): the leader's work this replica did here

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        self.calls.append(("launch", job_id))
        if self.hold:
            self.in_flight.set()
            self.release.wait(60)
            raise LaunchFailed("the API server did not answer (timed out)")
        with self.cluster.lock:
            if job_id not in self.cluster.created:  # a deterministic name: a second create finds the first
                self.cluster.created.append(job_id)
        self.states[job_id] = Observation(job_id, ObservedState.PENDING, object_name=f"job/{job_id}", message="pending")
        return LaunchResult(backend=self.backend, object_name=f"job/{job_id}")

    def observe(self, job_id: str) -> Observation:
        self.calls.append(("observe", job_id))
        with self.cluster.lock:
            exists = job_id in self.cluster.created
        if exists:
            return Observation(job_id, ObservedState.PENDING, object_name=f"job/{job_id}", message="pending")
        return Observation(job_id, ObservedState.GONE, message="no such Job")


class CountingProgress(FakeProgress):
    """A progress source that counts what the supervisor's progress work asks of it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def pending(self, record: JobRecord) -> bool:
        self.calls.append(("pending", record.id))
        return super().pending(record)

    def read_new(self, record: JobRecord) -> ProgressBatch:
        self.calls.append(("read", record.id))
        return super().read_new(record)


@contextmanager
def replica(
    db_url: str,
    settings_factory: Any,
    launcher: ClusterClient,
    check_interval_s: float,
    progress: FakeProgress | None = None,
    **settings_values: Any,
) -> Iterator[TestClient]:
    store = SqlJobStore(db_url)
    store.migrate()
    add_test_tokens(store)
    settings = settings_factory(database_url=db_url, leader_check_interval_s=check_interval_s, **settings_values)
    try:
        with TestClient(create_app(settings, store=store, launcher=launcher, progress=progress or FakeProgress())) as client:
            yield client
    finally:
        store.close()


def _kill_lock_session(db_url: str) -> None:
    admin = create_engine(db_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = :lo"),
            {"lo": LEADER_LOCK_KEY & 0xFFFF_FFFF},
        ).all()
    admin.dispose()
    assert killed, "no session held the leader lock"


def _active_ids(db_url: str) -> list[str]:
    store = SqlJobStore(db_url)
    try:
        return [record.id for record in store.list_active()]
    finally:
        store.close()


def test_a_deposed_leader_that_has_not_noticed_cannot_write_and_stops(postgres_db: str, settings_factory: Any, tmp_path: Path) -> None:
    cluster = Cluster()
    a_client, b_client = ClusterClient(cluster, hold=True), ClusterClient(cluster)
    with replica(postgres_db, settings_factory, a_client, check_interval_s=3600) as a:
        wait_until(lambda: a.get("/readyz").json().get("role") == "leader")
        # A leader launches a job it accepted within the submit request: send it from a thread of its own.
        submitted: list[Any] = []
        submit = threading.Thread(target=lambda: submitted.append(a.post("/v1/jobs", json=spec_body(tmp_path), headers=AUTH)))
        submit.start()
        assert a_client.in_flight.wait(30), "A never started the launch"
        job_id = next(iter(_active_ids(postgres_db)))
        _kill_lock_session(postgres_db)  # A's lock is gone; A will not look for an hour
        with replica(postgres_db, settings_factory, b_client, check_interval_s=0.05) as b:
            wait_until(lambda: b.get("/readyz").json().get("role") == "leader", timeout_s=30)
            wait_until(lambda: cluster.created == [job_id], timeout_s=30)  # B re-attached it and handed it over
            assert a.get("/readyz").json().get("role") == "leader"  # A still believes it leads
            b_phase = b.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["phase"]
            a_client.release.set()  # A's launch call returns: failed
            # A's "launch failed" write is refused, and A stops leading without waiting for its check.
            submit.join(30)
            assert submitted and submitted[0].status_code == 201, submitted  # A accepted the job before all this
            wait_until(lambda: a.get("/readyz").json().get("role") == "follower", timeout_s=10)
            job = b.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
            assert job["phase"] == b_phase != "FAILED", job
            assert job.get("failure") is None and "could not start" not in job["message"]
            assert cluster.created == [job_id]  # created once, by B
            assert b.get("/readyz").json().get("role") == "leader"


def _submit(client: TestClient, tmp_path: Path, name: str) -> str:
    response = client.post("/v1/jobs", json=spec_body(tmp_path, name=name), headers=AUTH)
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def _leads_and_ready(client: TestClient) -> bool:
    return bool(client.get("/readyz").json() == {"ready": True, "role": "leader"})


@pytest.mark.parametrize("deposed_by", ["a refused write", "its lock check"])
def test_a_deposed_leader_does_no_more_leader_work_and_one_supervisor_runs(
    postgres_db: str, settings_factory: Any, tmp_path: Path, deposed_by: str
) -> None:
    """A leads and works on a job (observes it, polls its progress), then its lock session is killed and B takes the
    lock and a newer term. A is deposed either by its next leader write being refused (an observation its watcher
    pushes; its reconcile would do the same) or by the lock check it makes every interval (called here: the
    interval is an hour). Where the lock check is the way, A's reconcile is slow and its progress rounds write
    nothing, so no refused write stops it first. Then, while B hands over and watches jobs submitted to either
    replica, A's launcher and progress source are asked nothing."""
    fenced = deposed_by == "a refused write"
    cluster = Cluster()
    a_launcher, b_launcher = ClusterClient(cluster), ClusterClient(cluster)
    a_progress = CountingProgress()
    earlier = set(threading.enumerate())
    quick = {"active_jobs_reconcile_interval_s": 0.05, "progress_poll_interval_s": 0.05}
    a_work = {"active_jobs_reconcile_interval_s": 0.05 if fenced else 3600, "progress_poll_interval_s": 0.05}
    with replica(postgres_db, settings_factory, a_launcher, 3600, a_progress, **a_work) as a:
        wait_until(lambda: _leads_and_ready(a))
        first = _submit(a, tmp_path, "first")
        # A's supervisor works on the job: progress every round, and (with the quick reconcile) observations.
        wait_until(lambda: a_progress.calls.count(("pending", first)) >= 3)
        if fenced:
            wait_until(lambda: a_launcher.calls.count(("observe", first)) >= 3)
        _kill_lock_session(postgres_db)
        with replica(postgres_db, settings_factory, b_launcher, 0.05, **quick) as b:
            wait_until(lambda: _leads_and_ready(b), timeout_s=30)
            runtime = a.app.state.runtime  # type: ignore[attr-defined]
            if fenced:
                a_launcher.emit(first, ObservedState.RUNNING, object_name=f"job/{first}", message="running")
            else:
                runtime.leadership.check_once()  # what A's check thread does at its next interval
            wait_until(lambda: a.get("/readyz").json().get("role") == "follower", timeout_s=10)
            # The deposition's own thread (a fence stops the supervisor from a thread of its own) has finished.
            wait_until(lambda: not any(thread.name == "rljob-fenced" for thread in threading.enumerate()), timeout_s=15)
            a_calls, a_progress_calls = list(a_launcher.calls), list(a_progress.calls)
            to_b, to_a = _submit(b, tmp_path, "to-b"), _submit(a, tmp_path, "to-a")  # A's stored, for B to hand over
            wait_until(lambda: {first, to_b, to_a} <= set(cluster.created), timeout_s=30)
            # B's reconcile has asked about every job several times since: A's would have done so too.
            observed_by_b = len(b_launcher.calls)
            wait_until(lambda: all(b_launcher.calls[observed_by_b:].count(("observe", j)) >= 3 for j in (first, to_b, to_a)))
            assert a_launcher.calls == a_calls, "A launched or observed after it was deposed"
            assert a_progress.calls == a_progress_calls, "A polled progress after it was deposed"
            assert ("launch", to_b) in b_launcher.calls and ("launch", to_a) in b_launcher.calls
            assert supervisor_threads(earlier) == dict.fromkeys(SUPERVISOR_LOOPS, 1), "B's supervisor, and no other, runs"
            assert a.get("/readyz").json().get("role") == "follower" and b.get("/readyz").json().get("role") == "leader"
