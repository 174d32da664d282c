"""GcsStore against fake-gcs-server with the real google-cloud-storage client."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from trainer.storage import StorageError, store_for
from trainer.storage.gcs import GcsStore, gcs_store


def make_tree(root: Path, count: int = 12) -> dict[str, bytes]:
    files = {}
    for i in range(count):
        rel = f"sub{i % 3}/deeper/file{i}.bin" if i % 2 else f"file{i}.txt"
        data = os.urandom(100 + i * 997)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files[rel] = data
    return files


def test_one_store_per_process_honours_the_emulator(emulator):
    assert store_for("gs://any/thing") is gcs_store() is store_for("gs://other")
    assert gcs_store().client._connection.API_BASE_URL == emulator.url


def test_bytes_round_trip_list_and_delete(gcs: GcsStore, bucket):
    base = f"gs://{bucket}/run"
    assert gcs.write_bytes(f"{base}/a.json", b'{"a": 1}')
    gcs.write_bytes(f"{base}/logs/train.log", b"line\n" * 10)
    gcs.write_bytes(f"gs://{bucket}/run-sibling/x", b"not under run/")
    assert gcs.read_bytes(f"{base}/a.json") == b'{"a": 1}'
    assert gcs.exists(f"{base}/a.json") and gcs.exists(f"{base}/logs") and gcs.exists(base)
    assert not gcs.exists(f"{base}/nope") and not gcs.exists(f"{base}/log")
    listed = gcs.list(base)
    assert [o.uri for o in listed] == [f"{base}/a.json", f"{base}/logs/train.log"]
    assert listed[0].size_bytes == 8
    assert listed[0].checksum == "md5:" + hashlib.md5(b'{"a": 1}').hexdigest()
    assert gcs.list(f"{base}/a.json")[0].uri == f"{base}/a.json"  # a single object lists as itself
    gcs.delete(base)
    assert gcs.list(base) == []
    assert gcs.read_bytes(f"gs://{bucket}/run-sibling/x") == b"not under run/"
    with pytest.raises(StorageError, match="does not exist"):
        gcs.read_bytes(f"{base}/a.json")


def test_upload_dir_then_download_dir_round_trip(gcs: GcsStore, bucket, tmp_path):
    src = tmp_path / "src"
    files = make_tree(src)
    uploaded = gcs.upload_dir(str(src), f"gs://{bucket}/export/hf")
    assert sorted(o.uri.split("/hf/", 1)[1] for o in uploaded) == sorted(files)
    for info in uploaded:
        rel = info.uri.split("/hf/", 1)[1]
        assert info.size_bytes == len(files[rel])
        assert info.checksum == "md5:" + hashlib.md5(files[rel]).hexdigest()
    dest = tmp_path / "dest"
    paths = gcs.download_dir(f"gs://{bucket}/export/hf", str(dest))
    assert len(paths) == len(files)
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data


def test_download_of_an_empty_prefix_is_an_error(gcs: GcsStore, bucket, tmp_path):
    with pytest.raises(StorageError, match="holds no objects"):
        gcs.download_dir(f"gs://{bucket}/nothing", str(tmp_path / "d"))


def test_if_absent_race_has_exactly_one_winner(gcs: GcsStore, bucket):
    uri = f"gs://{bucket}/cache/entry/COMPLETE"
    writers = 6
    barrier = threading.Barrier(writers)
    results: dict[int, bool] = {}

    def write(i: int) -> None:
        barrier.wait()
        results[i] = gcs.write_bytes(uri, f"writer-{i}".encode(), if_absent=True)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [i for i, won in results.items() if won]
    assert len(results) == writers and len(winners) == 1
    assert gcs.read_bytes(uri) == f"writer-{winners[0]}".encode()
    # And a later writer still loses, even with identical content.
    assert gcs.write_bytes(uri, f"writer-{winners[0]}".encode(), if_absent=True) is False


def test_check_writable_leaves_no_probe_behind(gcs: GcsStore, bucket):
    gcs.check_writable(f"gs://{bucket}/out")
    assert gcs.list(f"gs://{bucket}") == []


def test_check_readable(gcs: GcsStore, bucket):
    gcs.write_bytes(f"gs://{bucket}/models/tiny/config.json", b"{}")
    gcs.check_readable(f"gs://{bucket}/models/tiny")
    gcs.check_readable(f"gs://{bucket}/models/tiny/config.json")
    with pytest.raises(StorageError, match="does not exist"):
        gcs.check_readable(f"gs://{bucket}/models/other")


@pytest.mark.parametrize("adapter", ["local", "gcs"])
def test_upload_file(adapter, gcs, bucket, tmp_path):
    from trainer.storage.local import LocalDirStore

    store, base = (LocalDirStore(), str(tmp_path / "out")) if adapter == "local" else (gcs, f"gs://{bucket}/out")
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1\n" * 1000)
    info = store.upload_file(str(log), f"{base}/logs/train.log")
    assert info.uri == f"{base}/logs/train.log" and info.size_bytes == 7000
    assert store.read_bytes(f"{base}/logs/train.log") == log.read_bytes()
