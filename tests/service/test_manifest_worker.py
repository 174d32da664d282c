"""A large manifest is parsed in a process of its own, answers what a parse in the service answers, and a worker that
dies or hangs is replaced without failing the job's end.

Why a process: json.loads of a near-bound manifest holds the interpreter lock for about half a second, and every other
team's request waits through it (bench/hostile_load.py measures the other team's latency in the cases that end a job
with such a manifest). The test that the parse runs elsewhere breaks json.loads in this process: a parse here fails.
"""

from __future__ import annotations

import json
import os
import time

import pytest

import service.adapters.manifest_worker as manifest_worker_module
from service.adapters.manifest_worker import ManifestWorker, manifest_sizes_of
from service.domain.manifest_sizes import ManifestSizes

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
    answer = worker.sizes(data, JOB, ARTIFACTS)  # a fresh worker
    assert isinstance(answer, ManifestSizes) and answer.sized["ckpt"]["file_count"] == 2_000
