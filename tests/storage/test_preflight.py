"""Preflight: a missing bucket and a read-only location fail before any stage, with a clear message.

Read-only GCS is emulated by fault_proxy.ForbiddingProxy (fake-gcs-server has no IAM); read-only local
is a read-only tmpfs mount when running as root (root ignores permission bits) or a 0555 directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.fault_proxy import ForbiddingProxy
from harness.gcs_emulator import client_for
from trainer.contract import JobSpec, RunLayout
from trainer.storage import StorageError
from trainer.storage.gcs import GcsStore, reset_gcs_store
from trainer.storage.local import LocalDirStore
from trainer.storage.preflight import preflight

from .conftest import FAST_RETRY

REPO = Path(__file__).resolve().parents[2]


def test_missing_bucket_names_the_bucket_and_the_fix(gcs: GcsStore):
    with pytest.raises(StorageError) as err:
        gcs.check_writable("gs://rljob-no-such-bucket/runs")
    msg = str(err.value)
    assert "bucket rljob-no-such-bucket does not exist" in msg
    assert "gcloud storage buckets create gs://rljob-no-such-bucket" in msg


def test_no_create_permission_names_bucket_and_permission(emulator, bucket):
    deny = lambda permission, b: b == bucket and permission == "storage.objects.create"  # noqa: E731
    with ForbiddingProxy(emulator.port, deny) as proxy:
        store = GcsStore(client_for(proxy.url), FAST_RETRY)
        with pytest.raises(StorageError) as err:
            store.check_writable(f"gs://{bucket}/runs")
        assert proxy.denied_requests, "the probe never reached the proxy"
    msg = str(err.value)
    assert f"gs://{bucket}/runs is not writable" in msg
    assert "storage.objects.create" in msg and f"bucket {bucket}" in msg
    assert "roles/storage.objectAdmin" in msg


def test_no_delete_permission_is_refused_and_named(emulator, bucket, gcs):
    # What a bucket retention policy or a create-only role looks like to the trainer.
    deny = lambda permission, b: b == bucket and permission == "storage.objects.delete"  # noqa: E731
    with ForbiddingProxy(emulator.port, deny) as proxy:
        store = GcsStore(client_for(proxy.url), FAST_RETRY)
        with pytest.raises(StorageError) as err:
            store.check_writable(f"gs://{bucket}/runs")
    msg = str(err.value)
    assert "storage.objects.delete" in msg and f"bucket {bucket}" in msg
    left = gcs.list(f"gs://{bucket}/runs")
    assert len(left) == 1 and left[0].uri in msg  # the leftover probe is named so it can be cleaned up


def test_unreadable_gcs_input_fails_preflight(emulator, bucket, gcs):
    gcs.write_bytes(f"gs://{bucket}/models/tiny/config.json", b"{}")
    spec = JobSpec.model_validate(
        {
            "name": "p",
            "model": {"name": "llama3.1-8b", "source": f"gs://{bucket}/models/tiny"},
            "output": f"gs://{bucket}/runs",
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        }
    )
    deny = lambda permission, b: permission in ("storage.objects.list", "storage.objects.get")  # noqa: E731
    with ForbiddingProxy(emulator.port, deny) as proxy:
        old = os.environ["STORAGE_EMULATOR_HOST"]
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        reset_gcs_store()
        try:
            with pytest.raises(StorageError, match=r"input gs://.*/models/tiny is not readable.*storage.objects.list"):
                preflight(spec, RunLayout(spec.output, "rl-aaaaaaaaaaaa"))
        finally:
            os.environ["STORAGE_EMULATOR_HOST"] = old
            reset_gcs_store()


@pytest.fixture
def read_only_dir(tmp_path) -> Path:
    target = tmp_path / "ro"
    target.mkdir()
    if os.geteuid() != 0:
        target.chmod(0o555)
        yield target
        target.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"running as root and cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_read_only_local_output_is_refused(read_only_dir):
    with pytest.raises(StorageError, match=r"is not writable .*Read-only file system|is not writable .*Permission denied"):
        LocalDirStore().check_writable(str(read_only_dir / "runs"))


def test_trainer_run_stops_before_any_stage_on_a_missing_bucket(emulator, tmp_path, capsys):
    """The CLI's own preflight: exit 77 (STORAGE), the fix in stderr, no stage started."""
    from trainer.cli import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(
            {
                "name": "preflight",
                "model": {"name": "llama3.1-8b", "source": str(model)},
                "output": "gs://rljob-missing-bucket/runs",
                "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            }
        )
    )
    code = main(["run", "--spec", str(spec_file), "--job-id", "rl-preflight0000"])
    captured = capsys.readouterr()
    assert code == 77
    assert "bucket rljob-missing-bucket does not exist" in captured.err
    assert "stage_started" not in captured.out


# The tiny test model's config.json: a checkpoint the trainer accepts, so nothing but the preflight
# stands between a run and its first stage.
TINY_LLAMA_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "head_dim": 16,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


@pytest.mark.parametrize(
    ("denied", "says"),
    [
        # A read-only bucket (a viewer role): not even the probe can be created.
        ("storage.objects.create", "is not writable: permission storage.objects.create denied on bucket"),
        # Create-only (a retention policy or objectCreator): Orbax would fail at its first cleanup, hours in.
        ("storage.objects.delete", "is not fully writable: permission storage.objects.delete denied on bucket"),
    ],
)
def test_trainer_run_on_a_bucket_it_cannot_write_exits_77_before_any_stage(emulator, bucket, gcs, tmp_path, denied, says):
    """`python -m trainer run` as the launcher starts it, its output bucket behind a proxy that answers
    403 for one permission: exit 77 with the fix in stderr, and nothing run or written past the probe."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(
            {
                "name": "read-only-output",
                "model": {"source": str(model)},
                "output": f"gs://{bucket}/runs",
                "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            }
        )
    )
    work = tmp_path / "work"
    deny = lambda permission, b: b == bucket and permission == denied  # noqa: E731
    with ForbiddingProxy(emulator.port, deny) as proxy:
        env = dict(
            os.environ,
            STORAGE_EMULATOR_HOST=proxy.url,
            TENSORSTORE_GCS_HTTP_URL=proxy.url,
            RLJOB_WORK_DIR=str(work),
            PYTHONPATH=str(REPO),
            HF_HUB_OFFLINE="1",
        )
        done = subprocess.run(
            [sys.executable, "-m", "trainer", "run", "--spec", str(spec_file), "--job-id", "rl-readonlyrun1"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        denied_requests = list(proxy.denied_requests)
    assert done.returncode == 77, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"storage problem: output location gs://{bucket}/runs/rl-readonlyrun1 {says} {bucket}" in done.stderr
    assert "roles/storage.objectAdmin" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""  # no progress event: the run never started, let alone a stage
    assert not work.exists()  # nor was scratch space made for one
    assert len(denied_requests) == 1, denied_requests  # the write probe, and no later write was tried
    left = [o.uri for o in gcs.list(f"gs://{bucket}/")]
    if denied == "storage.objects.create":
        assert left == []  # no spec.json, events.jsonl or manifest: the bucket is as it was
    else:
        assert len(left) == 1 and "/.rljob-probe-" in left[0] and left[0] in done.stderr  # named for cleanup
