"""A probe bench/tpu_grpo.py puts on the train stage's PYTHONPATH: the chip's peak memory and JAX's compile time.

Python imports `sitecustomize` at start-up from the path, so the train stage runs exactly the command the trainer
builds, with this beside it. Active only in the process whose environment names RLJOB_BENCH_PROBE_OUT, and the
variable is dropped at once so that the reward workers and any other child start without it.

Written to that file (replaced whole) every POLL_S and at exit: JAX's own `memory_stats()` of device 0
(`peak_bytes_in_use` is the allocator's running maximum, so a late read still holds the peak) and the seconds JAX
reported compiling (its `/jax/core/compile/...` duration events: tracing, lowering and XLA's backend compile).
The device is never touched before the program itself has initialised its backend: reading it first would start
the backend before MaxText sets its flags.
"""

import atexit
import json
import os
import threading
import time

POLL_S = 2.0
_OUT = os.environ.pop("RLJOB_BENCH_PROBE_OUT", None)


def _start() -> None:
    import jax.monitoring

    compile_s: dict[str, float] = {}
    compiles = {"backend_compiles": 0}

    def on_duration(event: str, seconds: float, **_: object) -> None:
        if event.startswith("/jax/core/compile/"):
            name = event.rsplit("/", 1)[-1]
            compile_s[name] = compile_s.get(name, 0.0) + seconds
            if name == "backend_compile_duration":
                compiles["backend_compiles"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    started = time.monotonic()

    def memory() -> dict[str, int] | None:
        from jax._src import xla_bridge

        if not xla_bridge._backends:  # not yet initialised by the program: leave it to it
            return None
        stats = jax.local_devices()[0].memory_stats() or {}
        return {k: int(v) for k, v in stats.items() if k in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")}

    def write() -> None:
        try:
            body = {"memory": memory(), "compile_s": {k: round(v, 3) for k, v in compile_s.items()}, **compiles}
            body["written_after_s"] = round(time.monotonic() - started, 1)
            tmp = f"{_OUT}.tmp"
            with open(tmp, "w") as f:
                json.dump(body, f)
            os.replace(tmp, _OUT)
        except Exception as e:  # noqa: BLE001  (a probe must never stop the program it measures)
            print(f"rljob bench probe: {e!r}", flush=True)

    def loop() -> None:
        while True:
            time.sleep(POLL_S)
            write()

    threading.Thread(target=loop, name="rljob-bench-probe", daemon=True).start()
    atexit.register(write)


if _OUT:
    _start()
