"""What does one progress event cost as a run's events file grows on gs://?

Against fake-gcs-server on loopback, the same stream of TrainStep-sized events (about 1 KiB each) is
written two ways, measured in the same run:

- baseline: what the trainer did before, read the whole object and write it back per event;
- now: EventReporter's way, pending lines appended in batches with a server-side compose
  (ArtifactStore.append_bytes), a batch per `--batch` events (train steps wait for the periodic flush).

It prints milliseconds per event in the first and the last tenth of the run, for both, and the ratios:
the baseline's cost grows with the file, the appends' stays flat.

    python bench/pipeline/events_upload_bench.py [--events 2000] [--batch 10]

writes bench/results/events_upload.json with the machine's facts (--no-write: not).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from harness.gcs_emulator import GcsEmulator, apply_env, client_for  # noqa: E402
from trainer.storage.gcs import GcsStore  # noqa: E402

LINE = ('{"v":1,"type":"train_step","metrics":{' + ",".join(f'"m{i}":0.123456789' for i in range(40)) + "}}\n").encode()


def rewrite_each(store: GcsStore, uri: str, events: int) -> list[float]:
    costs = []
    for _ in range(events):
        started = time.perf_counter()
        old = store.read_bytes(uri) if store.exists(uri) else b""
        store.write_bytes(uri, old + LINE)
        costs.append(time.perf_counter() - started)
    return costs


def append_batches(store: GcsStore, uri: str, events: int, batch: int) -> list[float]:
    costs = []
    for start in range(0, events, batch):
        n = min(batch, events - start)
        began = time.perf_counter()
        store.append_bytes(uri, LINE * n)
        costs += [(time.perf_counter() - began) / n] * n
    return costs


def tenth_ms(costs: list[float], last: bool) -> float:
    k = max(1, len(costs) // 10)
    part = costs[-k:] if last else costs[:k]
    return 1000 * sum(part) / len(part)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=10, help="events per append (the flush interval's worth)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/events_upload.json")
    args = parser.parse_args()
    machine = machine_facts()
    with tempfile.TemporaryDirectory() as tmp:
        emulator = GcsEmulator(Path(tmp))
        emulator.start()
        apply_env(emulator.env())
        try:
            store = GcsStore(client_for(emulator.url))
            store.client.create_bucket("bench-events")
            baseline = rewrite_each(store, "gs://bench-events/rewrite/events.jsonl", args.events)
            appended = append_batches(store, "gs://bench-events/append/events.jsonl", args.events, args.batch)
            size = len(store.read_bytes("gs://bench-events/append/events.jsonl"))
        finally:
            emulator.stop()
    rows = [("rewrite per event (baseline)", baseline), (f"append per {args.batch} events", appended)]
    print(f"{args.events} events of {len(LINE)} bytes; final file {size / 1e6:.1f} MB")
    for name, costs in rows:
        first, last = tenth_ms(costs, False), tenth_ms(costs, True)
        print(f"  {name:30s} first tenth {first:7.2f} ms/event, last tenth {last:7.2f} ms/event, growth {last / first:5.2f}x")
    print(f"  last tenth, baseline / append: {tenth_ms(baseline, True) / tenth_ms(appended, True):.1f}x")
    if not args.no_write:
        tenths = {
            name: {"first_tenth_ms": round(tenth_ms(c, False), 2), "last_tenth_ms": round(tenth_ms(c, True), 2)}
            for name, c in (("rewrite", baseline), ("append", appended))
        }
        write_result(
            "events_upload.json",
            {"events": args.events, "batch": args.batch, "event_bytes": len(LINE), "final_file_bytes": size, **tenths},
            machine,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
