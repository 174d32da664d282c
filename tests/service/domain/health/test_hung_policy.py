"""The observation policy's rows for a hung attempt (the trainer's exit 79, ExitCode.HUNG), as a table: every phase
and observed state, with and without hung restarts left. Only FAILED in RUNNING changes: a restart
while restarts are left, else FAIL (reason HUNG, record_writes.py); every other cell is the plain table's, and a
budget hold still wins (the service stopped it). Plus the words the job's message gets."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.health.hangs import hung_failure_message, hung_restart_message
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.observation_policy import Decision, decide
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase, can_transition
from service.domain.records.ports import Observation, ObservedState
from service.domain.records.run_report import HangReport
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec

P, S, D = JobPhase, ObservedState, Decision

# (phase, FAILED) -> (with hung restarts left, none left); every other cell: as without `hung`.
# fmt: off
HUNG_ROWS: dict[JobPhase, tuple[Decision, Decision]] = {
    P.QUEUED:     (D.FAIL,         D.FAIL),  # no attempt of the service's can have hung in its queue: a plain failure
    P.LAUNCHING:  (D.FAIL,         D.FAIL),  # never seen running: failed (reason HUNG), not restarted unseen
    P.RUNNING:    (D.HUNG_RESTART, D.FAIL),
    P.CANCELLING: (D.FINISH_CANCEL, D.FINISH_CANCEL),  # being cancelled: its end is the cancel's
    P.SUCCEEDED:  (D.IGNORE,       D.IGNORE),
    P.FAILED:     (D.IGNORE,       D.IGNORE),
    P.CANCELLED:  (D.IGNORE,       D.IGNORE),
}
# fmt: on


@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_a_hung_exit_restarts_the_job_while_restarts_are_left_then_fails_it(phase: JobPhase, state: ObservedState) -> None:
    for left, resumes_left in itertools.product((True, False), (True, False)):
        got = decide(phase, state, resumes_left=resumes_left, hung=True, hung_restarts_left=left)
        if state is S.FAILED:
            want = HUNG_ROWS[phase][0 if left else 1]
        else:
            want = decide(phase, state, resumes_left=resumes_left)
        assert got is want, (phase, state, left, resumes_left)
        assert got.target is None or can_transition(phase, got.target)
        assert decide(phase, state, resumes_left=resumes_left, hung=False, hung_restarts_left=left) is decide(
            phase, state, resumes_left=resumes_left
        )  # without a hung exit, restarts left change nothing


@pytest.mark.parametrize("phase", [P.QUEUED, P.LAUNCHING, P.RUNNING])
def test_a_held_job_whose_stopped_trainer_exits_hung_is_held_not_restarted(phase: JobPhase) -> None:
    assert decide(phase, S.FAILED, hung=True, held=True) is D.HOLD


def _record(hangs: list[HangReport], hung_restarts: int) -> JobRecord:
    spec = record_spec()
    record = JobRecord(
        id="rl-aaaaaaaaaaaa", team="team-a", name=spec.name, spec=spec, spec_hash="h", phase=P.RUNNING, created_at=T0, updated_at=T0
    )
    record.report.hangs, record.report.hung_restarts = hangs, hung_restarts
    return record


def test_the_messages_name_the_stage_step_limit_and_the_stacks() -> None:
    hang = HangReport(
        attempt=2, time=datetime(2030, 1, 1, tzinfo=UTC), stage="train", step=7, idle_s=61.2, limit_s=60, stacks="/runs/x/logs/train.log"
    )
    obs = Observation("rl-aaaaaaaaaaaa", S.FAILED, exit_code=79)
    restart = hung_restart_message(_record([hang], 1), 2, obs)
    assert restart == (
        "attempt 2 hung in the train stage after train step 7: no progress for 61 s (limit 60 s); the stacks of every thread "
        "are in /runs/x/logs/train.log; restarting from its last checkpoint (hung restart 1 of 2)"
    )
    failed = hung_failure_message(_record([hang], 2), obs)
    assert failed.startswith("attempt 2 hung in the train stage after train step 7") and "restarted 2 time(s) after hangs" in failed
    assert "`rljob logs rl-aaaaaaaaaaaa`" in failed
    unread = hung_restart_message(_record([], 1), 2, obs)  # the hung event not read: the exit code is all there is
    assert unread.startswith("the trainer found itself hung") and "stage log" in unread


def test_the_job_service_restarts_a_hung_job_once_per_exit_however_often_the_exit_is_seen(tmp_path: Path) -> None:
    """The local launcher's exit is reported by its watch and by the service's reconcile: the second report names the
    workload the restart replaced and is stale, not a second restart (or, in LAUNCHING, a failure)."""
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    launcher = FakeLauncher()
    service = JobService(JobPorts(store, launcher, FakeProgress()), JobPolicies(max_hung_restarts=2), clock=ManualClock())
    record = _record([], 0)
    record.object_name, record.backend = "pid:1", "fake"
    with store.transaction() as tx:
        tx.insert(record)
    for read_at in (1.0, 2.0):
        service.apply_observation(Observation(record.id, S.FAILED, exit_code=79, object_name="pid:1", read_at=read_at))
    after = store.get(record.id)
    assert after is not None and after.phase is P.LAUNCHING and after.report.hung_restarts == 1 and after.resumes == 1
    assert launcher.launched == [record.id] and after.failure_reason is None
    store.close()
