"""Team budgets through the job service (real SQLite store, fake launcher, a clock moved by hand): the submit-time 422
and its override, and the leader's budget loop holding a running job (stopped like a preemption, QUEUED with
BudgetExhausted, no resume spent, launched by nothing else) and releasing it when a restarted service has a larger
budget; a loop that restarts halfway finishes the stop."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.cost.budget_ledger import BudgetLedger
from service.domain.cost.budgets import hold_message, team_status
from service.domain.cost.usage import PriceTable
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.records.budget_models import BudgetAmounts, TeamBudget
from service.domain.records.errors import InvalidRequest
from service.domain.records.estimate_models import EstimateRange, JobEstimate
from service.domain.records.models import Caller, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.rounds.active_jobs_reconciler import ActiveJobsReconciler
from service.domain.rounds.budget_reconciler import BudgetReconciler
from service.domain.rounds.recovery import JobRecovery
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec

PRICES: PriceTable = {"v6e": {"on-demand": 2.0}}
TEAM_A = Caller(team="team-a", token_id="tok-a")
ADMIN = Caller(team="team-a", token_id="tok-admin", admin=True)


class FixedEstimate:
    """Stands in for the submit-time estimator (estimates.py): the chip-hours and dollars a test chooses."""

    def __init__(self, chip_hours: float) -> None:
        self.chip_hours = chip_hours

    def estimate(self, caller: Caller, spec: object) -> JobEstimate:
        figure = EstimateRange(expected=self.chip_hours, low=self.chip_hours, high=self.chip_hours)
        r = EstimateRange(expected=60.0, low=60.0, high=60.0)
        return JobEstimate(made_at=T0, basis="formula", basis_detail="test", run_s=r, wall_s=r, chip_hours=figure, cost_usd=None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlJobStore]:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    yield store
    store.close()


def _ledger(store: SqlJobStore, chip_hours: float) -> BudgetLedger:
    return BudgetLedger(store, {"team-a": TeamBudget(chip_hours=chip_hours)}, PRICES)


def _service(store: SqlJobStore, launcher: FakeLauncher, clock: ManualClock, ledger: BudgetLedger, estimate: float = 0.25) -> JobService:
    service = JobService(JobPorts(store, launcher, FakeProgress()), JobPolicies(budgets=ledger), clock=clock)
    service.estimator = FixedEstimate(estimate)  # type: ignore[assignment]
    return service


def _tpu_spec(tmp_path: Path) -> object:
    return record_spec(str(tmp_path / "runs"), hardware={"accelerator": "v6e-8", "rollout_engine": "jax"})


def _running(service: JobService, launcher: FakeLauncher, tmp_path: Path, caller: Caller = TEAM_A) -> JobRecord:
    record, _ = service.submit(caller, _tpu_spec(tmp_path))  # type: ignore[arg-type]
    service.apply_observation(launcher.set(record.id, ObservedState.RUNNING, object_name=f"fake/{record.id}", capacity="on-demand"))
    found = service.store.get(record.id)
    assert found is not None and found.phase is JobPhase.RUNNING
    return found


def test_a_team_over_its_budget_gets_the_422_and_nothing_is_stored(store: SqlJobStore, tmp_path: Path) -> None:
    launcher, clock = FakeLauncher(), ManualClock()
    service = _service(store, launcher, clock, _ledger(store, chip_hours=1.0))
    first = _running(service, launcher, tmp_path)
    clock.advance(400)  # 8 chips x 400 s = 0.89 chip-hours of 1.0: 0.11 left, the estimate is 0.25
    with pytest.raises(InvalidRequest) as refused:
        service.submit(TEAM_A, _tpu_spec(tmp_path), "key-2")  # type: ignore[arg-type]
    assert refused.value.loc == ("body", "budget", "chip_hours")
    message = str(refused.value)
    assert "team team-a's chip-hour budget for 2030-01 (UTC) is 1.00 chip-hours, and 0.89 chip-hours of it is committed" in message
    assert "0.89 chip-hours spent and up to 0.00 chip-hours more for its 1 queued or running job" in message  # ran past its 0.25
    assert "estimate is 0.25 chip-hours (0.25 chip-hours to 0.25 chip-hours)" in message and "0.11 chip-hours left" in message
    assert [r.id for r in store.list_active()] == [first.id] and launcher.launched == [first.id]

    with pytest.raises(InvalidRequest) as not_admin:
        service.submit(TEAM_A, _tpu_spec(tmp_path), override_budget=True)  # type: ignore[arg-type]
    assert not_admin.value.loc == ("query", "override_budget") and "only an admin" in str(not_admin.value)
    overridden, created = service.submit(ADMIN, _tpu_spec(tmp_path), "key-2", override_budget=True)  # type: ignore[arg-type]
    assert created
    clock.advance(3600)  # now well over: a repeat of the stored key is answered with its job, never refused
    again, created = service.submit(TEAM_A, _tpu_spec(tmp_path), "key-2")  # type: ignore[arg-type]
    assert (again.id, created) == (overridden.id, False)


def test_a_running_job_that_crosses_its_budget_is_held_stopped_queued_and_released_after_a_raise(
    store: SqlJobStore, tmp_path: Path
) -> None:
    launcher, clock = FakeLauncher(), ManualClock()
    ledger = _ledger(store, chip_hours=1.0)
    service = _service(store, launcher, clock, ledger)
    job = _running(service, launcher, tmp_path)
    loop = BudgetReconciler(service, store, ledger, clock=clock)
    loop.reconcile_once()
    assert launcher.cancelled == []  # room left
    clock.advance(450)  # 8 chips x 450 s = 1.0 chip-hours: the budget is reached
    loop.reconcile_once()
    held = store.get(job.id)
    assert held is not None and held.hold is not None and held.phase is JobPhase.RUNNING  # billed until seen stopped
    assert launcher.cancelled == [job.id] and "stopping for its budget" in held.message
    loop.reconcile_once()
    assert launcher.cancelled == [job.id]  # sent once per term
    # The trainer saves its checkpoint and exits 75: the stop, not a failure.
    service.apply_observation(launcher.set(job.id, ObservedState.FAILED, exit_code=75, object_name=f"fake/{job.id}"))
    queued = store.get(job.id)
    assert queued is not None and queued.phase is JobPhase.QUEUED and queued.resumes == 0 and queued.backend is None
    assert queued.queue is not None and (queued.queue.name, queued.queue.reason) == ("team/team-a", "BudgetExhausted")
    assert "chip-hour budget for 2030-01" in queued.message and "raises RLJOB_TEAM_BUDGETS" in queued.message
    # What happens next and what its owner can do: it resumes from its checkpoint by itself, when, or cancel it.
    assert "stopped with a checkpoint" in queued.message and "resumes from that checkpoint by itself" in queued.message
    assert "on 2030-02-01 (UTC)" in queued.message and "cancel it (rljob cancel" in queued.message
    assert queued.queue.message == queued.message
    kinds = [(e.kind, e.data.get("held")) for e in store.events_after(0, job_id=job.id) if e.kind == "hold"]
    assert kinds == [("hold", True)]

    # Nothing else launches a held job: recovery, the reconcile, a direct launch.
    JobRecovery(service, store, launcher).recover()
    ActiveJobsReconciler(service, store, launcher, clock=clock, queued_relaunch_after_s=0).reconcile_once()
    service.launch(job.id)
    loop.reconcile_once()
    still = store.get(job.id)
    assert launcher.launched == [job.id] and still is not None and still.phase is JobPhase.QUEUED and still.hold is not None

    # A restarted service with a larger budget releases it: QUEUED, hold cleared, launched again.
    raised_ledger = _ledger(store, chip_hours=2.0)
    raised = _service(store, launcher, clock, raised_ledger)
    BudgetReconciler(raised, store, raised_ledger, clock=clock).reconcile_once()
    released = store.get(job.id)
    assert released is not None and released.hold is None and released.phase is JobPhase.LAUNCHING
    assert launcher.launched == [job.id, job.id] and released.resumes == 0
    holds = [e.data for e in store.events_after(0, job_id=job.id) if e.kind == "hold"]
    assert [h["held"] for h in holds] == [True, False] and "has room again" in holds[1]["message"]


def test_a_new_leader_finishes_a_stop_the_killed_one_started(store: SqlJobStore, tmp_path: Path) -> None:
    launcher, clock = FakeLauncher(), ManualClock()
    ledger = _ledger(store, chip_hours=0.5)
    service = _service(store, launcher, clock, ledger)
    job = _running(service, launcher, tmp_path)
    clock.advance(900)
    BudgetReconciler(service, store, ledger, clock=clock).reconcile_once()
    assert launcher.cancelled == [job.id]
    # Killed before the workload stopped: the next leader (a new process) sends the stop again.
    successor_ledger = _ledger(store, chip_hours=0.5)
    successor = _service(store, launcher, clock, successor_ledger)
    BudgetReconciler(successor, store, successor_ledger, clock=clock).reconcile_once()
    assert launcher.cancelled == [job.id, job.id]
    successor.apply_observation(launcher.set(job.id, ObservedState.GONE, message="deleted"))
    after = store.get(job.id)
    assert after is not None and after.phase is JobPhase.QUEUED and after.resumes == 0 and after.queue is not None
    assert after.queue.reason == "BudgetExhausted"


def test_the_month_turning_releases_a_held_job(store: SqlJobStore, tmp_path: Path) -> None:
    launcher, clock = FakeLauncher(), ManualClock(T0.replace(day=31, hour=23))
    ledger = _ledger(store, chip_hours=0.5)
    service = _service(store, launcher, clock, ledger)
    job = _running(service, launcher, tmp_path)
    clock.advance(300)
    loop = BudgetReconciler(service, store, ledger, clock=clock)
    loop.reconcile_once()
    service.apply_observation(launcher.set(job.id, ObservedState.GONE))
    clock.advance(3600)  # February: January's spend is January's
    loop.reconcile_once()
    after = store.get(job.id)
    assert after is not None and after.hold is None and after.phase is JobPhase.LAUNCHING


def test_a_hold_message_says_what_happens_next_and_what_to_do_for_a_job_that_never_started() -> None:
    status = team_status("team-a", TeamBudget(chip_hours=1.0), BudgetAmounts(chip_hours=1.5, usd=0.0), datetime(2030, 12, 5, tzinfo=UTC))
    message = hold_message(status, started=False)
    assert message.startswith("held: team team-a's chip-hour budget for 2030-12 (UTC) is 1.00 chip-hours, 1.50 chip-hours spent.")
    assert "has not started" in message and "checkpoint" not in message  # nothing was stopped, nothing to resume from
    assert "starts by itself when the budget has room again: on 2031-01-01 (UTC)" in message  # the year turns too
    assert "raises RLJOB_TEAM_BUDGETS and restarts the service" in message and "cancel it (rljob cancel" in message
    assert "resumes from that checkpoint" in hold_message(status, started=True)
