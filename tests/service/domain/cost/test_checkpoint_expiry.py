"""Checkpoint retention of finished runs: the policy (checkpoint_retention.py, pure), the spec's override and its hash,
and the leader's expiry (checkpoint_expiry.py) with the real local deleter (checkpoint_deleter.py) on real files:
exactly the expired intermediate checkpoints go, a pass killed midway is finished by the next, a link is unlinked and
never followed, a run directory outside the team's locations is refused. The same on fake-gcs-server:
tests/storage/test_checkpoint_expiry_gcs.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.adapters import checkpoint_deleter
from service.adapters.checkpoint_deleter import RunCheckpointStore
from service.domain.cost.checkpoint_retention import expiry_due_at, plan_retention, steps_in_use
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, summarize_usage
from service.domain.location_policy import LocationPolicy
from service.domain.records.phases import JobPhase
from service.domain.views import to_public
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
from tests.service.service_helpers import T0, ManualClock, record_spec
from trainer.contract import JobSpec
from trainer.contract.run.best_checkpoint import record_for
from trainer.contract.run.evaluation import EvalSummary

CHECKPOINT_BYTES = len(CHECKPOINT_FILES) * FILE_BYTES


# ---- the policy -------------------------------------------------------------------------------------


def test_the_final_the_exported_and_those_in_use_are_kept_the_other_intermediate_ones_expire(tmp_path: Path) -> None:
    store, _ = expiry_service(tmp_path / "db", ManualClock())
    job = finished_job(store, "rl-000000000001", str(tmp_path / "runs"), [10], finished_at=T0)
    actor = job.layout.actor_checkpoints
    reader = finished_job(
        store,
        "rl-000000000002",
        str(tmp_path / "runs"),
        [1],
        finished_at=None,
        phase=JobPhase.RUNNING,
        evaluation={
            "suite": {"name": "arith"},
            "checkpoint": {"format": "maxtext", "params": f"{actor}/30/model_params", "job_id": job.id, "label": "step-30"},
        },
    )
    plan = plan_retention(
        job,
        [50, 10, 20, 30, 40],
        referenced={"exported": f"{actor}/20/model_params", "best record": f"{job.layout.best_checkpoints}/40/model_params"},
        in_use=steps_in_use(job, [reader]),
    )
    assert plan.expiring == [10, 40]
    assert [(k.step, k.why) for k in plan.kept] == [(20, "exported"), (30, f"in use by {reader.id}"), (50, "final")]
    assert plan_retention(job, []).expiring == []
    assert plan_retention(job, [7]).expiring == []  # one checkpoint is the final one


def test_checkpoints_expire_days_after_the_end_and_the_spec_overrides_the_setting(tmp_path: Path) -> None:
    store, _ = expiry_service(tmp_path / "db", ManualClock())
    runs = str(tmp_path / "runs")
    ended = finished_job(store, "rl-000000000001", runs, [1], finished_at=T0)
    assert expiry_due_at(ended, 30) == T0 + 30 * DAY
    assert expiry_due_at(ended, 0) is None  # the setting's 0: never
    short = finished_job(store, "rl-000000000002", runs, [1], finished_at=T0, retention={"intermediate_checkpoint_days": 2})
    assert expiry_due_at(short, 30) == T0 + 2 * DAY
    assert expiry_due_at(short, 0) == T0 + 2 * DAY  # a job's own days win over a service that keeps forever
    forever = finished_job(store, "rl-000000000003", runs, [1], finished_at=T0, retention={"intermediate_checkpoint_days": 0})
    assert expiry_due_at(forever, 30) is None
    running = finished_job(store, "rl-000000000004", runs, [1], finished_at=None, phase=JobPhase.RUNNING)
    assert expiry_due_at(running, 30) is None


def test_a_spec_without_retention_keeps_its_hash_and_the_override_is_bounded() -> None:
    spec = record_spec()
    assert "retention" not in spec.canonical_json()  # every spec stored before retention keeps its content hash
    with_days = record_spec(retention={"intermediate_checkpoint_days": 7})
    assert with_days.content_hash() != spec.content_hash()
    for bad in (-1, 3651):
        with pytest.raises(ValueError, match="intermediate_checkpoint_days"):
            JobSpec.model_validate({**spec.model_dump(), "retention": {"intermediate_checkpoint_days": bad}})


# ---- the leader's expiry on real files ------------------------------------------------------------------


def test_expiry_deletes_exactly_the_expired_intermediate_checkpoints_and_records_each(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    runs = str(tmp_path / "runs")
    old = finished_job(store, "rl-000000000001", runs, [10, 20, 30], finished_at=T0)
    young = finished_job(store, "rl-000000000002", runs, [10, 20], finished_at=T0 + 20 * DAY)
    running = finished_job(store, "rl-000000000003", runs, [10, 20], finished_at=None, phase=JobPhase.RUNNING)
    best = finished_job(store, "rl-000000000004", runs, [10, 20, 30], finished_at=T0, retention={"intermediate_checkpoint_days": 1})
    for job, steps in ((old, [10, 20, 30]), (young, [10, 20]), (running, [10, 20]), (best, [10, 20, 30])):
        write_run(job.layout, steps, best_step=10 if job is best else None)
    before = {job.id: files_under(job.layout.root) for job in (old, young, running, best)}

    expiry_round(store, jobs, RunCheckpointStore(), clock).reconcile_once()

    for job in (old, best):
        gone = {f for f in before[job.id] if f.startswith((f"rl/{job.id}/checkpoints/actor/10/", f"rl/{job.id}/checkpoints/actor/20/"))}
        assert len(gone) == 2 * len(CHECKPOINT_FILES)
        assert files_under(job.layout.root) == before[job.id] - gone  # final, best, export, converted, logs: all kept
        assert not Path(job.layout.actor_checkpoints, "10").exists() and Path(job.layout.actor_checkpoints, "30").is_dir()
        record = store.get(job.id)
        assert record is not None and record.checkpoint_expiry is not None
        assert [c.step for c in record.checkpoint_expiry.deleted] == [10, 20] and record.checkpoint_expiry.finished_at == clock.now
        assert record.checkpoint_expiry.freed_bytes == 2 * CHECKPOINT_BYTES
        # The export of `best` was made from checkpoints/best/10, which no plan names.
        assert [k.why for k in record.checkpoint_expiry.kept] == ["final" if job is best else "final, exported"]
        assert record.report.storage is not None and record.report.storage.parts["checkpoints"] == CHECKPOINT_BYTES
        shown = to_public(record, clock.now)
        assert shown.checkpoint_expiry == record.checkpoint_expiry and shown.storage == record.report.storage
        kinds = [e.kind for e in store.events_after(0, job_id=job.id)]
        assert kinds == ["checkpoint_expiry", "checkpoint_deleted", "storage", "checkpoint_deleted", "storage", "checkpoint_expiry"]
    assert (tmp_path / "runs" / best.id / "rl" / best.id / "checkpoints" / "best" / "10" / "model_params" / "array.0").is_file()
    for job in (young, running):  # too young, not ended: untouched and unrecorded
        assert files_under(job.layout.root) == before[job.id]
        record = store.get(job.id)
        assert record is not None and record.checkpoint_expiry is None

    # Usage: the deleted bytes are GiB-months saved from the deletion to the report's end (10 days on).
    records = [r for r in (store.get(old.id),) if r is not None]
    total, _, rows = summarize_usage(records, clock.now + 10 * DAY, DEFAULT_PRICES_USD_PER_CHIP_HOUR, since=T0, storage_price=0.02)
    expected = 2 * CHECKPOINT_BYTES * (10 / 30) / 2**30
    assert rows[0].storage.freed_bytes == 2 * CHECKPOINT_BYTES
    assert rows[0].storage.gib_months_saved == pytest.approx(expected, abs=1e-6)
    assert total.storage_gib_months_saved == rows[0].storage.gib_months_saved


def test_a_best_record_under_the_actor_directory_keeps_its_step_from_expiry(tmp_path: Path) -> None:
    """The best weights' record (best-checkpoint.json, as trainer/contract/run/best_checkpoint.py writes it) may point into
    `checkpoints/actor/<step>/` rather than `checkpoints/best/`: that step is kept, with its files, as the best record,
    while an intermediate step nothing points at expires."""
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    job = finished_job(store, "rl-000000000001", str(tmp_path / "runs"), [10, 20, 30], finished_at=T0)
    write_run(job.layout, [10, 20, 30])  # exported from the last, 30
    actor = job.layout.actor_checkpoints
    summary = EvalSummary(
        label="step-20", step=20, n=4, correct=3, format_correct=4, partial_correct=3, samples_per_row=1, sampling="greedy", rows_file="e"
    )
    best = record_for(summary, 20, f"{actor}/20/model_params")
    Path(job.layout.best_checkpoint_record).write_text(best.model_dump_json())
    before = files_under(job.layout.root)

    expiry_round(store, jobs, RunCheckpointStore(), clock).reconcile_once()

    record = store.get(job.id)
    assert record is not None and record.checkpoint_expiry is not None and record.checkpoint_expiry.finished_at is not None
    assert [(k.step, k.why) for k in record.checkpoint_expiry.kept] == [(20, "best record"), (30, "final, exported")]
    assert [c.step for c in record.checkpoint_expiry.deleted] == [10]
    gone = {f for f in before if f.startswith(f"rl/{job.id}/checkpoints/actor/10/")}
    assert len(gone) == len(CHECKPOINT_FILES) and files_under(job.layout.root) == before - gone  # step 20's files all there
    assert sorted(os.listdir(actor)) == ["20", "30"]


def test_a_pass_killed_midway_is_finished_by_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    job = finished_job(store, "rl-000000000001", str(tmp_path / "runs"), [10, 20, 30], finished_at=T0)
    write_run(job.layout, [10, 20, 30])
    before = files_under(job.layout.root)
    unlink = os.unlink
    calls = []

    def killed_after_three(*args: object, **kw: object) -> None:  # the leader dies after its third file
        if len(calls) == 3:
            raise SystemExit("killed")
        calls.append(args)
        unlink(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(checkpoint_deleter.os, "unlink", killed_after_three)
    with pytest.raises(SystemExit):
        expiry_round(store, jobs, RunCheckpointStore(), clock).expire(job.id)
    monkeypatch.setattr(checkpoint_deleter.os, "unlink", unlink)
    half = store.get(job.id)
    assert half is not None and half.checkpoint_expiry is not None
    assert [c.step for c in half.checkpoint_expiry.planned] == [10, 20] and half.checkpoint_expiry.deleted == []
    assert len(before - files_under(job.layout.root)) == 3  # step 10 half deleted, unrecorded

    expiry_round(store, jobs, RunCheckpointStore(), clock).reconcile_once()  # a new leader's first pass

    done = store.get(job.id)
    assert done is not None and done.checkpoint_expiry is not None and done.checkpoint_expiry.finished_at is not None
    assert done.checkpoint_expiry.freed_bytes == 2 * CHECKPOINT_BYTES  # the plan's sizes: the half counted whole
    assert sorted(os.listdir(job.layout.actor_checkpoints)) == ["30"]
    assert [e.kind for e in store.events_after(0, job_id=job.id)].count("checkpoint_deleted") == 2


def test_a_link_inside_a_checkpoint_is_unlinked_and_its_target_survives(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 31 * DAY)
    store, jobs = expiry_service(tmp_path / "db", clock)
    job = finished_job(store, "rl-000000000001", str(tmp_path / "runs"), [10, 20], finished_at=T0)
    write_run(job.layout, [10, 20])
    outside = tmp_path / "precious"
    (outside / "dir").mkdir(parents=True)
    (outside / "file").write_text("keep me")
    (outside / "dir" / "inner").write_text("keep me too")
    expired = Path(job.layout.actor_checkpoints, "10")
    (expired / "to-file").symlink_to(outside / "file")
    (expired / "model_params" / "to-dir").symlink_to(outside / "dir", target_is_directory=True)

    expiry_round(store, jobs, RunCheckpointStore(), clock).reconcile_once()

    assert (outside / "file").read_text() == "keep me" and (outside / "dir" / "inner").read_text() == "keep me too"
    assert not os.path.lexists(expired)  # the links went with the checkpoint


@pytest.mark.parametrize("where", ["outside", "linked"])
def test_a_run_directory_outside_the_teams_locations_is_refused(tmp_path: Path, where: str) -> None:
    allowed, other = tmp_path / "team-a", tmp_path / "elsewhere"
    allowed.mkdir()
    other.mkdir()
    output = other / "runs"
    if where == "linked":  # under the team's root as written, a link out of it resolved
        (allowed / "runs").symlink_to(other / "runs-real", target_is_directory=True)
        (other / "runs-real").mkdir()
        output = allowed / "runs"
    clock = ManualClock(T0 + 31 * DAY)
    policy = LocationPolicy(team_prefixes={"team-a": (str(allowed),)})
    store, jobs = expiry_service(tmp_path / "db", clock, location_policy=policy)
    job = finished_job(store, "rl-000000000001", str(output), [10, 20], finished_at=T0)
    write_run(job.layout, [10, 20])
    before = files_under(job.layout.root)

    expiry_round(store, jobs, RunCheckpointStore(), clock, location_policy=policy).reconcile_once()

    assert files_under(job.layout.root) == before
    record = store.get(job.id)
    assert record is not None and record.checkpoint_expiry is not None
    assert record.checkpoint_expiry.refused is not None and "outside the team's locations" in record.checkpoint_expiry.refused
    assert record.checkpoint_expiry.deleted == []
