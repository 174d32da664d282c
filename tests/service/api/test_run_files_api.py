"""What a job leaves in its run directory, served by the API: artifacts from the trainer's manifest
(sizes, checksums) and a finished job's stage logs once the launcher has none. Also who submitted
it (the token's name). Real app, real store, real files; fakes only at the launcher/progress ports."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from service.domain.progress import fold_manifest
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.records.run_report import Artifact, RunReport
from service.domain.tokens import TokenService
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, record_spec, spec_body, wait_for_phase
from trainer.contract import ArtifactWritten, RunFinished, RunLayout, Stage
from trainer.storage.local import file_md5
from trainer.storage.manifest import write_manifest


def _now() -> datetime:
    return datetime.now(UTC)


def _write_run(layout: RunLayout) -> None:
    """What the trainer leaves behind: an export directory, a stage log, and (last) its manifest."""
    export = Path(layout.export_dir)
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(b"w" * 1000)
    (export / "config.json").write_bytes(b"{}")
    (Path(layout.root) / "spec.json").write_text("{}")
    write_manifest(layout, references={"converted_checkpoint": "gs://cache/llama/abc"})


def _finish(api: Api, job_id: str, state: ObservedState = ObservedState.SUCCEEDED, **kw: object) -> dict:
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, state, **kw)
    final = JobPhase.SUCCEEDED if state is ObservedState.SUCCEEDED else JobPhase.FAILED
    wait_for_phase(lambda: api.phase(job_id), final)
    return api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()


def test_artifacts_come_from_the_manifest_with_sizes_and_checksums(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    api.progress.add(ArtifactWritten(seq=0, time=_now(), job_id=job_id, name="export.export", uri=layout.export_dir))
    api.progress.add(ArtifactWritten(seq=1, time=_now(), job_id=job_id, name="spec", uri=layout.spec, size_bytes=None))
    _write_run(layout)

    job = _finish(api, job_id)
    artifacts = {a["name"]: a for a in job["artifacts"]}
    assert artifacts["export.export"] == {
        "name": "export.export",
        "uri": layout.export_dir,
        "size_bytes": 1002,
        "file_count": 2,
        "checksum": None,
    }
    assert artifacts["spec"]["checksum"] == file_md5(Path(layout.spec)) and artifacts["spec"]["size_bytes"] == 2
    assert artifacts["reference.converted_checkpoint"]["uri"] == "gs://cache/llama/abc"
    manifest = json.loads(Path(layout.manifest).read_text())
    assert artifacts["run"] == {
        "name": "run",
        "uri": layout.root,
        "size_bytes": manifest["total_bytes"],
        "file_count": manifest["file_count"],
        "checksum": None,
    }
    # The artifacts were logged before the terminal phase, so a stream that ends there has them.
    kinds = [e.kind for e in api.store.events_after(0, job_id=job_id)]
    assert kinds.index("artifacts") < len(kinds) - 1 and kinds[-1] == "phase"


def test_without_a_manifest_the_events_are_the_artifacts(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    api.progress.add(ArtifactWritten(seq=0, time=_now(), job_id=job_id, name="hf", uri="gs://b/hf", size_bytes=42))
    job = _finish(api, job_id, ObservedState.FAILED, exit_code=70)
    assert job["artifacts"] == [
        {"name": "hf", "uri": "gs://b/hf", "size_bytes": 42, "file_count": None, "checksum": None},
    ]


def test_fold_manifest_leaves_unlisted_artifacts_alone() -> None:
    record = JobRecord(
        id="rl-000000000009",
        team="t",
        name="n",
        spec=record_spec(),
        spec_hash="",
        phase=JobPhase.RUNNING,
        created_at=_now(),
        updated_at=_now(),
        report=RunReport(artifacts={"ckpt": Artifact(name="ckpt", uri="gs://b/run/ckpt/", size_bytes=5)}),
    )
    data = fold_manifest(record, {"job_id": record.id, "artifacts": [{"uri": "gs://b/run/other", "size_bytes": 1}]})
    assert record.report.artifacts["ckpt"] == Artifact(name="ckpt", uri="gs://b/run/ckpt/", size_bytes=5)
    assert data == {"artifacts": [{"name": "ckpt", "uri": "gs://b/run/ckpt/", "size_bytes": 5}]}


def test_a_manifest_of_the_wrong_shape_leaves_the_artifacts_as_they_were() -> None:
    ckpt = Artifact(name="ckpt", uri="gs://b/run/ckpt", size_bytes=5)
    record = JobRecord(
        id="rl-000000000010",
        team="t",
        name="n",
        spec=record_spec(),
        spec_hash="",
        phase=JobPhase.RUNNING,
        created_at=_now(),
        updated_at=_now(),
        report=RunReport(artifacts={"ckpt": ckpt}),
    )
    not_ours = {
        "artifacts": [{"uri": "gs://b/run/ckpt", "size_bytes": {"many": 1}, "checksum": 5}],
        "references": {"cache": 7},
        "run_uri": ["gs://b/run"],
    }
    data = fold_manifest(record, not_ours)  # folded with the terminal phase: it must not raise
    assert record.report.artifacts == {"ckpt": ckpt} and data == {"artifacts": [ckpt.model_dump(exclude_unset=True)]}


def test_the_event_log_lists_what_the_trainer_said_and_the_manifest_added(api: Api, tmp_path: Path) -> None:
    """The entries' JSON (what SSE clients read) names only what is known, through a store round trip."""
    job_id = api.submit(spec_body(tmp_path))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    api.progress.add(ArtifactWritten(seq=0, time=_now(), job_id=job_id, name="export.export", uri=layout.export_dir))
    api.progress.add(
        RunFinished(seq=1, time=_now(), job_id=job_id, ok=False, exit_code=70, message="out of memory", failed_stage=Stage.EXPORT)
    )
    _write_run(layout)

    job = _finish(api, job_id, ObservedState.FAILED, exit_code=70)
    entries = {e.kind: e.data for e in api.store.events_after(0, job_id=job_id)}
    assert entries["artifact"] == {"name": "export.export", "uri": layout.export_dir, "size_bytes": None}
    assert entries["run_finished"] == {"ok": False, "exit_code": 70, "message": "out of memory", "failed_stage": "export"}
    manifest = json.loads(Path(layout.manifest).read_text())
    assert entries["artifacts"] == {
        "artifacts": [
            {"name": "export.export", "uri": layout.export_dir, "size_bytes": 1002, "file_count": 2},
            {"name": "reference.converted_checkpoint", "uri": "gs://cache/llama/abc"},
            {"name": "run", "uri": layout.root, "size_bytes": manifest["total_bytes"], "file_count": manifest["file_count"]},
        ]
    }
    assert job["failure"]["failed_stage"] == "export" and job["message"].startswith("export stage: out of memory; ")


def test_logs_fall_back_to_the_stage_logs_in_the_run_directory(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    for stage, text in ((Stage.CONVERT, "converted\n"), (Stage.TRAIN, "step 1\nstep 2\n")):
        Path(layout.stage_log(stage)).parent.mkdir(parents=True, exist_ok=True)
        Path(layout.stage_log(stage)).write_text(text)
    _finish(api, job_id)

    # The launcher has nothing (the pod is gone): the run directory answers.
    logs = api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_(TOKEN_A))
    assert logs.status_code == 200
    assert logs.text.splitlines() == [
        f"==> convert stage log ({layout.stage_log(Stage.CONVERT)}) <==",
        "converted",
        f"==> train stage log ({layout.stage_log(Stage.TRAIN)}) <==",
        "step 1",
        "step 2",
    ]
    tail = api.client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 1, "follow": True}, headers=api.as_(TOKEN_A))
    assert tail.text == "step 2\n"

    # While the launcher still has the workload's log, that is the answer, never mixed with the files.
    api.launcher.log_lines[job_id] = ["live line"]
    assert api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_(TOKEN_A)).text == "live line\n"


def test_a_failing_launcher_log_read_still_serves_the_stored_logs(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    log_uri = RunLayout(str(tmp_path / "runs"), job_id).stage_log(Stage.EXPORT)
    Path(log_uri).parent.mkdir(parents=True)
    Path(log_uri).write_text("exported\n")

    def broken(*args: object, **kwargs: object):
        raise ConnectionError("API server unreachable")
        yield  # a generator, like the real launchers' logs()

    api.launcher.logs = broken  # type: ignore[method-assign]
    assert api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_(TOKEN_A)).text.splitlines()[-1] == "exported"


def test_submitted_by_is_the_submitting_tokens_name(api: Api, tmp_path: Path) -> None:
    secret, record = TokenService(api.store).create("team-a", name="alice")
    job = api.submit(spec_body(tmp_path), token=secret)
    assert job["submitted_by"] == "alice"
    assert api.store.get(job["id"]).submitted_by == "alice"  # stored, not derived per request
    listed = api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["data"]
    assert [j["submitted_by"] for j in listed] == ["alice"]
    unnamed_secret, unnamed = TokenService(api.store).create("team-a")  # no --name: its id says who
    assert api.submit(spec_body(tmp_path, name="job-two"), token=unnamed_secret)["submitted_by"] == unnamed.id
