"""A gs:// run directory is sized from the listing's object metadata, by part, against fake-gcs-server."""

from __future__ import annotations

from trainer.contract import RunLayout
from trainer.run_size import measure_run
from trainer.storage.gcs import GcsStore


def test_a_gs_run_directory_is_measured_from_object_sizes(gcs: GcsStore, bucket):
    layout = RunLayout(f"gs://{bucket}/runs", "rl-a")
    files = {
        "rl/rl-a/checkpoints/actor/3/model_params/x": 1000,
        "hf/model.safetensors": 300,
        "logs/train.log": 40,
        "events.jsonl": 2,
        "eval/after.jsonl": 5,
        "spec.json": 6,
    }
    for relative, size in files.items():
        gcs.write_bytes(layout.path(relative), b"x" * size)
    gcs.write_bytes(f"gs://{bucket}/runs/rl-ab/spec.json", b"x" * 99)  # a sibling run sharing the prefix's text
    measured = measure_run(layout)
    assert measured.parts == {"checkpoints": 1000, "converted": 0, "export": 300, "logs": 42, "samples": 5, "data": 0, "other": 6}
    assert measured.total_bytes == 1353 and measured.files == 6
