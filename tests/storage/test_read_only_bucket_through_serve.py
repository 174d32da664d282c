"""A job whose output bucket the trainer may not write, end to end through `rljob serve`: the real
service process (SQLite, the local launcher, its default trainer command), the real trainer, and
fake-gcs-server behind the proxy that answers 403 for object creation in that bucket. The job ends
FAILED with the storage message (exit 77, not retried), and its log names the bucket and the role."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from harness.fault_proxy import ForbiddingProxy
from harness.live_server import serving_process
from service.free_port import free_port
from tests.service.service_helpers import wait_until

from .test_preflight import TINY_LLAMA_CONFIG

REPO = Path(__file__).resolve().parents[2]
TOKEN = "rlj_read-only-bucket-" + "0123456789abcdef" * 2
pytestmark = pytest.mark.timeout(240)


def test_a_read_only_bucket_fails_the_job_with_the_permission_message(emulator, bucket, gcs, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    deny = lambda permission, b: b == bucket and permission == "storage.objects.create"  # noqa: E731
    port = free_port()
    with ForbiddingProxy(emulator.port, deny) as proxy:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
        env.update(
            RLJOB_STATE_DIR=str(tmp_path / "state"),
            RLJOB_BOOTSTRAP_TOKEN=TOKEN,
            RLJOB_BOOTSTRAP_TEAM="team-a",
            RLJOB_PROGRESS_POLL_INTERVAL_S="0.2",
            STORAGE_EMULATOR_HOST=proxy.url,
            TENSORSTORE_GCS_HTTP_URL=proxy.url,
            PYTHONPATH=str(REPO),
            HF_HUB_OFFLINE="1",
        )
        argv = [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)]
        with serving_process(argv, env, port, tmp_path / "serve.stderr", TOKEN) as client:
            spec = {
                "name": "read-only-output",
                "model": {"source": str(model)},
                "output": f"gs://{bucket}/runs",
                "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            }
            submitted = client.post("/v1/jobs", json=spec)
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["phase"] in {"FAILED", "SUCCEEDED"}, timeout_s=120)
            job = client.get(f"/v1/jobs/{job_id}").json()
            logs = client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 200}).text
        denied = list(proxy.denied_requests)
    assert job["phase"] == "FAILED", job
    assert "the trainer could not use its storage (exit 77)" in job["message"], job["message"]
    assert job["failure"]["reason"] == "STORAGE" and job["failure"]["exit_code"] == 77
    assert f"storage problem: output location gs://{bucket}/runs/{job_id}" in logs, logs[-3000:]
    assert "roles/storage.objectAdmin" in logs and "Traceback" not in logs
    assert denied, "the trainer's write probe never reached the proxy"
    assert [o.uri for o in gcs.list(f"gs://{bucket}/")] == []  # the bucket is as it was
