"""Two leaders at once, and only one of them can write: leadership terms fence a deposed leader.

Two replicas (two real apps, each with its own store connection, on one PostgreSQL database) share one
emulated cluster whose launches are idempotent per job id, as Kubernetes Job names are. Replica A leads
and is part-way through launching a job (its launch call is in flight) when its lock's database session
is killed: a network partition, or a process paused and resumed. A does not notice (its next lock check
is an hour away). B takes the lock and a newer term, re-attaches the job and hands it to the cluster.
Then A's launch call comes back failed ("timed out"), and A does what a leader does with a failed
launch: it marks the job FAILED. That write belongs to A's ended term: it is refused in its own
transaction, the job stays B's, A stops its leader work at once, and the cluster created the job once.
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
from service.domain.errors import LaunchFailed
from service.domain.ports import LaunchResult, Observation, ObservedState
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until
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

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
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
        with self.cluster.lock:
            exists = job_id in self.cluster.created
        if exists:
            return Observation(job_id, ObservedState.PENDING, object_name=f"job/{job_id}", message="pending")
        return Observation(job_id, ObservedState.GONE, message="no such Job")


@contextmanager
def replica(db_url: str, settings_factory: Any, launcher: ClusterClient, check_interval_s: float) -> Iterator[TestClient]:
    store = SqlJobStore(db_url)
    store.migrate()
    add_test_tokens(store)
    settings = settings_factory(database_url=db_url, leader_check_interval_s=check_interval_s)
    try:
        with TestClient(create_app(settings, store=store, launcher=launcher, progress=FakeProgress())) as client:
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
