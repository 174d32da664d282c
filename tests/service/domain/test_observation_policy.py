"""The observation policy as a table: every ObservedState in every JobPhase, written out by hand.

The table is enumerated against the enums, so a new phase or state without a row fails here; and each
cell is asserted, so any change of policy fails here too. The second half drives the real JobService
(real SQLite store, fake launcher) through every cell and checks it carries the decision out.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.observation_policy import Decision, decide, names_a_replaced_workload
from service.domain.records.models import JobRecord, QueueStatus
from service.domain.records.phases import JobPhase, can_transition
from service.domain.records.ports import Observation, ObservedState
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, spec_body
from trainer.contract import JobSpec, describe_exit_code

P, S, D = JobPhase, ObservedState, Decision

# Columns: the five states whose decision depends on the phase alone, then GONE in its four contexts:
# (about the job's current workload | about a workload a relaunch replaced) x (resumes left | none left).
COLUMNS = (S.QUEUED, S.PENDING, S.RUNNING, S.RESTARTING, S.SUCCEEDED, S.FAILED)
GONE_CONTEXTS = ((False, True), (False, False), (True, True), (True, False))  # (about_replaced, resumes_left)
# fmt: off
TABLE: dict[JobPhase, tuple[Decision, ...]] = {
    #              QUEUED    PENDING  RUNNING  RESTARTING  SUCCEEDED         FAILED            | GONE: current    current, no resume  replaced  replaced, no resume
    P.QUEUED:     (D.NOTE,   D.ADMIT, D.START, D.ADMIT,    D.SUCCEED,        D.FAIL,             D.RELAUNCH,      D.RELAUNCH,         D.STALE,  D.STALE),
    P.LAUNCHING:  (D.QUEUE,  D.NOTE,  D.START, D.NOTE,     D.SUCCEED,        D.FAIL,             D.RELAUNCH,      D.RELAUNCH,         D.STALE,  D.STALE),
    P.RUNNING:    (D.QUEUE,  D.NOTE,  D.NOTE,  D.NOTE,     D.SUCCEED,        D.FAIL,             D.RESUME,        D.GIVE_UP,          D.STALE,  D.STALE),
    P.CANCELLING: (D.WAIT,   D.WAIT,  D.WAIT,  D.WAIT,     D.FINISH_CANCEL,  D.FINISH_CANCEL,    D.FINISH_CANCEL, D.FINISH_CANCEL,    D.STALE,  D.STALE),
    P.SUCCEEDED:  (D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE,         D.IGNORE,           D.IGNORE,        D.IGNORE,           D.IGNORE, D.IGNORE),
    P.FAILED:     (D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE,         D.IGNORE,           D.IGNORE,        D.IGNORE,           D.IGNORE, D.IGNORE),
    P.CANCELLED:  (D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE, D.IGNORE,         D.IGNORE,           D.IGNORE,        D.IGNORE,           D.IGNORE, D.IGNORE),
}
# fmt: on

# What each decision means: (phase written or None, launch again, manifest folded in, workload name adopted).
MEANING: dict[Decision, tuple[JobPhase | None, bool, bool, bool]] = {
    D.IGNORE: (None, False, False, False),
    D.STALE: (None, False, False, False),
    D.WAIT: (None, False, False, True),
    D.NOTE: (None, False, False, True),
    D.QUEUE: (P.QUEUED, False, False, True),
    D.ADMIT: (P.LAUNCHING, False, False, True),
    D.START: (P.RUNNING, False, False, True),
    D.SUCCEED: (P.SUCCEEDED, False, True, True),
    D.FAIL: (P.FAILED, False, True, True),
    D.FINISH_CANCEL: (P.CANCELLED, False, True, True),
    D.RELAUNCH: (None, True, False, True),
    D.RESUME: (P.LAUNCHING, True, False, True),
    D.GIVE_UP: (P.FAILED, False, False, True),
    D.REQUEUE: (None, False, False, True),  # the launcher's requeue, then the GONE that follows resumes it
    D.HOLD: (P.QUEUED, False, False, True),  # a held job's stopped workload (test_budgets.py): QUEUED, no relaunch
    D.HUNG_RESTART: (P.LAUNCHING, True, False, True),  # the trainer's exit HUNG (test_hung_policy.py): resumed, counted
}

CONTEXTS = list(itertools.product((False, True), (True, False)))  # (about_replaced, resumes_left)


def expected(phase: JobPhase, state: ObservedState, about_replaced: bool, resumes_left: bool) -> Decision:
    row = TABLE[phase]
    if about_replaced and state in (S.SUCCEEDED, S.FAILED) and not phase.is_terminal():
        return D.STALE  # the exit of a workload a hung restart replaced (test_hung_policy.py), seen again
    if state is S.GONE:
        return row[len(COLUMNS) + GONE_CONTEXTS.index((about_replaced, resumes_left))]
    return row[COLUMNS.index(state)]  # these states' decisions do not depend on the context


def test_the_table_has_a_row_for_every_phase_and_a_column_for_every_state() -> None:
    assert set(TABLE) == set(JobPhase)
    assert set(COLUMNS) | {S.GONE} == set(ObservedState) and S.GONE not in COLUMNS
    assert all(len(row) == len(COLUMNS) + len(GONE_CONTEXTS) for row in TABLE.values())
    assert set(MEANING) == set(Decision)


@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_decide_follows_the_table_in_every_context(phase: JobPhase, state: ObservedState) -> None:
    for about_replaced, resumes_left in CONTEXTS:
        got = decide(phase, state, about_replaced_workload=about_replaced, resumes_left=resumes_left)
        assert got is expected(phase, state, about_replaced, resumes_left), (phase, state, about_replaced, resumes_left)


@pytest.mark.parametrize("decision", list(Decision))
def test_each_decision_means_what_it_says(decision: Decision) -> None:
    target, relaunches, records_artifacts, adopts_name = MEANING[decision]
    assert (decision.target, decision.relaunches, decision.records_artifacts, decision.adopts_workload_name) == (
        target,
        relaunches,
        records_artifacts,
        adopts_name,
    )


@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_every_phase_a_decision_writes_is_a_legal_move(phase: JobPhase, state: ObservedState) -> None:
    for about_replaced, resumes_left in CONTEXTS:
        target = decide(phase, state, about_replaced_workload=about_replaced, resumes_left=resumes_left).target
        assert target is None or can_transition(phase, target), (phase, state, target)


@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_a_disrupted_attempt_of_a_capacity_set_is_requeued_only_while_it_runs_or_starts(phase: JobPhase, state: ObservedState) -> None:
    """requeue_disrupted changes one cell per row: RESTARTING in LAUNCHING or RUNNING, with a resume left (the requeue
    spends one); every other cell is the table's."""
    for about_replaced, resumes_left in CONTEXTS:
        got = decide(phase, state, about_replaced_workload=about_replaced, resumes_left=resumes_left, requeue_disrupted=True)
        requeued = state is S.RESTARTING and phase in (P.LAUNCHING, P.RUNNING) and resumes_left
        assert got is (D.REQUEUE if requeued else expected(phase, state, about_replaced, resumes_left)), (phase, state, resumes_left)


@pytest.mark.parametrize("phase", list(JobPhase))
def test_a_workload_being_deleted_is_waited_for_not_resumed(phase: JobPhase) -> None:
    """Relaunching while the old Job's pods still terminate would find it (same name) and spend a second resume when
    it goes; held in no memory, so a restarted service waits the same way."""
    for about_replaced, resumes_left in CONTEXTS:
        got = decide(phase, S.GONE, about_replaced_workload=about_replaced, resumes_left=resumes_left, deleting=True)
        waits = phase in (P.LAUNCHING, P.RUNNING) and not about_replaced
        assert got is (D.WAIT if waits else expected(phase, S.GONE, about_replaced, resumes_left)), (phase, about_replaced)


@pytest.mark.parametrize("phase", list(JobPhase))
def test_a_requeue_is_asked_for_once(phase: JobPhase) -> None:
    """Another RESTARTING about the attempt being requeued (the watch and the reconcile both see it) is the table's
    decision, not a second requeue that could delete the workload the relaunch made."""
    for about_replaced, resumes_left in CONTEXTS:
        got = decide(
            phase, S.RESTARTING, about_replaced_workload=about_replaced, resumes_left=resumes_left, requeue_disrupted=True, requeueing=True
        )
        assert got is expected(phase, S.RESTARTING, about_replaced, resumes_left), phase


def test_a_replaced_workload_is_one_named_differently_that_a_relaunch_replaced() -> None:
    assert names_a_replaced_workload("pid:1", "pid:2", {"pid:1"})
    assert not names_a_replaced_workload("pid:1", "pid:1", {"pid:1"})  # Kubernetes: the name repeats
    assert not names_a_replaced_workload("pid:3", "pid:2", {"pid:1"})  # never replaced: a new workload
    assert not names_a_replaced_workload(None, "pid:2", {"pid:1"})  # unnamed: about the job, not a workload


# ---- the job service carries each cell out ----------------------------------------------------------

MAX_RESUMES = 1
OBS_MESSAGE = "backend: something happened"


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlJobStore]:
    store = SqlJobStore(f"sqlite:///{tmp_path_factory.mktemp('db') / 'rljob.db'}")
    store.migrate()
    yield store
    store.close()


def _stored_job(store: SqlJobStore, tmp_path: Path, phase: JobPhase, resumes: int) -> str:
    spec = JobSpec.model_validate({**spec_body(tmp_path), "team": "team-a"})
    record = JobRecord(
        id="rl-" + uuid.uuid4().hex[:12],
        team="team-a",
        name=spec.name,
        spec=spec,
        spec_hash=spec.content_hash(),
        phase=phase,
        created_at=T0,
        updated_at=T0,
        message="before",
        object_name="w-1",
        backend="fake",
        resumes=resumes,
    )
    with store.transaction() as tx:
        tx.insert(record)
    return record.id


@pytest.mark.parametrize("resumes_left", [True, False], ids=["resumes-left", "no-resume-left"])
@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_the_job_service_carries_out_every_cell(
    shared_store: SqlJobStore, tmp_path: Path, phase: JobPhase, state: ObservedState, resumes_left: bool
) -> None:
    launcher = FakeLauncher()
    service = JobService(JobPorts(shared_store, launcher, FakeProgress()), JobPolicies(max_resumes=MAX_RESUMES), clock=ManualClock())
    job_id = _stored_job(shared_store, tmp_path, phase, resumes=0 if resumes_left else MAX_RESUMES)
    exit_code = 70 if state is S.FAILED else None
    queue = QueueStatus(name="team/team-a", position=2, reason="TeamJobLimit") if state is S.QUEUED else None
    # A name the job has never had: a new workload (a relaunch replaced nothing yet), not a stale one.
    service.apply_observation(Observation(job_id, state, message=OBS_MESSAGE, exit_code=exit_code, object_name="w-2", queue=queue))

    decision = expected(phase, state, False, resumes_left)
    after = shared_store.get(job_id)
    assert after is not None
    # A relaunch from QUEUED goes through launch(), which hands the job over again: LAUNCHING.
    relaunched_from_queue = decision is D.RELAUNCH and phase is P.QUEUED
    target = P.LAUNCHING if relaunched_from_queue else decision.target
    assert after.phase is (target or phase)
    assert launcher.launched == ([job_id] if decision.relaunches else [])
    assert after.resumes == (1 if decision is D.RESUME else 0 if resumes_left else MAX_RESUMES)
    phase_events = [e.data for e in shared_store.events_after(0, job_id=job_id) if e.kind == "phase"]
    assert [(e["previous"], e["phase"]) for e in phase_events] == ([(phase, target)] if target else [])
    assert after.queue == (queue if after.phase is P.QUEUED else None)
    name = {D.IGNORE: "w-1", D.STALE: "w-1", D.RESUME: f"fake/{job_id}"}.get(decision, "w-2")  # a resume relaunched
    assert after.object_name == name
    queued = "preempted, back in team/team-a: " if phase is P.RUNNING else "waiting in team/team-a: "
    message = {
        D.IGNORE: "before",
        D.STALE: "before",
        D.WAIT: "before",
        D.NOTE: OBS_MESSAGE,
        D.START: OBS_MESSAGE,
        D.ADMIT: OBS_MESSAGE,
        D.QUEUE: queued + OBS_MESSAGE + ("; it resumes from its last checkpoint when admitted again" if phase is P.RUNNING else ""),
        D.SUCCEED: "finished successfully",
        D.FINISH_CANCEL: "cancelled; the workload has stopped",
        D.RELAUNCH: "handing the job to the fake launcher" if relaunched_from_queue else f"relaunching: {OBS_MESSAGE}",
        D.RESUME: f"resuming (attempt 2): {OBS_MESSAGE}",
    }
    if decision is D.FAIL:
        assert after.failure_reason == "NON_RETRYABLE" and after.exit_code == 70
        assert after.message == f"{describe_exit_code(70)}; logs: `rljob logs {job_id}`"
    elif decision is D.GIVE_UP:
        assert after.failure_reason == "ResumeLimit" and "resumed 1 time(s) already, giving up" in after.message
    elif decision is D.NOTE and phase is P.QUEUED:
        assert after.failure_reason is None and after.message == message[D.QUEUE]  # the queue's words
    else:
        assert after.failure_reason is None and after.message == message[decision]
    if decision is D.SUCCEED:
        assert after.exit_code == 0  # no exit code observed: a success is 0


def test_an_observation_read_before_the_last_applied_one_changes_nothing(shared_store: SqlJobStore, tmp_path: Path) -> None:
    """The watch and the slow reconcile observe from two threads: a QUEUED read before Kueue re-admitted
    the job can arrive after the LAUNCHING read since. Applied, it took the job back to QUEUED."""
    service = JobService(JobPorts(shared_store, FakeLauncher(), FakeProgress()), JobPolicies(max_resumes=MAX_RESUMES), clock=ManualClock())
    job_id = _stored_job(shared_store, tmp_path, P.QUEUED, resumes=0)
    queue = QueueStatus(name="ml-tpu", position=None, reason="Preempted")
    read_first = Observation(job_id, S.QUEUED, message="still preempted", object_name="w-1", queue=queue, read_at=10.0)
    read_second = Observation(job_id, S.PENDING, message="admitted; starting", object_name="w-1", read_at=11.0)

    service.apply_observation(read_second)
    service.apply_observation(read_first)  # arrives last, read first
    after = shared_store.get(job_id)
    assert after is not None and (after.phase, after.message) == (P.LAUNCHING, "admitted; starting")
    phases = [e.data["phase"] for e in shared_store.events_after(0, job_id=job_id) if e.kind == "phase"]
    assert phases == [P.LAUNCHING]

    # A later read still applies, whatever it says.
    service.apply_observation(Observation(job_id, S.QUEUED, message="preempted", object_name="w-1", queue=queue, read_at=12.0))
    after = shared_store.get(job_id)
    assert after is not None and after.phase is P.QUEUED
