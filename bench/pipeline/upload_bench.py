"""Upload of an export-like directory: GcsStore.upload_dir (transfer_manager, threads) vs a plain
per-file `blob.upload_from_filename` loop. Same data, same emulator, one run each; prints the ratio.

    python bench/pipeline/upload_bench.py [--files 40] [--workers 8]

Starts its own fake-gcs-server on 127.0.0.1 (filesystem backend) unless STORAGE_EMULATOR_HOST is set.
Writes its entry, keyed by the added latency, into bench/results/upload.json with the machine's facts (a run at
another latency keeps the others' entries; --no-write: not).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import RESULTS, machine_facts  # noqa: E402

RESULT_FILE = RESULTS / "upload.json"


def make_export_dir(root: Path, count: int, seed: int = 0) -> int:
    """Mixed sizes like an HF export: a few large shards, configs and tokenizer files, small json."""
    rng = random.Random(seed)
    total = 0
    for i in range(count):
        if i % 10 == 0:
            size = rng.randint(4, 8) * 1024 * 1024  # weight shards
        elif i % 3 == 0:
            size = rng.randint(256, 1024) * 1024  # tokenizer / medium files
        else:
            size = rng.randint(1, 64) * 1024  # configs, metadata
        path = root / ("shards" if i % 10 == 0 else "meta") / f"file-{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        total += size
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="per-request delay added by a loopback proxy (real GCS is tens of ms away)"
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not update {RESULT_FILE.relative_to(REPO)}")
    args = parser.parse_args()
    machine = machine_facts()

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from harness.fault_proxy import ForbiddingProxy
    from harness.gcs_emulator import GcsEmulator
    from trainer.storage.gcs import GcsStore, RetrySettings

    with tempfile.TemporaryDirectory(prefix="rljob-bench-") as tmp:
        emu = None
        url = os.environ.get("STORAGE_EMULATOR_HOST")
        if not url:
            emu = GcsEmulator(Path(tmp) / "gcs")
            emu.start()
            url = emu.url
        proxy = None
        if args.latency_ms:
            proxy = ForbiddingProxy(int(url.rsplit(":", 1)[1]), delay_s=args.latency_ms / 1000).__enter__()
            url = proxy.url
        try:
            client = storage.Client(project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": url})
            bucket = client.create_bucket(f"bench-{os.getpid()}-{int(time.time())}")
            src = Path(tmp) / "export"
            total = make_export_dir(src, args.files)
            files = sorted(p for p in src.rglob("*") if p.is_file())
            print(f"{len(files)} files, {total / 2**20:.1f} MiB, emulator {url}, added latency {args.latency_ms} ms/request")

            started = time.perf_counter()
            for path in files:
                bucket.blob(f"loop/{path.relative_to(src).as_posix()}").upload_from_filename(str(path))
            loop_s = time.perf_counter() - started

            store = GcsStore(client, RetrySettings(max_workers=args.workers))
            started = time.perf_counter()
            uploaded = store.upload_dir(str(src), f"gs://{bucket.name}/adapter")
            adapter_s = time.perf_counter() - started

            assert len(uploaded) == len(files)
            loop_sizes = sorted(b.size for b in client.list_blobs(bucket, prefix="loop/"))
            assert loop_sizes == sorted(o.size_bytes for o in uploaded), "the two uploads differ"
            print(f"per-file loop          : {loop_s:7.2f} s  ({total / 2**20 / loop_s:6.1f} MiB/s)")
            print(f"upload_dir ({args.workers} threads): {adapter_s:7.2f} s  ({total / 2**20 / adapter_s:6.1f} MiB/s)")
            print(f"ratio loop/adapter     : {loop_s / adapter_s:7.2f}x")
            entry = {
                "files": len(files),
                "bytes": total,
                "workers": args.workers,
                "latency_ms": args.latency_ms,
                "loop_s": round(loop_s, 3),
                "upload_dir_s": round(adapter_s, 3),
                "ratio": round(loop_s / adapter_s, 2),
                "machine": machine | {"load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
            }
            if not args.no_write:
                results = json.loads(RESULT_FILE.read_text()) if RESULT_FILE.exists() else {}
                results[f"latency_ms={args.latency_ms:g}"] = entry
                RESULT_FILE.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        finally:
            if proxy is not None:
                proxy.__exit__(None, None, None)
            if emu is not None:
                emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
