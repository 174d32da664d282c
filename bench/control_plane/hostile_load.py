"""The service under one hostile team: its memory against the Deployment's limit, and another team's latency as a
ratio to its own latency at rest, measured in the same run (issue 33's "done when").

The service runs as the image runs it (`rljob serve`, its own process; the local launcher with
harness/held_trainer.py as every job's trainer, so jobs are really RUNNING and a test writes their run directory
the way a trainer, or a reward function inside it, can). Team beta has one running job and reads it
(GET /v1/jobs/{id}) and its team's list (GET /v1/jobs) in a loop the whole time. First a baseline with nothing
hostile; then each case, one after the other, from team alpha:

- events: 100,000 artifact events and 100,000 train steps appended to one job's events.jsonl, until the job
  shows the last step;
- manifest-parsed: the largest manifest.json the service parses (real-shaped entries, just under
  manifest_worker.MAX_MANIFEST_VALUES), read at the job's end;
- manifest-refused: 64 MiB of `{},` (the manifest that took the service past 1 GiB in every life), at the
  job's end;
- log-line: output.log with one 512 MiB line, read whole and with tail_lines=5;
- log-follow: 8 followers of a job whose trainer prints 32 MiB of short lines;
- requests: 64 connections with slow bodies and 64 log follows that never read, held 20 s.

Per case: the service's peak resident memory (/proc/PID/status VmRSS sampled every 20 ms) against the smallest
memory limit the Deployment's overlays set, and beta's p50/p95/max latency over the case with its ratio to the
baseline's (with a 95% bootstrap interval over requests; a short case has few of them, and its interval says so),
and beta's errors (any answer but 200).

The events case runs once more as a control, on a second service whose event fold never rests
(RLJOB_PROGRESS_FOLD_CPU_SHARE=1: the same chunks, no pacing; service/domain/fold_pacer.py), with its own baseline:
what the pacer buys is the difference between the two in one run.

    python bench/control_plane/hostile_load.py [CASE ...]     # all cases by default; writes bench/results/hostile_load.json
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.control_plane.app_server import until_healthy  # noqa: E402
from bench.result_meta import machine_facts, write_result  # noqa: E402
from harness.live_server import HELD_TRAINER  # noqa: E402
from service.adapters.manifest_worker import MAX_MANIFEST_VALUES, manifest_values  # noqa: E402
from service.adapters.store import SqlJobStore  # noqa: E402
from service.config import load_settings  # noqa: E402
from service.domain.tokens import TokenService  # noqa: E402
from service.free_port import free_port  # noqa: E402
from trainer.contract import ArtifactWritten, RunLayout, Stage, StageStarted, TrainStep, dump_event  # noqa: E402

TOKEN_ALPHA = "rlj_hostile-bench-alpha-" + "0123456789abcdef" * 2
TOKEN_BETA = "rlj_hostile-bench-beta-" + "0123456789abcdef" * 2
BASELINE_S = 15.0
EVENTS = 100_000
PROBE_PAUSE_S = 0.05
CASE_TIMEOUT_S = 600.0
NOW = datetime.now(UTC)
CASES = ("events", "manifest_parsed", "manifest_refused", "log_line", "log_follow", "requests")


def ratio_interval(case: list[float], base: list[float], q: float, seed: int = 20261203) -> tuple[float, float]:
    """95% bootstrap interval of quantile(case, q) / quantile(base, q), each resampled on its own (requests are
    the units; 2,000 resamples)."""
    rng = random.Random(seed)

    def quantile(xs: list[float]) -> float:
        ordered = sorted(xs)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    ratios = sorted(quantile(rng.choices(case, k=len(case))) / quantile(rng.choices(base, k=len(base))) for _ in range(2000))
    return ratios[49], ratios[1949]


def deployment_memory_limit_mib() -> int:
    """The smallest memory limit the service Deployment's overlays give (k8s/overlays/*/kustomization.yaml)."""
    limits = []
    for overlay in sorted((REPO / "k8s" / "overlays").glob("*/kustomization.yaml")):
        text = overlay.read_text()
        for block in re.findall(r"limits:\n((?:\s+\w+: .+\n)+)", text):
            limits += [int(m) * 1024 for m in re.findall(r"memory: (\d+)Gi", block)]
            limits += [int(m) for m in re.findall(r"memory: (\d+)Mi", block)]
    assert limits, "no memory limit found in k8s/overlays"
    return min(limits)


def _rss_kib(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))  # type: ignore[union-attr]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


class RssSampler(threading.Thread):
    """Samples the resident memory of the service and the service's own processes (the manifest worker: the pod's
    limit counts them together); `peak_since(t)` is the largest sample after monotonic time t. The held trainers are
    the local launcher's jobs, not the service's: a pod of their own on a cluster, so they are left out."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.stopped = pid, [], threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.02):
            try:
                kib = _rss_kib(self.pid)
                for child in _children(self.pid):
                    with contextlib.suppress(OSError, AttributeError):  # it may end between the two reads
                        if "held_trainer" not in Path(f"/proc/{child}/cmdline").read_text():
                            kib += _rss_kib(child)
            except (OSError, AttributeError):
                return
            self.samples.append((time.monotonic(), kib / 1024))

    def peak_since(self, start: float) -> float:
        return max((mib for t, mib in self.samples if t >= start), default=float("nan"))

    def median_since(self, start: float) -> float:
        return statistics.median(mib for t, mib in self.samples if t >= start)


class BetaProbe(threading.Thread):
    """Team beta reads its job and its list in a loop: (monotonic time, seconds, status) per request."""

    def __init__(self, url: str, job_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.job_id, self.seen, self.stopped = url, job_id, [], threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN_BETA}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as client:
            paths = [f"/v1/jobs/{self.job_id}", "/v1/jobs?limit=20"]
            i = 0
            while not self.stopped.is_set():
                started = time.monotonic()
                try:
                    status = client.get(paths[i % 2]).status_code
                except httpx.HTTPError:
                    status = 0
                self.seen.append((started, time.monotonic() - started, status))
                i += 1
                self.stopped.wait(PROBE_PAUSE_S)

    def latencies(self, start: float, end: float) -> list[float]:
        return [s for t, s, code in self.seen if start <= t <= end and code == 200]

    def window(self, start: float, end: float) -> dict[str, Any]:
        rows = [(s, code) for t, s, code in self.seen if start <= t <= end]
        ok = sorted(s for s, code in rows if code == 200)
        q = statistics.quantiles(ok, n=20, method="inclusive") if len(ok) >= 2 else [float("nan")] * 19
        return {
            "requests": len(rows),
            "errors": sum(code != 200 for _, code in rows),
            "p50_ms": 1e3 * statistics.median(ok),
            "p95_ms": 1e3 * q[18],
            "max_ms": 1e3 * ok[-1],
        }


class Bench:
    def __init__(self, root: Path, client: httpx.Client, url: str) -> None:
        self.root, self.alpha, self.url = root, client, url
        self.runs = root / "runs"
        self.jobs: list[str] = []

    def submit(self, name: str, token: str = TOKEN_ALPHA) -> str:
        spec = {
            "name": name,
            "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            "output": str(self.runs),
        }
        answer = self.alpha.post("/v1/jobs", json=spec, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        self.jobs.append(job_id)
        Path(self.layout(job_id).root).mkdir(parents=True, exist_ok=True)  # the trainer would make it
        self.wait(job_id, lambda j: j["phase"] == "RUNNING", "RUNNING", token)
        return job_id

    def job(self, job_id: str, token: str = TOKEN_ALPHA) -> dict[str, Any]:
        return self.alpha.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}).raise_for_status().json()

    def wait(self, job_id: str, done: Callable[[dict[str, Any]], bool], what: str, token: str = TOKEN_ALPHA) -> dict[str, Any]:
        deadline = time.monotonic() + CASE_TIMEOUT_S
        while time.monotonic() < deadline:
            job = self.job(job_id, token)
            if done(job):
                return job
            time.sleep(0.2)
        raise TimeoutError(f"job {job_id}: not {what} within {CASE_TIMEOUT_S} s: {job}")

    def layout(self, job_id: str) -> RunLayout:
        return RunLayout(str(self.runs), job_id)

    def finish(self, job_id: str) -> dict[str, Any]:
        Path(self.layout(job_id).root, "exit_code").write_text("0")
        return self.wait(job_id, lambda j: j["phase"] == "SUCCEEDED", "SUCCEEDED")

    def output_log(self, job_id: str) -> Path:
        return self.root / "state" / "local-jobs" / job_id / "output.log"  # service/adapters/launchers.py

    # -- the cases ------------------------------------------------------------------------------------

    def events(self) -> str:
        job_id = self.submit("events")
        root = self.layout(job_id).root
        lines = [dump_event(StageStarted(seq=0, time=NOW, job_id=job_id, stage=Stage.TRAIN))]
        artifact = ArtifactWritten(seq=1, time=NOW, job_id=job_id, name="a", uri="u", size_bytes=1)
        step = TrainStep(seq=1, time=NOW, job_id=job_id, step=1, total_steps=EVENTS, loss=0.5, kl=0.1, metrics={"m": 1.0})
        seq = 1
        for i in range(EVENTS):
            lines.append(dump_event(artifact.model_copy(update={"seq": seq, "name": f"a{i:06d}", "uri": f"{root}/x{i}"})))
            lines.append(dump_event(step.model_copy(update={"seq": seq + 1, "step": i + 1})))
            seq += 2
        path = Path(self.layout(job_id).events)
        with path.open("a") as f:
            f.write("".join(line + "\n" for line in lines))
        job = self.wait(job_id, lambda j: j.get("step") == EVENTS, f"at step {EVENTS}")
        return f"{path.stat().st_size >> 20} MiB of events; trainer_events {job.get('trainer_events')}"

    def manifest_parsed(self) -> str:
        job_id = self.submit("manifest-parsed")
        root = self.layout(job_id).root
        entry = '{"uri":"' + root + '/checkpoints/f%07d","size_bytes":1048576,"checksum":"sha256:' + "0" * 64 + '"}'
        head = '{"job_id":"' + job_id + '","artifacts":['
        per_entry = manifest_values(entry.encode() + b",")
        count = (MAX_MANIFEST_VALUES - 64) // per_entry
        data = (head + ",".join(entry % i for i in range(count)) + "]}").encode()
        assert manifest_values(data) <= MAX_MANIFEST_VALUES
        Path(self.layout(job_id).manifest).write_bytes(data)
        job = self.finish(job_id)
        return f"{count:,} files, {len(data) >> 20} MiB, {manifest_values(data):,} values; job {job['phase']}"

    def manifest_refused(self) -> str:
        job_id = self.submit("manifest-refused")
        head = '{"job_id":"' + job_id + '","artifacts":['
        body = b"{}," * ((64 * 1024 * 1024 - 64) // 3)
        Path(self.layout(job_id).manifest).write_bytes(head.encode() + body + b"{}]}")
        job = self.finish(job_id)
        return f"64 MiB; job {job['phase']}"

    def log_line(self) -> str:
        job_id = self.submit("log-line")
        log = self.output_log(job_id)
        with log.open("ab") as f:
            f.truncate(log.stat().st_size + 512 * 1024 * 1024)  # one line of 512 MiB (of NUL bytes)
            f.seek(0, 2)
            f.write(b"\nthe last line\n")
        tail = self.alpha.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 5}).raise_for_status().text
        whole = 0
        with self.alpha.stream("GET", f"/v1/jobs/{job_id}/logs") as answer:
            for piece in answer.iter_bytes():
                whole += len(piece)
        assert tail.endswith("the last line\n"), tail[-200:]
        return f"tail {len(tail):,} bytes, whole log {whole:,} bytes sent"

    def log_follow(self) -> str:
        job_id = self.submit("log-follow")
        log = self.output_log(job_id)
        received = [0] * 8

        def follow(i: int) -> None:
            with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN_ALPHA}"}, timeout=60) as c:
                with c.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}) as answer:
                    for piece in answer.iter_bytes():
                        received[i] += len(piece)

        readers = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(len(received))]
        for reader in readers:
            reader.start()
        block = b"".join(b"step %08d loss 0.5\n" % i for i in range(16384))  # 24 B lines, 384 KiB
        with log.open("ab") as f:
            for _ in range(32 * 1024 * 1024 // len(block)):
                f.write(block)
                f.flush()
                time.sleep(0.01)
        size = log.stat().st_size
        Path(self.layout(job_id).root, "exit_code").write_text("0")
        for reader in readers:
            reader.join(CASE_TIMEOUT_S)
        assert all(r >= size - 4096 for r in received), (received, size)  # each follower got the whole log
        return f"{len(received)} followers x {size >> 20} MiB of 24-byte lines"

    def requests(self) -> str:
        job_id = self.submit("requests")
        port = int(self.url.rsplit(":", 1)[1])
        held: list[socket.socket] = []
        slow_body = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_ALPHA}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        ).encode()
        follow = (f"GET /v1/jobs/{job_id}/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_ALPHA}\r\n\r\n").encode()
        for request in [slow_body] * 64 + [follow] * 64:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that never reads
            conn.sendall(request)
            held.append(conn)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            for conn in held[:64]:
                try:
                    conn.send(b" ")  # a byte a second: a body that never ends
                except OSError:
                    pass
            time.sleep(1)
        refused = 0
        for conn in held:
            conn.settimeout(0.5)
            try:
                refused += conn.recv(64).startswith((b"HTTP/1.1 503", b"HTTP/1.1 429", b"HTTP/1.1 408"))
            except OSError:
                pass
            conn.close()
        return f"{len(held)} connections held 20 s; {refused} answered 503/429/408 within it"


@contextmanager
def service(root: Path, extra_env: dict[str, str]) -> Iterator[tuple[int, httpx.Client, str]]:
    state = root / "state"
    settings = load_settings(state_dir=state)
    store = SqlJobStore(settings.effective_database_url)
    try:
        store.migrate()
        TokenService(store).ensure(TOKEN_ALPHA, "alpha", name="mallory")
        TokenService(store).ensure(TOKEN_BETA, "beta", name="bob")
    finally:
        store.close()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(
        RLJOB_STATE_DIR=str(state),
        RLJOB_TRAINER_COMMAND=json.dumps([sys.executable, str(HELD_TRAINER)]),
        RLJOB_MAX_CONCURRENT_JOBS="8",
        PYTHONPATH=str(REPO),
        **extra_env,
    )
    argv = [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--state-dir", str(state)]
    url = f"http://127.0.0.1:{port}"
    with until_healthy(argv, env, REPO, root / "serve.log", "rljob serve", port) as pid:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN_ALPHA}"}, timeout=60) as client:
            yield pid, client, url


def run_cases(cases: list[str], limit: int, extra_env: dict[str, str]) -> dict[str, Any]:
    """A service of its own (with `extra_env`), beta's baseline on it, then each case: the report's part."""
    part: dict[str, Any] = {"service_env": extra_env, "cases": []}
    with tempfile.TemporaryDirectory() as tmp, service(Path(tmp), extra_env) as (pid, client, url):
        bench = Bench(Path(tmp), client, url)
        beta_job = bench.submit("beta-reader", token=TOKEN_BETA)
        rss, probe = RssSampler(pid), BetaProbe(url, beta_job)
        rss.start()
        probe.start()
        start = time.monotonic()
        time.sleep(BASELINE_S)
        base_end = time.monotonic()
        base = probe.window(start, base_end) | {"rss_mib": rss.median_since(start)}
        base_latencies = probe.latencies(start, base_end)
        part["baseline"] = base
        print(
            f"baseline{extra_env or ''}: beta p50 {base['p50_ms']:.1f} ms p95 {base['p95_ms']:.1f} ms, service {base['rss_mib']:.0f} MiB",
            flush=True,
        )
        for name in cases:
            start = time.monotonic()
            what = getattr(bench, name)()
            end = time.monotonic()
            beta = probe.window(start, end)
            row = {
                "case": name.replace("_", "-"),
                "what": what,
                "seconds": end - start,
                "peak_rss_mib": rss.peak_since(start),
                **{f"beta_{k}": v for k, v in beta.items()},
                "beta_p50_ratio": beta["p50_ms"] / base["p50_ms"],
                "beta_p95_ratio": beta["p95_ms"] / base["p95_ms"],
            }
            row["peak_rss_share_of_limit"] = row["peak_rss_mib"] / limit
            case_latencies = probe.latencies(start, end)
            row["beta_p50_ratio_ci95"] = ratio_interval(case_latencies, base_latencies, 0.5)
            row["beta_p95_ratio_ci95"] = ratio_interval(case_latencies, base_latencies, 0.95)
            part["cases"].append(row)
            print(
                f"{row['case']:>16}: {end - start:6.1f} s, service peak {row['peak_rss_mib']:6.0f} MiB "
                f"({100 * row['peak_rss_share_of_limit']:.0f}% of {limit} MiB); beta p50 {beta['p50_ms']:.1f} ms "
                f"(x{row['beta_p50_ratio']:.1f} [{row['beta_p50_ratio_ci95'][0]:.1f}, {row['beta_p50_ratio_ci95'][1]:.1f}]), "
                f"p95 {beta['p95_ms']:.1f} ms (x{row['beta_p95_ratio']:.1f} [{row['beta_p95_ratio_ci95'][0]:.1f}, "
                f"{row['beta_p95_ratio_ci95'][1]:.1f}]), "
                f"max {beta['max_ms']:.0f} ms, {beta['errors']} errors of {beta['requests']}; {what}",
                flush=True,
            )
        probe.stopped.set()
        rss.stopped.set()
        probe.join(30)
        for job_id in bench.jobs:  # the held trainers end (the service leaves workloads running when it stops)
            Path(bench.layout(job_id).root, "exit_code").write_text("0")
        time.sleep(1)
    return part


def main() -> int:
    machine = machine_facts()
    limit = deployment_memory_limit_mib()
    cases = list(CASES) if len(sys.argv) < 2 else sys.argv[1:]
    report: dict[str, Any] = {"bench": "hostile_load", "memory_limit_mib": limit, "events": EVENTS}
    report |= run_cases(cases, limit, {})
    if "events" in cases:
        # The control: the same flood on a service whose fold never rests (chunks only), with its own baseline.
        report["unpaced_control"] = run_cases(["events"], limit, {"RLJOB_PROGRESS_FOLD_CPU_SHARE": "1"})
    write_result("hostile_load.json", report, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
