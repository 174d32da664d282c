"""A checkpoint that cannot be deleted is retried with backoff and reported once (service/domain/rounds/checkpoint_expiry.py):
the leader's passes run every 60 s on an injected clock over a day, on real files with the real deleter, whose delete
of one job's checkpoints fails (PermissionError) until the test lets it. Before, that job was tried on every pass
(1440 a day) with a traceback each time."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import pytest

from service.adapters.checkpoint_deleter import RunCheckpointStore
from service.domain.records.models import JobRecord
from service.domain.rounds.checkpoint_expiry import EXPIRY_RETRY_MAX_S, CheckpointExpiryReconciler, TreeSize, expiry_retry_delay_s
from service.supervisor import CHECKPOINT_EXPIRY_INTERVAL_S
from tests.service.checkpoint_runs import DAY, expiry_round, expiry_service, finished_job, write_run
from tests.service.service_helpers import T0, ManualClock

LOGGER = "service.domain.rounds.checkpoint_expiry"
MINUTE_S = 60.0


class Undeletable(RunCheckpointStore):
    """The real deleter, except that one job's checkpoints refuse to go (a directory the service may not write,
    a bucket that denies delete) while `stuck`; each try at them is noted with the clock's time."""

    def __init__(self, job_id: str, clock: ManualClock) -> None:
        super().__init__()
        self.job_id, self.clock = job_id, clock
        self.stuck = True
        self.tries: list[datetime] = []

    def delete(self, record: JobRecord, path: str) -> TreeSize:
        if record.id == self.job_id:
            self.tries.append(self.clock.now)
            if self.stuck:
                raise PermissionError(13, "Permission denied", path)
        return super().delete(record, path)


def _passes(reconciler: CheckpointExpiryReconciler, clock: ManualClock, seconds: float) -> None:
    """The supervisor's loop on the test's clock: a pass, then CHECKPOINT_EXPIRY_INTERVAL_S later the next."""
    end = clock.now.timestamp() + seconds
    while clock.now.timestamp() < end:
        reconciler.reconcile_once()
        clock.advance(CHECKPOINT_EXPIRY_INTERVAL_S)


def _reports(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= level]


def test_an_undeletable_checkpoint_is_retried_with_backoff_and_reported_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    runs = str(tmp_path / "runs")
    stuck = finished_job(store, "rl-000000000001", runs, [10, 20, 30], finished_at=T0)
    fine = finished_job(store, "rl-000000000002", runs, [10, 20], finished_at=T0)
    for job, steps in ((stuck, [10, 20, 30]), (fine, [10, 20])):
        write_run(job.layout, steps)
    checkpoints = Undeletable(stuck.id, clock)
    reconciler = expiry_round(store, jobs, checkpoints, clock)
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    _passes(reconciler, clock, 24 * 3600)

    minutes = [(b - a).total_seconds() / MINUTE_S for a, b in zip(checkpoints.tries, checkpoints.tries[1:], strict=False)]
    assert minutes == [2, 4, 8, 16, 32, 64, 128, 256, 360, 360]  # doubling from 2 min to the 6 h cap: 11 tries in a day
    assert not Path(fine.layout.actor_checkpoints, "10").exists()  # the other job's expiry went on meanwhile
    assert Path(stuck.layout.actor_checkpoints, "10").is_dir()
    (warning,) = _reports(caplog, logging.WARNING)  # once, for the whole day
    message = warning.getMessage()
    assert stuck.id in message and "PermissionError" in message and "Permission denied" in message
    assert warning.exc_info is None and all(r.exc_info is None for r in _reports(caplog))  # no traceback at INFO and up
    assert len([r for r in caplog.records if r.name == LOGGER and r.exc_info]) == 11  # each failure's at DEBUG only

    checkpoints.stuck = False  # someone fixed the permissions: the next due try deletes, and says so once
    _passes(reconciler, clock, 6 * 3600)
    assert len(checkpoints.tries) == 13  # 11 failed, then step 10 and step 20 deleted in one pass
    assert not Path(stuck.layout.actor_checkpoints, "10").exists() and not Path(stuck.layout.actor_checkpoints, "20").exists()
    record = store.get(stuck.id)
    assert record is not None and record.checkpoint_expiry is not None and record.checkpoint_expiry.finished_at is not None
    assert [r.getMessage() for r in _reports(caplog, logging.WARNING)] == [message]
    (recovered,) = [r for r in _reports(caplog) if r.levelno == logging.INFO]
    assert stuck.id in recovered.getMessage() and "after 11 failed passes" in recovered.getMessage()


def test_a_new_term_tries_at_once_and_reports_once_more(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The backoff is the term's, not stored (the module says why): a new leader tries once at once, then backs off."""
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    stuck = finished_job(store, "rl-000000000001", str(tmp_path / "runs"), [10, 20], finished_at=T0)
    write_run(stuck.layout, [10, 20])
    checkpoints = Undeletable(stuck.id, clock)
    reconciler = expiry_round(store, jobs, checkpoints, clock)
    caplog.set_level(logging.INFO, logger=LOGGER)

    _passes(reconciler, clock, 10 * MINUTE_S)  # tries at 0, 2 and 6 min
    reconciler.restart()  # the lead lost and won back, or another replica's first term
    _passes(reconciler, clock, 10 * MINUTE_S)  # at once (10 min), then 12 and 16

    assert [(t - checkpoints.tries[0]).total_seconds() / MINUTE_S for t in checkpoints.tries] == [0, 2, 6, 10, 12, 16]
    assert len(_reports(caplog, logging.WARNING)) == 2


def test_the_wait_stays_at_its_cap_however_long_a_checkpoint_stays_undeletable() -> None:
    # Four failures a day at the cap: a checkpoint stuck for a year has failed some 1460 times; 2.0 ** 1459 overflows.
    assert [expiry_retry_delay_s(n) for n in (1, 2, 8, 9, 1460, 10**6)] == [
        120,
        240,
        15360,
        EXPIRY_RETRY_MAX_S,
        EXPIRY_RETRY_MAX_S,
        EXPIRY_RETRY_MAX_S,
    ]
