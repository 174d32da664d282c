"""manifest.json lists every artifact of a run with size and checksum, on both adapters."""

from __future__ import annotations

import hashlib
import json

import pytest

from trainer.contract import RunLayout
from trainer.storage.local import LocalDirStore
from trainer.storage.manifest import write_manifest


@pytest.fixture(params=["local", "gcs"])
def output(request, tmp_path):
    if request.param == "local":
        return LocalDirStore(), str(tmp_path / "runs")
    gcs, bucket = request.getfixturevalue("gcs"), request.getfixturevalue("bucket")
    return gcs, f"gs://{bucket}/runs"


def test_manifest_lists_every_artifact_with_size_and_md5(output):
    store, out = output
    layout = RunLayout(out, "rl-aaaaaaaaaaaa")
    files = {
        "spec.json": b'{"name": "x"}',
        "events.jsonl": b'{"seq": 0}\n',
        "logs/convert.log": b"converted\n" * 50,
        "rl/rl-aaaaaaaaaaaa/checkpoints/actor/3/model_params/_METADATA": b"meta",
        "hf/model.safetensors": bytes(range(256)) * 64,
    }
    for rel, data in files.items():
        store.write_bytes(layout.path(rel), data)
    store.write_bytes(layout.path(".rljob-probe-deadbeef"), b"probe")  # left by a failed preflight
    store.write_bytes(layout.manifest, b"stale")  # an earlier attempt's manifest is not an artifact

    manifest = write_manifest(layout, store=store, references={"converted_checkpoint": f"{out}/_cache/x/0/items"})
    on_disk = json.loads(store.read_bytes(layout.manifest))
    assert on_disk == manifest
    assert {a["path"]: (a["size_bytes"], a["checksum"]) for a in manifest["artifacts"]} == {
        rel: (len(data), "md5:" + hashlib.md5(data).hexdigest()) for rel, data in files.items()
    }
    assert all(a["uri"] == layout.path(a["path"]) for a in manifest["artifacts"])
    assert manifest["total_bytes"] == sum(len(d) for d in files.values())
    assert manifest["file_count"] == len(files) and manifest["job_id"] == "rl-aaaaaaaaaaaa"
    assert manifest["references"] == {"converted_checkpoint": f"{out}/_cache/x/0/items"}
