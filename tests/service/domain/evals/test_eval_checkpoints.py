"""Checkpoint references resolved against what the service knows of a job (hermetic: records built by hand, the run
directory on disk): step-N and last from the job's checkpoint events or train_rl's layout, best from its
best-checkpoint record, and a URI the job wrote outside its own run directory refused. And an eval's outcomes file
read back as untrusted input: a link, a bad line, a repeated row id or an over-long file is refused, not read."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters import eval_outcomes
from service.adapters.run_files import StoreRunFiles
from service.domain.evals.eval_jobs import EXPORT_ARTIFACT, resolve_checkpoint
from service.domain.records.errors import InvalidRequest, JobNotFound, RunFileRefused
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import Artifact
from tests.service.eval_runs import outcome_rows
from tests.service.service_helpers import record_spec
from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.best_checkpoint import BestCheckpoint

NOW = datetime(2026, 12, 4, tzinfo=UTC)
JOB = "rl-aaaaaaaaaaaa"


def _record(tmp_path: Path, spec: JobSpec | None = None, phase: JobPhase = JobPhase.RUNNING) -> JobRecord:
    spec = spec or record_spec(str(tmp_path / "runs"))
    return JobRecord(id=JOB, team="team-a", name="trained", spec=spec, spec_hash="h", phase=phase, created_at=NOW, updated_at=NOW)


def _resolve(text: str, record: JobRecord) -> tuple[str, str | None, str]:
    def find(job_id: str) -> JobRecord:
        if job_id != record.id:
            raise JobNotFound(job_id)
        return record

    found = resolve_checkpoint(text, find, StoreRunFiles())
    return found.checkpoint.format, found.checkpoint.params, found.checkpoint.label


def test_steps_and_last_come_from_the_checkpoint_events_or_the_layout(tmp_path: Path) -> None:
    record = _record(tmp_path)
    actor = RunLayout(record.spec.output, JOB).actor_checkpoints
    assert _resolve(f"{JOB}:step-7", record) == ("maxtext", f"{actor}/7/model_params", "step-7")  # no events: the layout
    record.report.checkpoints = {5: f"{actor}/5/model_params", 10: f"{actor}/10/model_params"}
    assert _resolve(f"{JOB}:last", record) == ("maxtext", f"{actor}/10/model_params", "last")
    assert _resolve(f"{JOB}:step-5", record) == ("maxtext", f"{actor}/5/model_params", "step-5")
    with pytest.raises(InvalidRequest, match="saved no actor checkpoint at step 7; its newest: 5, 10"):
        _resolve(f"{JOB}:step-7", record)
    record.report.checkpoints = {10: "/elsewhere/team-b/model_params"}
    with pytest.raises(InvalidRequest, match="outside its run directory"):
        _resolve(f"{JOB}:last", record)


def test_best_comes_from_the_jobs_best_checkpoint_record_within_its_run_directory(tmp_path: Path) -> None:
    record = _record(tmp_path)
    layout = record.layout
    Path(layout.root).mkdir(parents=True)
    best = f"{layout.best_checkpoints}/6/model_params"
    kept = BestCheckpoint(step=6, label="step-6", n=10, correct=7, accuracy=0.7, ci95=(0.4, 0.9), params=best)
    Path(layout.best_checkpoint_record).write_text(kept.model_dump_json())
    assert _resolve(f"{JOB}:best", record) == ("maxtext", best, "best")
    Path(layout.best_checkpoint_record).write_text(kept.model_copy(update={"params": "/other/run/model_params"}).model_dump_json())
    with pytest.raises(InvalidRequest, match="points outside its run directory"):
        _resolve(f"{JOB}:best", record)


def test_export_needs_a_succeeded_job_with_an_export_and_uses_its_own_layout(tmp_path: Path) -> None:
    record = _record(tmp_path, phase=JobPhase.SUCCEEDED)
    with pytest.raises(InvalidRequest, match="has no export yet"):
        _resolve(f"{JOB}:export", record)
    record.report.artifacts[EXPORT_ARTIFACT] = Artifact(name=EXPORT_ARTIFACT, uri="/anywhere/the/trainer/said")
    assert _resolve(f"{JOB}:export", record) == ("huggingface", None, "export")
    disabled = _record(tmp_path, record_spec(str(tmp_path / "runs"), export={"enabled": False}), JobPhase.SUCCEEDED)
    with pytest.raises(InvalidRequest, match="has export disabled"):
        _resolve(f"{JOB}:export", disabled)


def test_an_outcomes_file_is_read_as_untrusted_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path)
    outcomes = Path(record.layout.eval_outcomes)
    outcomes.parent.mkdir(parents=True)
    rows = outcome_rows([1, 0, 1])
    lines = [row.model_dump_json() for row in rows]
    files = StoreRunFiles()
    assert files.read_eval_outcomes(record) is None  # absent
    outcomes.write_text("\n".join(lines) + "\n")
    read = files.read_eval_outcomes(record)
    assert read is not None and [(r.id, r.functions) for r in read] == [(r.id, r.functions) for r in rows]
    assert all(r.question == "" and r.samples == [] for r in read)  # the texts are dropped

    for bad, why in (
        ([lines[0], "{not json", lines[2]], "line 2 of eval job rl-aaaaaaaaaaaa's outcomes is not a row outcome"),
        ([lines[0], lines[1], lines[0]], "line 3 .* repeats row id"),
    ):
        outcomes.write_text("\n".join(bad) + "\n")
        with pytest.raises(RunFileRefused, match=why):
            files.read_eval_outcomes(record)
    outcomes.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(eval_outcomes, "MAX_OUTCOMES_BYTES", len(lines[0]))
    with pytest.raises(RunFileRefused, match="are over 0 MiB: not read"):
        files.read_eval_outcomes(record)
    monkeypatch.undo()
    monkeypatch.setattr(eval_outcomes, "MAX_SUITE_ROWS", 2)
    with pytest.raises(RunFileRefused, match="more than 2 rows"):
        files.read_eval_outcomes(record)
    monkeypatch.undo()
    secret = tmp_path / "secret.jsonl"
    secret.write_text("\n".join(lines) + "\n")
    outcomes.unlink()
    os.symlink(secret, outcomes)
    with pytest.raises(RunFileRefused):
        files.read_eval_outcomes(record)
