"""Evaluations attached to a training job (JobSpec.eval): which eval jobs it gets, made once each, by the leader
only, again after a restart, and its view of them with the paired difference from the base eval.

JobService with a real store (SQLite, PostgreSQL), fakes at the launcher and progress ports, and the real run-file
reader for the outcomes files the comparison reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from service.adapters.run_files import StoreRunFiles
from service.adapters.store import SqlJobStore
from service.cli.output import print_job
from service.domain.evals.attached_evals import EVAL_OF_LABEL, wanted_evals
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.job_writer import WriteRules
from service.domain.records.errors import InvalidRequest
from service.domain.records.models import Caller, JobFilters, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.rounds.attached_eval_reconciler import SWEEP_PAGE, AttachedEvalReconciler
from service.domain.views import to_public
from tests.service.eval_runs import FUNCTION, outcome_rows, suite_hash
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec, spec_body
from trainer.contract import ArtifactWritten, CheckpointSaved, EvalReported, JobSpec, RunLayout
from trainer.contract.run.eval_report import EvalReport, summarize
from trainer.contract.spec.eval_suite import EvalSampling, SuiteIdentity

TEAM_A = Caller(team="team-a", token_id="tok_a")
ATTACHED = {"suite": {"name": "arith"}, "every_n_checkpoints": 1}
GRPO = {"num_batches": 6, "checkpoint_period": 2, "num_test_batches": 0}


def _spec(tmp_path: Path, **attached: object) -> JobSpec:
    return JobSpec.model_validate(spec_body(tmp_path, name="trained", grpo=GRPO, eval={**ATTACHED, **attached}))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _ports(store: SqlJobStore, launcher: FakeLauncher, progress: FakeProgress) -> JobPorts:
    return JobPorts(store, launcher, progress, run_files=StoreRunFiles())


def _service(ports: JobPorts, clock: ManualClock, *, leads: bool = True) -> JobService:
    return JobService(ports, writes=WriteRules(leads=lambda: leads), clock=clock)


def _reconciler(service: JobService, ports: JobPorts, clock: ManualClock, *, sweep_page: int = SWEEP_PAGE) -> AttachedEvalReconciler:
    """The leader's round over the ports and the clock `service` was built from."""
    return AttachedEvalReconciler(service, ports.store, ports.run_files, clock=clock, sweep_page=sweep_page)


@pytest.fixture
def ports(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress) -> JobPorts:
    return _ports(store, fake_launcher, fake_progress)


@pytest.fixture
def service(ports: JobPorts, clock: ManualClock) -> JobService:
    return _service(ports, clock)


class Trainer:
    """Events of a job's trainer, numbered per job, folded at once (as the progress poller would)."""

    def __init__(self, service: JobService, progress: FakeProgress, clock: ManualClock) -> None:
        self.service, self.progress, self.clock = service, progress, clock
        self.seq: dict[str, int] = {}

    def send(self, cls: type, job_id: str, **fields: object) -> None:
        seq = self.seq.get(job_id, 0)
        self.seq[job_id] = seq + 1
        self.clock.advance(1)
        self.progress.add(cls(seq=seq, time=self.clock(), job_id=job_id, **fields))
        self.service.ingest_progress(job_id)

    def checkpoint(self, job: JobRecord, step: int) -> None:
        self.send(CheckpointSaved, job.id, step=step, params=f"{job.layout.actor_checkpoints}/{step}/model_params")

    def end(self, job_id: str, state: ObservedState) -> None:
        self.service.apply_observation(self.service.launcher.set(job_id, ObservedState.RUNNING))  # type: ignore[attr-defined]
        self.service.apply_observation(self.service.launcher.set(job_id, state))  # type: ignore[attr-defined]

    def eval_done(self, eval_job: JobRecord, greedy: list[int]) -> None:
        """What an eval job's trainer leaves: its outcomes file, then its report event; then its workload succeeds."""
        rows = outcome_rows(greedy)
        layout = eval_job.layout
        Path(layout.eval_dir).mkdir(parents=True, exist_ok=True)
        Path(layout.eval_outcomes).write_text("".join(row.model_dump_json() + "\n" for row in rows))
        task = eval_job.spec.evaluation
        assert task is not None
        suite = SuiteIdentity(
            name="arith",
            builtin=True,
            content_hash=suite_hash("arith"),
            rows=len(rows),
            reward_functions=[FUNCTION],
            sampling=EvalSampling(),
        )
        report = EvalReport(
            suite=suite,
            checkpoint=task.checkpoint,
            model_source=eval_job.spec.model.source,
            n=len(rows),
            k=2,
            functions={FUNCTION: summarize(rows, FUNCTION)},
            primary=FUNCTION,
            generate_s=1.0,
            outcomes_file=layout.eval_outcomes,
        )
        self.send(EvalReported, eval_job.id, report=report)
        self.end(eval_job.id, ObservedState.SUCCEEDED)


@pytest.fixture
def trainer(service: JobService, fake_progress: FakeProgress, clock: ManualClock) -> Trainer:
    return Trainer(service, fake_progress, clock)


def _attached(store: SqlJobStore, parent_id: str) -> dict[str, JobRecord]:
    rows = store.list_jobs(JobFilters(labels=((EVAL_OF_LABEL, parent_id),)), before_pk=None, limit=100)
    return {r.spec.evaluation.checkpoint.label: r for _, r in rows if r.spec.evaluation is not None}


def _all_jobs(store: SqlJobStore) -> int:
    return len(store.list_jobs(JobFilters(), before_pk=None, limit=1000))


# ---- which eval jobs a job wants ------------------------------------------------------------------------


def _record(phase: JobPhase, checkpoints: list[int], *, artifacts: tuple[str, ...] = (), **attached: object) -> JobRecord:
    spec = record_spec(grpo=GRPO, eval={**ATTACHED, **attached})
    record = JobRecord(
        id="rl-aaaaaaaaaaaa", team="team-a", name="trained", spec=spec, spec_hash="h", phase=phase, created_at=T0, updated_at=T0
    )
    uris = {s: f"{record.layout.actor_checkpoints}/{s}/model_params" for s in checkpoints}
    record.report = replace(record.report, checkpoints=uris, artifacts={name: None for name in artifacts})  # type: ignore[misc]
    return record


@pytest.mark.parametrize(
    "phase, checkpoints, artifacts, attached, labels",
    [
        (JobPhase.QUEUED, [], (), {}, ["base"]),  # the base runs beside training, from the start
        (JobPhase.RUNNING, [2, 4, 5, 6], (), {}, ["base", "step-2", "step-4", "step-6"]),  # 5: a stop's checkpoint, off the grid
        (JobPhase.RUNNING, [2, 4, 6], (), {"every_n_checkpoints": 2}, ["base", "step-4"]),  # every 2nd: steps 4, 8, ...
        (JobPhase.RUNNING, [2], (), {"base": False}, ["step-2"]),
        (JobPhase.SUCCEEDED, [2, 4, 6], ("export.export",), {}, ["base", "step-2", "step-4", "step-6", "export"]),
        (JobPhase.SUCCEEDED, [2, 4, 6], ("export.export",), {"export": False}, ["base", "step-2", "step-4", "step-6"]),
        (JobPhase.FAILED, [2], ("export.export",), {}, ["base", "step-2"]),  # its checkpoints, never an export
        (JobPhase.CANCELLED, [], (), {}, []),  # ended with nothing to compare a base with
    ],
)
def test_the_eval_jobs_a_job_wants(phase, checkpoints, artifacts, attached, labels) -> None:
    assert [w.label for w in wanted_evals(_record(phase, checkpoints, artifacts=artifacts, **attached))] == labels


def test_a_job_without_eval_wants_none() -> None:
    record = _record(JobPhase.RUNNING, [2])
    assert wanted_evals(JobRecord(**{**record.__dict__, "spec": record_spec(grpo=GRPO)})) == []


@pytest.mark.parametrize(
    "extra, loc, says",
    [
        (
            {"grpo": {**GRPO, "checkpoint_period": 7}},
            ("body", "grpo", "checkpoint_period"),
            "checkpoint_period 7 above the job's 6 train steps",
        ),
        ({"export": {"enabled": False}}, ("body", "eval", "export"), "export.enabled is false"),
    ],
)
def test_evaluations_that_could_never_be_made_are_refused_at_submit(service: JobService, tmp_path: Path, extra, loc, says) -> None:
    body = {**spec_body(tmp_path, name="trained", grpo=GRPO, eval=ATTACHED), **extra}
    with pytest.raises(InvalidRequest) as refused:
        service.submit(TEAM_A, JobSpec.model_validate(body))
    assert refused.value.loc == loc and says in str(refused.value)


# ---- made once each, by the leader, again after a restart ---------------------------------------------------


def test_each_eval_job_is_made_once_as_its_checkpoint_appears(
    service: JobService, ports: JobPorts, clock: ManualClock, store: SqlJobStore, trainer: Trainer, tmp_path: Path
) -> None:
    parent, _ = service.submit(TEAM_A, _spec(tmp_path))
    assert parent.labels == {"rljob.dev/attached-evals": "true"}
    reconciler = _reconciler(service, ports, clock)
    reconciler.reconcile_once()
    base = _attached(store, parent.id)["base"]
    assert base.idempotency_key == f"attached-eval:{parent.id}:base" and base.team == "team-a"
    assert base.labels[EVAL_OF_LABEL] == parent.id and base.spec.evaluation is not None
    assert base.spec.evaluation.checkpoint.job_id == parent.id and base.spec.hardware.accelerator == "cpu"
    assert base.spec.evaluation.suite.name == "arith" and base.phase is JobPhase.LAUNCHING  # handed to the launcher

    trainer.end(parent.id, ObservedState.RUNNING)
    trainer.checkpoint(parent, 2)
    reconciler.reconcile_once()
    step2 = _attached(store, parent.id)["step-2"]
    assert (
        step2.spec.evaluation is not None and step2.spec.evaluation.checkpoint.params == f"{parent.layout.actor_checkpoints}/2/model_params"
    )
    assert step2.spec.evaluation.baseline == base.id  # compared with the base eval

    jobs = _all_jobs(store)
    for _ in range(3):
        reconciler.reconcile_once()
        _reconciler(service, ports, clock).reconcile_once()  # another round, and another process's first one
    assert _all_jobs(store) == jobs

    trainer.checkpoint(parent, 4)
    trainer.send(ArtifactWritten, parent.id, name="export.export", uri=RunLayout(parent.spec.output, parent.id).export_dir)
    trainer.end(parent.id, ObservedState.SUCCEEDED)
    reconciler.reconcile_once()
    attached = _attached(store, parent.id)
    assert sorted(attached) == ["base", "export", "step-2", "step-4"]
    assert attached["export"].spec.evaluation.checkpoint.format == "huggingface"  # type: ignore[union-attr]
    assert attached["export"].spec.model.source == parent.layout.export_dir
    assert _all_jobs(store) == jobs + 2


def test_a_restarted_service_makes_the_eval_jobs_of_a_job_that_ended_meanwhile(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    first = _service(_ports(store, fake_launcher, fake_progress), clock)
    trainer = Trainer(first, fake_progress, clock)
    parent, _ = first.submit(TEAM_A, _spec(tmp_path))
    trainer.end(parent.id, ObservedState.RUNNING)
    for step in (2, 4, 6):
        trainer.checkpoint(parent, step)
    trainer.send(ArtifactWritten, parent.id, name="export.export", uri=parent.layout.export_dir)
    trainer.end(parent.id, ObservedState.SUCCEEDED)  # ended before any reconcile ran: a crash, say
    assert _attached(store, parent.id) == {}

    restarted_ports = _ports(store, FakeLauncher(), FakeProgress())
    restarted = _service(restarted_ports, clock)
    reconciler = _reconciler(restarted, restarted_ports, clock, sweep_page=1)  # a page a round: older ended jobs come in later rounds
    other, _ = restarted.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path, name="other", grpo=GRPO, eval=ATTACHED)))
    restarted.apply_observation(restarted.launcher.set(other.id, ObservedState.FAILED))  # type: ignore[attr-defined]
    reconciler.reconcile_once()
    reconciler.reconcile_once()
    assert sorted(_attached(store, parent.id)) == ["base", "export", "step-2", "step-4", "step-6"]
    assert _attached(store, other.id) == {}  # it ended before any checkpoint: nothing to compare a base with


def test_a_replica_that_does_not_lead_makes_none(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    follower_ports = _ports(store, fake_launcher, fake_progress)
    follower = _service(follower_ports, clock, leads=False)
    parent, _ = follower.submit(TEAM_A, _spec(tmp_path))
    reconciler = _reconciler(follower, follower_ports, clock)
    reconciler.reconcile_once()
    reconciler.reconcile_job(parent.id)
    assert _attached(store, parent.id) == {} and _all_jobs(store) == 1


# ---- the job's view -------------------------------------------------------------------------------------------


def test_the_job_shows_each_eval_with_its_interval_and_the_difference_from_the_base(
    service: JobService,
    ports: JobPorts,
    store: SqlJobStore,
    trainer: Trainer,
    tmp_path: Path,
    clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parent, _ = service.submit(TEAM_A, _spec(tmp_path, export=False))
    reconciler = _reconciler(service, ports, clock)
    reconciler.reconcile_once()
    trainer.end(parent.id, ObservedState.RUNNING)
    trainer.checkpoint(parent, 2)
    reconciler.reconcile_once()
    attached = _attached(store, parent.id)
    view = to_public(store.get(parent.id), clock())  # type: ignore[arg-type]
    assert [(e.label, e.eval_id, e.phase) for e in view.attached_evals] == [
        ("base", attached["base"].id, JobPhase.LAUNCHING),
        ("step-2", attached["step-2"].id, JobPhase.LAUNCHING),
    ]
    base_rows = [1, 0, 0, 0, 1, 0, 0, 0]
    trained_rows = [1, 1, 1, 0, 1, 1, 0, 0]  # 3 rows gained, none lost
    trainer.eval_done(attached["base"], base_rows)
    trainer.eval_done(attached["step-2"], trained_rows)
    reconciler.reconcile_once()
    base, step2 = to_public(store.get(parent.id), clock() + timedelta(seconds=1)).attached_evals  # type: ignore[arg-type]
    assert base.phase is JobPhase.SUCCEEDED and base.vs_base is None and base.function == FUNCTION
    assert base.scores is not None and base.scores.pass_at_1.value == pytest.approx(2 / 8)
    assert step2.scores is not None and step2.scores.pass_at_1.value == pytest.approx(5 / 8)
    low, high = step2.scores.pass_at_1.ci95
    assert low < 5 / 8 < high and step2.suite_version == 1
    assert step2.vs_base is not None
    pass1 = next(s for s in step2.vs_base.scores if s.score == "pass@1")
    assert pass1.difference == pytest.approx(3 / 8) and (pass1.a_only, pass1.b_only) == (3, 0)
    assert pass1.mcnemar_p == pytest.approx(0.25)  # exact two-sided: 2 * 0.5**3
    assert pass1.ci95[0] <= 3 / 8 <= pass1.ci95[1]
    # `rljob status` prints each with its interval and the difference from the base.
    print_job(to_public(store.get(parent.id), clock()))  # type: ignore[arg-type]
    text = " ".join(capsys.readouterr().out.split())
    assert f"eval job base {base.eval_id} SUCCEEDED, pass@1 25% [" in text
    assert f"eval job step-2 {step2.eval_id} SUCCEEDED, pass@1 63% [" in text
    assert "+38 points [" in text and "] vs base, McNemar p=0.25" in text
    # Stored on the job (a read shows it without reading anything else), and settled: another round changes nothing.
    seq = store.get(parent.id).last_event_seq  # type: ignore[union-attr]
    reconciler.reconcile_once()
    assert store.get(parent.id).last_event_seq == seq  # type: ignore[union-attr]
