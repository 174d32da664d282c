"""The conversion cache on both adapters: hit after put, one entry from racing converters, never a
half-written read, damage detection, pruning and its command line."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from trainer.contract import JobSpec
from trainer.conversion_cache import (
    CacheKey,
    ConversionCache,
    cache_key_for,
    default_cache_root,
    source_fingerprint,
    storage_format,
)
from trainer.conversion_cache_cli import main as cache_cli
from trainer.sizing.hf_model import resolve_maxtext_model
from trainer.storage import StorageError
from trainer.storage.local import LocalDirStore

FILES_PER_CHECKPOINT = 6


def key(dtype: str = "float32", source: str = "files:abc") -> CacheKey:
    return CacheKey(
        source=source,
        model_name="llama3.1-8b",
        model_overrides="",
        maxtext_version="0.2.5",
        dtype=dtype,
        scan_layers=True,
        storage_format="tensorstore",
    )


def fake_converter(store, *, delay_s: float = 0.0, calls: list | None = None):
    """Writes a checkpoint-shaped tree the way to_maxtext does: many objects, one after another."""

    def convert(out_uri: str) -> None:
        if calls is not None:
            calls.append(out_uri)
        for i in range(FILES_PER_CHECKPOINT):
            store.write_bytes(f"{out_uri}/0/items/part-{i}", f"{out_uri}|{i}".encode())
            time.sleep(delay_s)

    return convert


@pytest.fixture(params=["local", "gcs"])
def cache_env(request, tmp_path):
    if request.param == "local":
        store = LocalDirStore()
        root = str(tmp_path / "cache")
    else:
        gcs = request.getfixturevalue("gcs")
        bucket = request.getfixturevalue("bucket")
        store, root = gcs, f"gs://{bucket}/out/_cache/maxtext"
    return store, root


def test_put_then_hit_skips_conversion(cache_env):
    store, root = cache_env
    cache = ConversionCache(root, store=store)
    calls: list = []
    assert cache.lookup(key()) is None
    first = cache.get_or_convert(key(), fake_converter(store, calls=calls))
    assert (first.hit, first.converted) == (False, True)
    assert first.entry.checkpoint_uri.startswith(f"{root}/{key().name}/data-")
    assert first.entry.checkpoint_uri.endswith("/0/items")
    assert store.read_bytes(f"{first.entry.checkpoint_uri}/part-0").startswith(first.entry.data_uri.encode())
    second = cache.get_or_convert(key(), fake_converter(store, calls=calls))
    assert (second.hit, second.converted) == (True, False)
    assert second.entry == first.entry and len(calls) == 1
    assert cache.get_or_convert(key(dtype="bfloat16"), fake_converter(store, calls=calls)).hit is False
    assert [e.name for e in cache.list_entries()] == [key(dtype="bfloat16").name, key().name]


def test_a_failed_conversion_leaves_nothing(cache_env):
    store, root = cache_env
    cache = ConversionCache(root, store=store)

    def broken(out_uri: str) -> None:
        store.write_bytes(f"{out_uri}/0/items/part-0", b"half")
        raise RuntimeError("to_maxtext died")

    with pytest.raises(RuntimeError):
        cache.get_or_convert(key(), broken)
    assert cache.lookup(key()) is None and store.list(root) == []


def test_racing_converters_leave_one_entry_and_readers_never_see_half(cache_env):
    store, root = cache_env
    cache = ConversionCache(root, store=store)
    barrier = threading.Barrier(2)
    results: list = []
    seen: list = []  # (file count, writers seen) for every entry the reader observed
    stop = threading.Event()

    def converter() -> None:
        convert = fake_converter(store, delay_s=0.03)

        def synchronised(out_uri: str) -> None:
            barrier.wait(timeout=30)  # both miss the cache, then convert at the same time
            convert(out_uri)

        results.append(cache.get_or_convert(key(), synchronised))

    errors: list = []

    def reader() -> None:
        try:
            while not stop.is_set():
                entry = cache.lookup(key(), verify=False)
                if entry is not None:
                    objects = store.list(entry.data_uri)
                    bodies = [store.read_bytes(o.uri).decode() for o in objects]
                    seen.append((len(objects), {b.split("|")[0] for b in bodies}))
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001 - a reader error is a test failure, reported below
            errors.append(e)

    threads = [threading.Thread(target=converter) for _ in range(2)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    time.sleep(0.05)
    stop.set()
    watcher.join(timeout=30)

    assert not errors, errors
    assert len(results) == 2 and all(r.converted and not r.hit for r in results)
    assert results[0].entry == results[1].entry  # the loser returns the winner's entry
    entry = results[0].entry
    assert seen, "the reader never observed the published entry"
    assert all(count == FILES_PER_CHECKPOINT and writers == {entry.data_uri} for count, writers in seen), seen
    prefixes = {o.uri[len(entry.uri) + 1 :].split("/")[0] for o in store.list(entry.uri)}
    assert prefixes == {"COMPLETE", entry.data_uri.rsplit("/", 1)[1]}  # the loser removed its data
    assert cache.lookup(key()) == entry


def test_damaged_entry_is_reported_with_the_fix(cache_env):
    store, root = cache_env
    cache = ConversionCache(root, store=store)
    entry = cache.get_or_convert(key(), fake_converter(store)).entry
    store.delete(f"{entry.checkpoint_uri}/part-3")
    with pytest.raises(StorageError, match=rf"damaged .*cache prune --root {root} --key {entry.name}"):
        cache.lookup(key())


def test_prune_by_age_count_key_and_orphans(cache_env):
    store, root = cache_env
    now = [1_000_000.0]
    cache = ConversionCache(root, store=store, clock=lambda: now[0])
    names = []
    for i, dtype in enumerate(["float32", "bfloat16", "float16"]):
        now[0] = 1_000_000.0 + i * 3600
        names.append(cache.get_or_convert(key(dtype=dtype), fake_converter(store)).entry.name)
    orphan = cache.begin(key(source="files:orphan"))  # a converter that died before publishing
    fake_converter(store)(orphan.uri)

    now[0] = 1_000_000.0 + 2 * 3600 + 60
    assert cache.prune(keep_last=2, dry_run=True) == [f"{root}/{names[0]}"]
    assert len(cache.list_entries()) == 3  # dry run removed nothing
    assert cache.prune(older_than_s=2 * 3600) == [f"{root}/{names[0]}"]
    assert [e.name for e in cache.list_entries()] == [names[2], names[1]]
    assert store.list(f"{root}/{names[0]}") == []
    assert cache.prune(key=names[1]) == [f"{root}/{names[1]}"]
    assert [e.name for e in cache.list_entries()] == [names[2]]
    # The orphan is young by the wall clock; it goes only once it is older than the grace period.
    assert orphan.uri not in cache.prune(keep_last=5, orphan_grace_s=3600 * 24 * 365 * 100)
    now[0] = time.time() + 7 * 3600
    assert cache.prune(keep_last=5) == [orphan.uri]
    assert [e.name for e in cache.list_entries()] == [names[2]]
    assert {o.uri[len(root) + 1 :].split("/")[0] for o in store.list(root)} == {names[2]}


def test_cli_lists_and_prunes(cache_env, capsys):
    store, root = cache_env
    cache = ConversionCache(root, store=store)
    entry = cache.get_or_convert(key(), fake_converter(store)).entry
    assert cache_cli(["cache", "list", "--root", root, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == [entry.name] and listed[0]["checkpoint_uri"] == entry.checkpoint_uri
    assert cache_cli(["cache", "prune", "--root", root]) == 2  # no criterion: refuse rather than guess
    capsys.readouterr()
    assert cache_cli(["cache", "prune", "--root", root, "--key", entry.name]) == 0
    assert f"removed {root}/{entry.name}" in capsys.readouterr().out
    assert cache_cli(["cache", "list", "--root", root]) == 0
    assert "0 entries" in capsys.readouterr().out


def test_fingerprints_follow_content_not_location(gcs, bucket, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 64}')
    (model / "model.safetensors").write_bytes(b"\x00" * 4096)
    (model / ".cache").mkdir()
    (model / ".cache" / "download.lock").write_text("hf bookkeeping, not content")
    local_fp = source_fingerprint(str(model))
    gcs.upload_dir(str(model), f"gs://{bucket}/models/tiny")
    assert source_fingerprint(f"gs://{bucket}/models/tiny", store=gcs) == local_fp  # md5 from metadata
    (model / "config.json").write_text('{"hidden_size": 65}')
    assert source_fingerprint(str(model)) != local_fp
    assert source_fingerprint("meta-llama/Llama-3.1-8B", "abc123") == "hub:meta-llama/Llama-3.1-8B@abc123"


def test_key_and_default_root_from_a_spec(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = JobSpec.model_validate(
        {
            "name": "k",
            "model": {
                "name": "llama3.1-8b",
                "source": str(model),
                "dtype": "float32",
                "dims": {
                    "base_emb_dim": 64,
                    "base_num_query_heads": 4,
                    "base_num_kv_heads": 2,
                    "base_num_decoder_layers": 2,
                    "base_mlp_dim": 128,
                    "head_dim": 16,
                },
            },
            "output": "gs://bucket-x/runs",
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        }
    )
    fmt = storage_format(use_ocdbt=False, use_zarr3=False)
    model = resolve_maxtext_model("llama3.1-8b", spec.model.dims.model_dump(), None)
    k = cache_key_for(spec, model, fmt=fmt, maxtext_version="0.2.5")
    assert (k.dtype, k.scan_layers, k.storage_format, k.maxtext_version) == ("float32", True, "tensorstore", "0.2.5")
    assert json.loads(k.model_overrides)["base_emb_dim"] == "64"
    assert cache_key_for(spec, model, fmt="ocdbt+zarr3", maxtext_version="0.2.5").name != k.name
    assert cache_key_for(spec, model, fmt=fmt, maxtext_version="0.2.6").name != k.name
    other_rope = resolve_maxtext_model("llama3.1-8b", None, None)  # same files under other settings: another entry
    assert cache_key_for(spec, other_rope, fmt=fmt, maxtext_version="0.2.5").name != k.name
    monkeypatch.delenv("RLJOB_CONVERSION_CACHE", raising=False)
    assert default_cache_root(spec) == "gs://bucket-x/runs/_cache/maxtext"
    assert default_cache_root(spec, "gs://shared/cache") == "gs://shared/cache"
    monkeypatch.setenv("RLJOB_CONVERSION_CACHE", str(Path("/srv/cache")))
    assert default_cache_root(spec) == "/srv/cache"
    monkeypatch.setenv("RLJOB_CONVERSION_CACHE", "off")
    assert default_cache_root(spec) is None
