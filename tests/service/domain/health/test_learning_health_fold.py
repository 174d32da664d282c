"""Learning health through the job service: the window of train steps folded from events (bounded,
stored, surviving a store reopen), exactly one `health` event-log entry per verdict change, and
`stalled` coming and going with time through the poller. Real store; fakes at the ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.health.learning_health import HealthPolicy
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.records.train_step_summary import FIRST_STEPS_KEPT, HEALTH_WINDOW_STEPS
from service.domain.views import to_public
from service.supervisor import Supervisor
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec, spec_body
from trainer.contract import SIGNAL_METRIC, JobSpec, Stage, StageStarted, TrainStep
from trainer.contract.run.samples import COMPLETIONS_METRIC, REWARDED_METRIC

TEAM_A = Caller(team="team-a", token_id="tok_a")
POLICY = HealthPolicy(kl_max=1.0, no_signal_steps=3, stall_floor_s=300.0, stall_step_intervals=5.0)


class Trainer:
    """Feeds TrainStep events (10 s apart on the manual clock) into the fake progress source."""

    def __init__(self, progress: FakeProgress, clock: ManualClock, job_id: str) -> None:
        self.progress, self.clock, self.job_id = progress, clock, job_id
        self.seq, self.step = 0, 0
        self.progress.add(StageStarted(seq=self._next_seq(), time=clock(), job_id=job_id, stage=Stage.TRAIN))

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def train_step(self, signal: float, rewarded: int | None = None, **fields: object) -> None:
        self.clock.advance(10)
        self.step += 1
        metrics = {SIGNAL_METRIC: signal}
        if rewarded is not None:  # of 16 completions, as the trainer's sample recorder counts them
            metrics |= {COMPLETIONS_METRIC: 16.0, REWARDED_METRIC: float(rewarded)}
        fields = {"loss": 0.5, "kl": 0.01, **fields}
        self.progress.add(
            TrainStep(
                seq=self._next_seq(), time=self.clock(), job_id=self.job_id, step=self.step, total_steps=100, metrics=metrics, **fields
            )
        )  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def _running_job(
    store: SqlJobStore, launcher: FakeLauncher, progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> tuple[JobService, Trainer]:
    service = JobService(JobPorts(store, launcher, progress), JobPolicies(health=POLICY), clock=clock)
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(launcher.set(job_id, ObservedState.RUNNING))
    return service, Trainer(progress, clock, job_id)


def _health_entries(store: SqlJobStore, job_id: str) -> list[dict]:
    return [e.data for e in store.events_after(0, job_id=job_id) if e.kind == "health"]


def test_each_verdict_change_logs_exactly_one_health_entry(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    service, trainer = _running_job(store, fake_launcher, fake_progress, clock, tmp_path)
    job_id = trainer.job_id
    service.ingest_progress(job_id)
    assert _health_entries(store, job_id) == []  # nothing to judge before the first train step

    def fold(*signals: float, **fields: object) -> list[tuple[str, int]]:
        for signal in signals:
            trainer.train_step(signal, **fields)
            service.ingest_progress(job_id)  # one event per fold: a verdict per step
        return [(e["verdict"], e["step"]) for e in _health_entries(store, job_id)]

    assert fold(0.5, 0.5, 0.25) == [("signal", 1)]
    assert fold(0.0, 0.0) == [("signal", 1)]  # two steps without signal: not yet
    assert fold(0.0) == [("signal", 1), ("no-signal", 6)]
    assert fold(0.0, 0.0) == [("signal", 1), ("no-signal", 6)]  # still no signal: nothing new
    assert fold(0.5) == [("signal", 1), ("no-signal", 6), ("signal", 9)]
    assert fold(0.5, nonfinite=["actor/train/loss", "loss"], loss=None)[-1] == ("diverging", 10)
    last = _health_entries(store, job_id)[-1]
    assert last["previous"] == "signal" and "grpo.learning_rate" in last["message"]
    record = store.get(job_id)
    assert record is not None and record.health_verdict == "diverging"
    assert to_public(record, clock(), POLICY).health.verdict == "diverging"  # type: ignore[union-attr]
    # The entry comes after the step's progress entry in the log, so a stream shows both in order.
    kinds = [e.kind for e in store.events_after(0, job_id=job_id)]
    assert kinds[-2:] == ["progress", "health"]


def test_a_rising_rewarded_rate_turns_signal_into_improving_and_stays_so_after_the_window_passes_the_rise(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    """The counts travel from TrainStep metrics through the stored window to the trend test."""
    service, trainer = _running_job(store, fake_launcher, fake_progress, clock, tmp_path)
    for rewarded in (1, 2, 2, 4, 5, 6, 8, 9):
        trainer.train_step(0.5, rewarded=rewarded)
        service.ingest_progress(trainer.job_id)
    entries = _health_entries(store, trainer.job_id)
    # 8: six steps are the least to test, and the rise must hold at three looks in a row (6, 7, 8).
    assert [(e["verdict"], e["step"]) for e in entries] == [("signal", 1), ("improving", 8)]
    assert "Cochran-Armitage trend test" in entries[-1]["message"]
    for _ in range(HEALTH_WINDOW_STEPS):  # the rate stays at 9 of 16: the window's rise passes out of it ...
        trainer.train_step(0.5, rewarded=9)
    service.ingest_progress(trainer.job_id)
    # ... but not out of what the job keeps: its first steps, where the rate was 1-5 of 16, stay beside the window.
    assert [e["verdict"] for e in _health_entries(store, trainer.job_id)] == ["signal", "improving"]
    record = store.get(trainer.job_id)
    assert record is not None
    health = to_public(record, clock(), POLICY).health
    assert health is not None and health.verdict == "improving" and "steps 1-5 and 9-28" in health.message, health


def test_a_rate_level_from_the_start_turns_signal_into_flat(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    service, trainer = _running_job(store, fake_launcher, fake_progress, clock, tmp_path)
    for rewarded in [5, 6, 5, 4, 6] * 6:
        trainer.train_step(0.5, rewarded=rewarded)
        service.ingest_progress(trainer.job_id)
    assert [(e["verdict"], e["step"]) for e in _health_entries(store, trainer.job_id)] == [("signal", 1), ("flat", 10)]


def test_the_window_is_bounded_and_survives_a_store_reopen(
    db_url: str, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    store = SqlJobStore(db_url)
    store.migrate()
    service, trainer = _running_job(store, fake_launcher, fake_progress, clock, tmp_path)
    for _ in range(HEALTH_WINDOW_STEPS + 7):
        trainer.train_step(0.0)
    service.ingest_progress(trainer.job_id)  # one batch of 27 steps
    store.close()

    reopened = SqlJobStore(db_url)  # as after a service restart
    try:
        record = reopened.get(trainer.job_id)
        assert record is not None
        assert [s.step for s in record.report.recent_train_steps] == [*range(1, FIRST_STEPS_KEPT + 1), *range(8, HEALTH_WINDOW_STEPS + 8)]
        assert record.health_verdict == "no-signal"
        health = to_public(record, clock(), POLICY).health
        assert health is not None and health.verdict == "no-signal" and health.step == HEALTH_WINDOW_STEPS + 7
        assert [e["verdict"] for e in _health_entries(reopened, trainer.job_id)] == ["no-signal"]
    finally:
        reopened.close()


def test_stalled_comes_and_goes_with_time_through_the_poller(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    service, trainer = _running_job(store, fake_launcher, fake_progress, clock, tmp_path)
    ports, policies = JobPorts(store, fake_launcher, fake_progress), JobPolicies(health=POLICY)  # as _running_job's service
    poller = Supervisor(service, ports, policies, clock=clock, progress_poll_interval_s=3600, active_jobs_reconcile_interval_s=3600)
    for _ in range(3):
        trainer.train_step(0.5)
    poller.poll_progress_once()
    verdicts = lambda: [e["verdict"] for e in _health_entries(store, trainer.job_id)]  # noqa: E731
    assert verdicts() == ["signal"]

    clock.advance(300)  # the floor (max(300 s, 5 x 10 s)) reached, not passed
    poller.poll_progress_once()
    assert verdicts() == ["signal"]
    clock.advance(1)
    poller.poll_progress_once()
    poller.poll_progress_once()
    assert verdicts() == ["signal", "stalled"]  # once, not once per poll
    stalled = _health_entries(store, trainer.job_id)[-1]
    assert "no train step for 5m 1s" in stalled["message"] and f"rljob logs {trainer.job_id}" in stalled["message"]

    trainer.train_step(0.5)  # the trainer moves again
    poller.poll_progress_once()
    assert verdicts() == ["signal", "stalled", "signal"]

    clock.advance(3600)
    service.apply_observation(fake_launcher.set(trainer.job_id, ObservedState.SUCCEEDED, exit_code=0))
    record = store.get(trainer.job_id)
    assert record is not None and record.phase is JobPhase.SUCCEEDED
    poller.poll_progress_once()
    service.refresh_health(trainer.job_id)
    assert verdicts() == ["signal", "stalled", "signal"]  # a finished job does not stall
    assert to_public(record, clock(), POLICY).health.verdict == "signal"  # type: ignore[union-attr]


def test_a_job_stored_before_migration_0003_reads_with_no_health_until_its_next_step(
    db_url: str, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    from alembic import command
    from sqlalchemy import text

    from service.adapters.store.migrate import alembic_config

    store = SqlJobStore(db_url)
    try:
        command.upgrade(alembic_config(store.engine), "0002")
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO jobs (id, team, name, phase, spec, spec_hash, message, latest_metrics, stage_times,"
                    " artifacts, attempt, resumes, last_trainer_seq, last_event_seq, created_at, updated_at)"
                    " VALUES ('rl-0000000old01', 'team-a', 'old', 'RUNNING', :spec, '', '', '{}', '{}', '{}', 1, 0, 4, 0,"
                    " :now, :now)"
                ),
                {"spec": record_spec(str(tmp_path), name="old").model_dump_json(), "now": "2030-01-01 00:00:00.000000"},
            )
        store.migrate()  # 0002 -> head
        old = store.get("rl-0000000old01")
        assert old is not None and old.report.recent_train_steps == [] and old.health_verdict is None
        assert to_public(old, clock(), POLICY).health is None

        service = JobService(JobPorts(store, fake_launcher, fake_progress), JobPolicies(health=POLICY), clock=clock)
        fake_progress.add(TrainStep(seq=5, time=clock(), job_id=old.id, step=3, total_steps=9, metrics={SIGNAL_METRIC: 0.5}))
        service.ingest_progress(old.id)
        assert [e["verdict"] for e in _health_entries(store, old.id)] == ["signal"]
    finally:
        store.close()
