"""Checkpoint expiry on gs:// against fake-gcs-server: the leader deletes exactly the expired intermediate checkpoints
of a finished run with the client's batch delete (checkpoint_deleter.py), and a pass stopped between two batches is
finished by the next. The same on local files, and the policy: tests/service/domain/cost/test_checkpoint_expiry.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.checkpoint_deleter import RunCheckpointStore
from service.domain.records.phases import JobPhase
from tests.service.checkpoint_runs import (
    CHECKPOINT_FILES,
    DAY,
    FILE_BYTES,
    expiry_round,
    expiry_service,
    files_under,
    finished_job,
    write_run,
)
from tests.service.service_helpers import T0, ManualClock


class Killed(Exception):
    """The leader dying between two batch requests."""


def test_expiry_on_gcs_deletes_exactly_the_expired_intermediate_checkpoints_in_batches(emulator, bucket: str, tmp_path: Path) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    runs = f"gs://{bucket}/team-a/runs"
    old = finished_job(store, "rl-000000000001", runs, [1, 2, 10], finished_at=T0)
    young = finished_job(store, "rl-000000000002", runs, [1, 2], finished_at=T0 + 20 * DAY)
    running = finished_job(store, "rl-000000000003", runs, [1, 2], finished_at=None, phase=JobPhase.RUNNING)
    for job, steps in ((old, [1, 2, 10]), (young, [1, 2]), (running, [1, 2])):
        write_run(job.layout, steps)
    before = {job.id: files_under(job.layout.root) for job in (old, young, running)}
    batches: list[int] = []

    expiry_round(store, jobs, RunCheckpointStore(batch_size=3, on_batch=batches.append), clock).reconcile_once()

    # actor/1 and actor/2 go (4 objects each, in batches of 3); actor/10 (the final, whose name starts like actor/1) stays.
    gone = {f for f in before[old.id] if f.startswith((f"rl/{old.id}/checkpoints/actor/1/", f"rl/{old.id}/checkpoints/actor/2/"))}
    assert len(gone) == 2 * len(CHECKPOINT_FILES) and batches == [3, 1, 3, 1]
    assert files_under(old.layout.root) == before[old.id] - gone
    for job in (young, running):
        assert files_under(job.layout.root) == before[job.id]
    record = store.get(old.id)
    assert record is not None and record.checkpoint_expiry is not None and record.checkpoint_expiry.finished_at == clock.now
    assert record.checkpoint_expiry.freed_bytes == 2 * len(CHECKPOINT_FILES) * FILE_BYTES


def test_a_pass_stopped_between_two_batches_is_finished_by_the_next(emulator, bucket: str, tmp_path: Path) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    job = finished_job(store, "rl-000000000001", f"gs://{bucket}/runs", [1, 2, 3], finished_at=T0)
    write_run(job.layout, [1, 2, 3])
    before = files_under(job.layout.root)

    def die(deleted: int) -> None:
        raise Killed

    with pytest.raises(Killed):
        expiry_round(store, jobs, RunCheckpointStore(batch_size=3, on_batch=die), clock).expire(job.id)
    assert len(before - files_under(job.layout.root)) == 3  # one batch of actor/1's four objects went, unrecorded
    half = store.get(job.id)
    assert half is not None and half.checkpoint_expiry is not None and half.checkpoint_expiry.deleted == []

    expiry_round(store, jobs, RunCheckpointStore(), clock).reconcile_once()  # a new leader's first pass

    prefix = f"rl/{job.id}/checkpoints/actor/"
    assert {f.removeprefix(prefix).split("/")[0] for f in files_under(job.layout.root) if f.startswith(prefix)} == {"3"}
    done = store.get(job.id)
    assert done is not None and done.checkpoint_expiry is not None and done.checkpoint_expiry.finished_at is not None
    assert [c.step for c in done.checkpoint_expiry.deleted] == [1, 2]
