"""The service's reader of run directories (service/adapters/run_files.py) on gs://, against
fake-gcs-server: a finished job's manifest and stage logs, read after its pod is gone."""

from __future__ import annotations

from datetime import UTC, datetime

from service.adapters.run_files import StoreRunFiles
from service.domain.progress import fold_manifest
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import Artifact
from trainer.contract import JobSpec, RunLayout, Stage
from trainer.storage.manifest import write_manifest

JOB_ID = "rl-0000000000gs"


def _record(output: str) -> JobRecord:
    now = datetime.now(UTC)
    spec = JobSpec.model_validate(
        {"name": "n", "model": {"source": "/models/tiny"}, "hardware": {"accelerator": "cpu", "rollout_engine": "jax"}, "output": output}
    )
    return JobRecord(id=JOB_ID, team="t", name="n", spec=spec, spec_hash="", phase=JobPhase.RUNNING, created_at=now, updated_at=now)


def test_manifest_and_stage_logs_are_read_from_gcs(gcs, bucket):
    output = f"gs://{bucket}/rljob"
    layout = RunLayout(output, JOB_ID)
    gcs.write_bytes(f"{layout.export_dir}/model.safetensors", b"w" * 300)
    gcs.write_bytes(layout.stage_log(Stage.TRAIN), b"step 1\nstep 2\n")
    write_manifest(layout, store=gcs)
    record = _record(output)
    record.report.artifacts["export"] = Artifact(name="export", uri=layout.export_dir, size_bytes=None)

    files = StoreRunFiles()
    manifest = files.read_manifest(record)
    assert isinstance(manifest, ManifestSizes) and manifest.sized["export"]["file_count"] == 1  # this job's, sized
    fold_manifest(record, manifest)
    assert record.report.artifacts["export"].size_bytes == 300 and record.report.artifacts["export"].file_count == 1
    assert record.report.artifacts["run"].uri == layout.root

    assert list(files.stage_log_lines(record)) == [
        f"==> train stage log ({layout.stage_log(Stage.TRAIN)}) <==",
        "step 1",
        "step 2",
    ]


def test_a_missing_run_directory_reads_as_nothing(gcs, bucket):
    record = _record(f"gs://{bucket}/nothing-here")
    files = StoreRunFiles()
    assert files.read_manifest(record) is None
    assert list(files.stage_log_lines(record)) == []


def test_a_large_stage_log_on_gcs_is_read_as_a_ranged_tail(gcs, bucket, monkeypatch):
    """Only the bound is downloaded (a ranged read), never the whole object (service/adapters/run_reads.py)."""
    from service.adapters import run_files

    monkeypatch.setattr(run_files, "MAX_LOG_BYTES", 1024)
    output = f"gs://{bucket}/rljob"
    layout = RunLayout(output, JOB_ID)
    gcs.write_bytes(layout.stage_log(Stage.TRAIN), b"".join(b"line %06d\n" % i for i in range(10_000)))
    lines = list(StoreRunFiles().stage_log_lines(_record(output)))
    assert lines[0].endswith(", last 0 MiB) <==") and lines[-1] == "line 009999"
    assert 80 <= len(lines) - 1 <= 1024 // 11 and all(line.startswith("line ") for line in lines[1:])


def test_the_repro_record_is_written_and_read_on_gcs_with_the_inputs_hashed_there(gcs, bucket):
    """trainer/repro.py writes through the store like every run file; a gs:// file is hashed by its content, a gs://
    model directory by its listing's checksums; the service reads the record back through run_reads.py."""
    import hashlib

    from trainer.repro import write_repro

    output = f"gs://{bucket}/rljob"
    gcs.write_bytes(f"gs://{bucket}/data/train.jsonl", b'{"question": "1+1", "answer": "2"}\n')
    gcs.write_bytes(f"gs://{bucket}/model/config.json", b"{}")
    rewards = {"rewards/reward.py": b"from helpers import f\n", "rewards/helpers.py": b"def f(): ...\n", "rewards/notes.txt": b"x"}
    for name, body in rewards.items():
        gcs.write_bytes(f"gs://{bucket}/{name}", body)
    spec = JobSpec.model_validate(
        {
            "name": "n",
            "model": {"name": "llama3.1-8b", "source": f"gs://{bucket}/model"},
            "output": output,
            "dataset": {"train_files": [f"gs://{bucket}/data/train.jsonl"]},
            "grpo": {"num_test_batches": 0, "rewards": {"functions_path": f"gs://{bucket}/rewards/reward.py", "functions": ["f"]}},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        }
    )
    write_repro(spec, RunLayout(output, JOB_ID), {})
    record = _record(output)
    repro = StoreRunFiles().read_repro(record)
    assert repro is not None and repro.job_id == JOB_ID and repro.spec["output"] == output
    assert repro.data[0].sha256 == hashlib.sha256(b'{"question": "1+1", "answer": "2"}\n').hexdigest()
    assert repro.model.kind == "gcs" and repro.model.content is not None and repro.model.content.files == 1
    assert repro.model.content.sha256 is not None
    # the reward file and the Python beside it, read from the bucket (not the data file): as a local set is hashed
    lines = "".join(f"{name}\0sha256:{hashlib.sha256(rewards['rewards/' + name]).hexdigest()}\n" for name in ("helpers.py", "reward.py"))
    assert repro.reward_files is not None and repro.reward_files.files == 2
    assert repro.reward_files.sha256 == hashlib.sha256(lines.encode()).hexdigest()
