"""`file:///abs/path` means /abs/path to every reader of local run files, through one function
(trainer/contract/spec/locations.py: local_path), which is the only code that spells the scheme."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path

from service.adapters.events_file import EventsFileReader
from service.adapters.run_files import StoreRunFiles
from service.domain.progress import fold_manifest
from service.domain.records.manifest_sizes import size_manifest
from service.domain.records.models import JobRecord, ManifestRefused
from service.domain.records.phases import JobPhase
from trainer.contract import JobSpec, RunLayout, RunStarted, Stage, dump_event, local_path, location_kind
from trainer.storage import store_for
from trainer.storage.local import LocalDirStore
from trainer.storage.manifest import build_manifest

REPO = Path(__file__).resolve().parents[2]
JOB_ID = "rl-0000000000fu"


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants in the code, not docstrings (which may say `file://` to people)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_only_the_locations_module_spells_the_file_scheme():
    home = REPO / "trainer" / "contract" / "spec" / "locations.py"
    spelled = [
        f"{path.relative_to(REPO)}:{line}"
        for pkg in ("service", "trainer")
        for path in sorted((REPO / pkg).rglob("*.py"))
        if path != home
        for line, text in _code_strings(path)
        if "file://" in text
    ]
    assert spelled == []


def test_local_readers_take_file_uris(tmp_path: Path):
    assert (local_path("file:///a/b"), local_path("/a/b"), local_path("gs://b/x")) == ("/a/b", "/a/b", "gs://b/x")
    assert location_kind("file:///a") == "local" and isinstance(store_for("file:///a"), LocalDirStore)

    output = f"file://{tmp_path}/runs"
    layout = RunLayout(output, JOB_ID)
    store = store_for(layout.root)
    store.write_bytes(layout.path("hf", "model.safetensors"), b"w" * 300)
    assert (tmp_path / "runs" / JOB_ID / "hf" / "model.safetensors").stat().st_size == 300
    started = RunStarted(seq=0, time=datetime.now(UTC), job_id=JOB_ID, run_uri=layout.root, attempt=1)
    store.write_bytes(layout.events, (dump_event(started) + "\n").encode())
    store.write_bytes(layout.stage_log(Stage.TRAIN), b"step 1\n")
    manifest = build_manifest(layout)
    assert [a["checksum"].startswith("md5:") for a in manifest["artifacts"]] == [True] * 3
    store.write_bytes(layout.manifest, json.dumps(manifest).encode())

    now = datetime.now(UTC)
    spec = JobSpec.model_validate(
        {"name": "n", "model": {"source": "/models/tiny"}, "hardware": {"accelerator": "cpu", "rollout_engine": "jax"}, "output": output}
    )
    record = JobRecord(id=JOB_ID, team="t", name="n", spec=spec, spec_hash="", phase=JobPhase.RUNNING, created_at=now, updated_at=now)
    batch = EventsFileReader().read_new(record)
    assert [type(e).__name__ for e in batch.events] == ["RunStarted"]
    files = StoreRunFiles()
    sizes = files.read_manifest(record)
    assert sizes == size_manifest(manifest, {})
    assert "step 1" in list(files.stage_log_lines(record))
    assert sizes is not None and not isinstance(sizes, ManifestRefused)
    fold_manifest(record, sizes)
    assert record.report.artifacts["run"].uri == layout.root and record.report.artifacts["run"].file_count == 3
