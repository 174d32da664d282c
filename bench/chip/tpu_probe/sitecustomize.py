"""A probe bench/chip/tpu_grpo.py puts on the train stage's PYTHONPATH: the chip's memory by step part, JAX's compile time,
and optionally a profiler trace of one step.

Python imports `sitecustomize` at start-up from the path, so the train stage runs exactly the command the trainer
builds, with this beside it. Active only in the process whose environment names RLJOB_BENCH_PROBE_OUT, and the
variables are dropped at once so that the reward workers and any other child start without them.

Written to that file (replaced whole) every POLL_S and at exit: JAX's own `memory_stats()` of device 0
(`peak_bytes_in_use` is the allocator's running maximum, so a late read still holds the peak), the seconds JAX
reported compiling (its `/jax/core/compile/...` duration events: tracing, lowering and XLA's backend compile), and
for the first MEMORY_STEPS steps the allocator's figures at every entry to and exit from a goodput part (the
trainer's own GoodputClock, trainer/maxtext_entry/goodput_recorder.py): the part during which the running maximum
rises is the part that sets the job's peak, and `bytes_in_use` between parts is what stays resident. JAX dispatches
asynchronously, so a part's figure can include work its predecessor queued; the parts that end in a host copy
(rollout, log-probs) bound that.

With RLJOB_BENCH_PROBE_TRACE_STEP=N, JAX's profiler records step N alone (started when step N-1 reports its goodput,
stopped when step N does) into `<out>.trace/`, for xprof's tools (hlo_stats, roofline_model).
The device is never touched before the program itself has initialised its backend: reading it first would start
the backend before MaxText sets its flags.
"""

import atexit
import json
import os
import threading
import time

POLL_S = 2.0
MEMORY_STEPS = 3  # steps whose per-part memory is kept: the first compiles, the next two are steady
_OUT = os.environ.pop("RLJOB_BENCH_PROBE_OUT", None)
_TRACE_STEP = int(os.environ.pop("RLJOB_BENCH_PROBE_TRACE_STEP", "0") or 0)


def _start() -> None:
    import jax.monitoring

    compile_s: dict[str, float] = {}
    compiles = {"backend_compiles": 0}
    by_part: list[dict[str, object]] = []
    state = {"step": 0, "trace": ""}

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
        # Every integer figure: on TPU `bytes_reserved`/`peak_bytes_reserved` hold what the compiled programs reserve
        # for their temporaries, which `bytes_in_use` does not count.
        return {k: int(v) for k, v in stats.items() if isinstance(v, int)}

    def write() -> None:
        try:
            body = {"memory": memory(), "compile_s": {k: round(v, 3) for k, v in compile_s.items()}, **compiles}
            body["memory_by_part"] = list(by_part)
            body["trace"] = state["trace"]
            body["written_after_s"] = round(time.monotonic() - started, 1)
            tmp = f"{_OUT}.tmp"
            with open(tmp, "w") as f:
                json.dump(body, f)
            os.replace(tmp, _OUT)
        except Exception as e:  # noqa: BLE001  (a probe must never stop the program it measures)
            print(f"rljob bench probe: {e!r}", flush=True)

    def record(part: str, event: str) -> None:
        if state["step"] >= MEMORY_STEPS:
            return
        stats = memory()
        if stats:
            figures = {"peak": "peak_bytes_in_use", "in_use": "bytes_in_use", "peak_reserved": "peak_bytes_reserved"}
            figures |= {"reserved": "bytes_reserved"}
            by_part.append({"step": state["step"] + 1, "part": part, "at": event} | {k: stats.get(v) for k, v in figures.items()})

    def on_report(step: int) -> None:
        state["step"] = step
        if _TRACE_STEP and step == _TRACE_STEP - 1 and not state["trace"]:
            state["trace"] = f"{_OUT}.trace"
            jax.profiler.start_trace(state["trace"])
        elif _TRACE_STEP and step == _TRACE_STEP and state["trace"] and not state.get("stopped"):
            jax.block_until_ready(jax.numpy.zeros(()))
            jax.profiler.stop_trace()
            state["stopped"] = "yes"

    _watch_goodput(record, on_report)

    def loop() -> None:
        while True:
            time.sleep(POLL_S)
            write()

    threading.Thread(target=loop, name="rljob-bench-probe", daemon=True).start()
    atexit.register(write)


def _watch_goodput(record, on_report) -> None:  # type: ignore[no-untyped-def]
    """Hook the trainer's goodput clock and reporter (the program installs them on these classes' instances)."""
    from trainer.maxtext_entry import goodput_recorder as g

    enter, leave, report = g.GoodputClock.enter, g.GoodputClock.leave, g.GoodputReporter.report

    def entering(self, part):  # type: ignore[no-untyped-def]
        record(part, "enter")
        enter(self, part)

    def leaving(self):  # type: ignore[no-untyped-def]
        stack = self._stacks.get(threading.get_ident()) or ["?"]
        record(stack[-1], "leave")
        leave(self)

    def reporting(self, *, final=False):  # type: ignore[no-untyped-def]
        report(self, final=final)
        if not final:
            try:
                on_report(self.step)
            except Exception as e:  # noqa: BLE001  (a probe must never stop the program it measures)
                print(f"rljob bench probe: {e!r}", flush=True)

    g.GoodputClock.enter, g.GoodputClock.leave, g.GoodputReporter.report = entering, leaving, reporting


if _OUT:
    _start()
