"""A large manifest is parsed in a process of its own, answers what a parse in the service answers, and a worker that
dies or hangs is replaced without failing the job's end.

Why a process: json.loads of a near-bound manifest holds the interpreter lock for about half a second, and every other
team's request waits through it (bench/control_plane/hostile_load.py measures the other team's latency in the cases that end a job
with such a manifest). The test that the parse runs elsewhere breaks json.loads in this process: a parse here fails. That one holds the
worker alone, at a bound of its own; the service's own path (StoreRunFiles as the runtime builds it, at its default
bound) is held by the pid of the process that parsed the manifest.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import service.adapters.manifest_worker as manifest_worker_module
from service.adapters.manifest_worker import INLINE_PARSE_BYTES, ManifestWorker, manifest_sizes_of
from service.adapters.run_files import StoreRunFiles
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import Artifact
from service.runtime import RuntimeOverrides, build_runtime
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, record_spec

pytestmark = pytest.mark.timeout(120)

JOB = "rl-manifestwork1"
ROOT = "/runs/rl-manifestwork1"
ARTIFACTS = {"ckpt": f"{ROOT}/ckpt", "hf": f"{ROOT}/export/model.safetensors", "none": f"{ROOT}/absent"}


def _manifest(files: int) -> bytes:
    entries = [{"path": f"ckpt/{i}", "uri": f"{ROOT}/ckpt/{i}", "size_bytes": i, "checksum": "md5:00"} for i in range(files)]
    entries.append({"path": "export/model.safetensors", "uri": f"{ROOT}/export/model.safetensors", "size_bytes": 7, "checksum": "md5:ab"})
    return json.dumps(
        {
            "job_id": JOB,
            "run_uri": ROOT,
            "total_bytes": 1,
            "file_count": files + 1,
            "artifacts": entries,
            "references": {"converted": "/cache/x"},
        }
    ).encode()


@pytest.fixture
def worker():
    w = ManifestWorker(inline_bytes=1024)
    yield w
    w.close()


def test_a_large_manifest_is_parsed_in_another_process_and_sized_as_here(worker, monkeypatch) -> None:
    data = _manifest(20_000)
    here = manifest_sizes_of(data, JOB, ARTIFACTS)
    assert isinstance(here, ManifestSizes)
    assert here.sized["ckpt"] == {"size_bytes": sum(range(20_000)), "file_count": 20_000}
    assert here.sized["hf"] == {"size_bytes": 7, "file_count": 1, "checksum": "md5:ab"} and "none" not in here.sized

    def no_parse_here(*args, **kwargs):
        raise ValueError("parsed in the service's own process")

    monkeypatch.setattr(manifest_worker_module.json, "loads", no_parse_here)
    assert worker.sizes(data, JOB, ARTIFACTS) == here  # the worker's json is its own: the patch is not there
    assert worker.sizes(b'{"job_id": "x"}', JOB, ARTIFACTS) == "not JSON: parsed in the service's own process"  # small: here


def test_another_jobs_or_a_broken_manifest_is_a_reason_not_sizes(worker) -> None:
    assert worker.sizes(_manifest(100).replace(JOB.encode(), b"rl-otherjob00"), JOB, ARTIFACTS) == "not this job's manifest"
    assert worker.sizes(b"[" * 5000 + b"]" * 4999, JOB, ARTIFACTS).startswith("not JSON")


def _die(*args: object) -> None:
    os._exit(9)  # as the OOM killer leaves it


def _hang(*args: object) -> None:
    time.sleep(600)


@pytest.mark.parametrize(("task", "timeout_s", "said"), [(_die, 60.0, "died"), (_hang, 2.0, "took longer than 2 s")])
def test_a_worker_that_dies_or_hangs_is_replaced(worker, monkeypatch, task, timeout_s, said) -> None:
    data = _manifest(2_000)
    worker.timeout_s = timeout_s
    monkeypatch.setattr(manifest_worker_module, "manifest_sizes_of", task)  # what the next submit sends
    assert worker.sizes(data, JOB, ARTIFACTS) == f"the manifest worker {said}"
    monkeypatch.undo()
    # The short limit was the hanging call's: a fresh worker's first call spawns its process (about 1 s, more than 2 s
    # on a loaded machine), so it gets the service's own limit, which only a stuck worker reaches.
    worker.timeout_s = manifest_worker_module.WORKER_TIMEOUT_S
    answer = worker.sizes(data, JOB, ARTIFACTS)  # a fresh worker
    assert isinstance(answer, ManifestSizes) and answer.sized["ckpt"]["file_count"] == 2_000


PARSE_PIDS = "RLJOB_TEST_MANIFEST_PARSE_PIDS"  # a file each parse appends its process's pid to (the worker inherits it)


def _sizes_noting_the_pid(data: bytes, job_id: str, artifact_uris: dict[str, str]) -> object:
    with open(os.environ[PARSE_PIDS], "a") as f:
        f.write(f"{os.getpid()}\n")
    return manifest_sizes_of(data, job_id, artifact_uris)


def test_the_services_run_files_parse_a_large_manifest_in_another_process_and_a_small_one_here(
    settings_factory, tmp_path, monkeypatch
) -> None:
    """Through the run files build_runtime gives the job service (what it reads a job's end with), at their own
    bound: a 3.4 MB manifest (20,000 files; about 30 ms of the interpreter lock parsed here) is parsed by a process
    that is not this one, a 2 KB one by this one."""
    pids = tmp_path / "parse-pids"
    monkeypatch.setenv(PARSE_PIDS, str(pids))
    monkeypatch.setattr(manifest_worker_module, "manifest_sizes_of", _sizes_noting_the_pid)
    record = JobRecord(
        id=JOB,
        team="team-a",
        name="n",
        spec=record_spec(str(tmp_path / "runs")),
        spec_hash="h",
        phase=JobPhase.RUNNING,
        created_at=T0,
        updated_at=T0,
    )
    root = record.layout.root
    record.report.artifacts["ckpt"] = Artifact(name="ckpt", uri=f"{root}/ckpt")
    manifest = Path(record.layout.manifest)
    manifest.parent.mkdir(parents=True)
    runtime = build_runtime(settings_factory(), RuntimeOverrides(launcher=FakeLauncher(), progress=FakeProgress()))
    run_files = runtime.jobs.run_files
    assert isinstance(run_files, StoreRunFiles)
    try:
        for files, parsed_here in ((20_000, False), (10, True)):
            manifest.write_bytes(_manifest(files).replace(ROOT.encode(), root.encode()))
            if parsed_here:
                assert manifest.stat().st_size <= INLINE_PARSE_BYTES
            pids.unlink(missing_ok=True)
            answer = run_files.read_manifest(record)
            assert isinstance(answer, ManifestSizes) and answer.sized["ckpt"]["file_count"] == files, answer
            parsed_by = [int(line) for line in pids.read_text().split()] if pids.exists() else []
            assert len(parsed_by) == 1, f"{files} files: parsed by {parsed_by}"
            assert (parsed_by[0] == os.getpid()) is parsed_here, f"{files} files: parsed by {parsed_by[0]}, this process is {os.getpid()}"
    finally:
        run_files.manifest_worker.close()
        runtime.store.close()  # type: ignore[attr-defined]
