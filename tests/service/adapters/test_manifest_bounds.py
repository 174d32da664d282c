"""A job's manifest.json is team-written input (issue 33): parsing it stays within the service's memory, a refused
one is recorded on the job, and folding it into the job's artifacts costs (artifacts + files) log files, not their
product. The planted files (links, FIFOs, /dev/zero, huge) are tests/service/adapters/test_run_dir_untrusted.py's."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.adapters.manifest_worker import MAX_MANIFEST_VALUES, manifest_values
from service.adapters.run_files import StoreRunFiles
from service.domain.progress import fold_manifest
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord, ManifestRefused
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.records.run_report import Artifact
from tests.service.conftest import Api
from tests.service.service_helpers import T0, TOKEN_A, record_spec, spec_body, wait_for_phase
from trainer.contract import RunLayout

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=',[]{}"\\:ab ', max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet=",[{ab", max_size=3), inner, max_size=4),
    max_leaves=30,
)


def _values(value: object) -> int:
    """The values json.loads makes for `value`, keys included."""
    if isinstance(value, dict):
        return 1 + len(value) + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_the_count_before_parsing_is_an_upper_bound_on_what_parsing_makes(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=1)):  # commas and brackets inside strings count too
        assert _values(json.loads(text)) <= manifest_values(text.encode())


def _record(api: Api, tmp_path: Path) -> tuple[str, RunLayout]:
    job_id = api.submit(spec_body(tmp_path, output=str(tmp_path / "runs")))["id"]
    return job_id, RunLayout(str(tmp_path / "runs"), job_id)


def _empty_objects_manifest(job_id: str, megabytes: int) -> bytes:
    """What crash-looped the service: within the byte bound, millions of empty objects."""
    count = megabytes * 1024 * 1024 // 3
    return b'{"job_id": "' + job_id.encode() + b'", "artifacts": [' + b"{}," * (count - 1) + b"{}]}"


def test_a_manifest_of_millions_of_empty_objects_is_refused_unparsed_within_bounded_memory(api: Api, tmp_path: Path) -> None:
    job_id, layout = _record(api, tmp_path)
    Path(layout.manifest).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.manifest).write_bytes(_empty_objects_manifest(job_id, 16))
    record = api.store.get(job_id)
    assert record is not None
    tracemalloc.start()
    try:
        answer = StoreRunFiles().read_manifest(record)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(answer, ManifestRefused) and f"over the {MAX_MANIFEST_VALUES}" in answer.reason, answer
    # The file's 16 MiB are read (the reader's copies of them make the peak about 64 MiB); parsing it makes 5.6 million
    # dicts: json.loads alone peaks at 404 MiB on it.
    assert peak < 100 * 1024 * 1024, peak


def test_a_real_sized_manifest_is_still_read(api: Api, tmp_path: Path) -> None:
    job_id, layout = _record(api, tmp_path)
    files = [
        {"path": f"rl/ckpt/{i}/d/{i}", "uri": f"{layout.root}/rl/ckpt/{i}/d/{i}", "size_bytes": i, "checksum": "md5:00"}
        for i in range(50_000)
    ]
    Path(layout.manifest).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.manifest).write_text(json.dumps({"job_id": job_id, "artifacts": files}, indent=1))
    record = api.store.get(job_id)
    assert record is not None
    record.report.artifacts["ckpt"] = Artifact(name="ckpt", uri=f"{layout.root}/rl/ckpt")
    answer = StoreRunFiles().read_manifest(record)  # 5 MiB: parsed in the manifest worker's process
    assert isinstance(answer, ManifestSizes), answer
    assert answer.sized["ckpt"] == {"size_bytes": sum(range(50_000)), "file_count": 50_000}


def test_the_jobs_end_records_a_refused_manifest_and_keeps_the_artifacts_its_events_named(api: Api, tmp_path: Path) -> None:
    job_id, layout = _record(api, tmp_path)
    Path(layout.manifest).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.manifest).write_bytes(_empty_objects_manifest(job_id, 8))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED, timeout_s=30)
    entries = [e.data for e in api.store.events_after(0, job_id=job_id) if e.kind == "artifacts"]
    assert len(entries) == 1 and "JSON values, over the" in entries[0]["manifest_refused"], entries
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["phase"] == "SUCCEEDED"


def _naive_fold(artifacts: dict[str, str], files: list[dict]) -> dict[str, tuple[int, int]]:
    """The definition: a file is the artifact itself, or inside it (its uri under the artifact's and a slash)."""
    out = {}
    for name, uri in artifacts.items():
        same = [f for f in files if f["uri"] == uri]
        inside = same or [f for f in files if f["uri"].startswith(uri + "/")]
        if inside:
            out[name] = (sum(f["size_bytes"] for f in inside), len(inside))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_folding_by_bisection_sizes_every_artifact_as_the_definition_does(seed: int) -> None:
    rng = random.Random(seed)
    parts = ["ckpt", "ckpt1", "ckpt-1", "1", "10", "a", "a.b", "hf"]  # prefixes of each other: the traps
    files = []
    for i in range(rng.randint(0, 60)):
        path = "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
        files.append({"uri": f"/r/{path}", "size_bytes": rng.randint(0, 9), "checksum": f"md5:{i}"})
    files = list({f["uri"]: f for f in files}.values())
    artifacts = {f"x{i}": "/r/" + "/".join(rng.choice(parts) for _ in range(rng.randint(1, 3))) for i in range(12)}
    record = JobRecord(
        id="rl-aaaaaaaaaaaa", team="a", name="n", spec=record_spec(), spec_hash="h", phase=JobPhase.RUNNING, created_at=T0, updated_at=T0
    )
    record.report.artifacts = {name: Artifact(name=name, uri=uri) for name, uri in artifacts.items()}
    fold_manifest(record, {"artifacts": files})
    folded = {n: (a.size_bytes, a.file_count) for n, a in record.report.artifacts.items() if a.file_count is not None}
    assert folded == _naive_fold(artifacts, files)
