"""Finished runs with actor checkpoints, written through a store (local or gs://), and a JobService and the leader's
expiry round to expire them: what tests/service/domain/cost/test_checkpoint_expiry.py,
tests/service/domain/rounds/test_checkpoint_expiry_backoff.py and tests/storage/test_checkpoint_expiry_gcs.py share."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.location_policy import UNRESTRICTED, LocationPolicy
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.rounds.checkpoint_expiry import CheckpointExpiryReconciler, CheckpointStore
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, record_spec
from trainer.contract import RunLayout, RunStorage, Stage
from trainer.storage import store_for

DAY = timedelta(days=1)
CHECKPOINT_FILES = ("model_params/_METADATA", "model_params/array.0", "model_params/d/array.1", "_CHECKPOINT_METADATA")
FILE_BYTES = 1000  # each checkpoint file: a checkpoint is 4000 bytes


def write_run(layout: RunLayout, steps: list[int], *, best_step: int | None = None) -> None:
    """A finished run's directory: actor checkpoints at `steps`, a best checkpoint, the export (made from the last step
    or the best), the converted checkpoint, logs, samples, the stage markers."""
    store = store_for(layout.root)
    for step in steps:
        for name in CHECKPOINT_FILES:
            store.write_bytes(f"{layout.actor_checkpoints}/{step}/{name}", b"c" * FILE_BYTES)
    params = f"{layout.actor_checkpoints}/{max(steps)}/model_params"
    if best_step is not None:
        params = f"{layout.best_checkpoints}/{best_step}/model_params"
        store.write_bytes(f"{params}/array.0", b"b" * FILE_BYTES)
        best = {
            "step": best_step,
            "label": f"step-{best_step}",
            "n": 4,
            "correct": 3,
            "accuracy": 0.75,
            "ci95": [0.3, 0.95],
            "params": params,
        }
        store.write_bytes(layout.best_checkpoint_record, json.dumps(best).encode())
    exported = {"asked": "best" if best_step is not None else "last", "exported": "last", "step": max(steps), "params": params}
    store.write_bytes(layout.stage_marker(Stage.EXPORT), json.dumps({"outputs": {"exported_checkpoint": exported}}).encode())
    for uri in (f"{layout.export_dir}/model.safetensors", f"{layout.converted_dir}/0/items/array", layout.stage_log(Stage.TRAIN)):
        store.write_bytes(uri, b"k" * FILE_BYTES)
    store.write_bytes(f"{layout.tensorboard_dir}/events.out", b"t" * 10)
    store.write_bytes(layout.events, b"{}\n")


def run_storage(steps: list[int]) -> RunStorage:
    """The trainer's measurement at the export's end: what JobPublic.storage showed before any expiry."""
    checkpoints = len(steps) * len(CHECKPOINT_FILES) * FILE_BYTES
    parts = {"checkpoints": checkpoints, "converted": FILE_BYTES, "export": FILE_BYTES, "logs": FILE_BYTES + 13, "other": 200}
    return RunStorage(total_bytes=sum(parts.values()), parts=parts, files=len(steps) * len(CHECKPOINT_FILES) + 6)


def finished_job(
    store: SqlJobStore,
    job_id: str,
    output: str,
    steps: list[int],
    *,
    finished_at: datetime | None,
    phase: JobPhase = JobPhase.SUCCEEDED,
    **spec: object,
) -> JobRecord:
    record = JobRecord(
        id=job_id,
        team="team-a",
        name="n",
        spec=record_spec(output, **spec),
        spec_hash="x",
        phase=phase,
        created_at=T0,
        updated_at=T0,
        finished_at=finished_at,
    )
    record.report.storage = run_storage(steps)
    with store.transaction() as tx:
        tx.insert(record)
    return record


def expiry_service(db: Path, clock: ManualClock, location_policy: LocationPolicy = UNRESTRICTED) -> tuple[SqlJobStore, JobService]:
    store = SqlJobStore(f"sqlite:///{db}")
    store.migrate()
    return store, JobService(JobPorts(store, FakeLauncher(), FakeProgress()), JobPolicies(location=location_policy), clock=clock)


def expiry_round(
    store: SqlJobStore,
    jobs: JobService,
    checkpoints: CheckpointStore,
    clock: ManualClock,
    *,
    location_policy: LocationPolicy = UNRESTRICTED,
) -> CheckpointExpiryReconciler:
    """The leader's expiry round over what `jobs` was built from (expiry_service's store, clock and location policy),
    with a retention of 30 days."""
    return CheckpointExpiryReconciler(jobs, store, checkpoints, clock=clock, location_policy=location_policy, default_days=30)


def files_under(root: str) -> set[str]:
    """Every file (object) under a run directory, relative to it; local links listed as files, never followed."""
    if root.startswith("gs://"):
        return {info.uri[len(root) + 1 :] for info in store_for(root).list(root)}
    found = set()
    for top, dirs, files in os.walk(root):  # followlinks=False: a link to a directory is listed, not entered
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            found.add(os.path.relpath(os.path.join(top, name), root))
    return found
