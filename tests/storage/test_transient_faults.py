"""The emulator is killed in the middle of a many-file upload and restarted on the same port a few
seconds later: every upload retries with backoff and no file is lost or corrupted.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from harness.gcs_emulator import GcsEmulator, client_for
from trainer.storage.gcs import GcsStore, RetrySettings

OUTAGE_S = 3.0


def test_upload_dir_survives_an_emulator_restart(tmp_path):
    emu = GcsEmulator(tmp_path / "gcs-root")  # filesystem backend: objects survive the restart
    emu.start()
    try:
        client = client_for(emu.url)
        client.create_bucket("faults")
        # Few workers so the upload is still running when the first object lands.
        store = GcsStore(client, RetrySettings(initial_s=0.2, maximum_s=1.0, timeout_s=60.0, max_workers=2))
        src = tmp_path / "export"
        expected = {}
        for i in range(40):
            data = os.urandom(256 * 1024 + i)
            (src / f"shard-{i:02d}.bin").parent.mkdir(parents=True, exist_ok=True)
            (src / f"shard-{i:02d}.bin").write_bytes(data)
            expected[f"shard-{i:02d}.bin"] = hashlib.md5(data).hexdigest()

        outcome: dict = {}

        def upload() -> None:
            try:
                outcome["objects"] = store.upload_dir(str(src), "gs://faults/run/hf")
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = e

        worker = threading.Thread(target=upload)
        worker.start()
        landed = emu.root / "faults" / "run" / "hf"
        deadline = time.monotonic() + 30
        while not (landed.exists() and any(landed.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.002)
        emu.stop()
        assert worker.is_alive(), "the upload finished before the outage; the test proved nothing"
        time.sleep(OUTAGE_S)
        still_retrying = worker.is_alive()
        emu.start()
        worker.join(timeout=60)
        assert still_retrying, "the upload gave up (or finished) while the emulator was down"
        assert "error" not in outcome, outcome.get("error")
        # Each object is read back whole rather than listed: after a SIGKILL, fake-gcs-server's filesystem
        # backend occasionally answers a prefix listing with nothing (seen in ~1 of 20 runs under load)
        # although every object is there; reading the bytes is the stronger check that nothing was lost.
        landed_md5 = {name: hashlib.md5(store.read_bytes(f"gs://faults/run/hf/{name}")).hexdigest() for name in expected}
        assert landed_md5 == expected
        assert {o.uri.rsplit("/", 1)[1] for o in outcome["objects"]} == set(expected)
    finally:
        emu.stop()


@pytest.mark.parametrize("op", ["write_bytes", "read_bytes"])
def test_single_calls_retry_through_an_outage(tmp_path, op):
    emu = GcsEmulator(tmp_path / "gcs-root")
    emu.start()
    try:
        client = client_for(emu.url)
        client.create_bucket("faults")
        store = GcsStore(client, RetrySettings(initial_s=0.2, maximum_s=1.0, timeout_s=30.0))
        store.write_bytes("gs://faults/existing", b"before")
        emu.stop()
        timer = threading.Timer(2.0, emu.start)
        timer.start()
        started = time.monotonic()
        if op == "write_bytes":
            assert store.write_bytes("gs://faults/new", b"during", if_absent=True) is True
        else:
            assert store.read_bytes("gs://faults/existing") == b"before"
        assert time.monotonic() - started >= 1.5  # it really waited for the restart
        timer.join()
        if op == "write_bytes":
            assert store.read_bytes("gs://faults/new") == b"during"
    finally:
        emu.stop()
