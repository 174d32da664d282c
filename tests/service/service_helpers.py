"""Helpers shared by the service tests (`from tests.service.service_helpers import ...`)."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from service.domain.records.phases import JobPhase, can_reach
from trainer.contract import JobSpec

TOKEN_A = "a" * 8 + uuid.uuid4().hex + "-team-a"
TOKEN_B = "b" * 8 + uuid.uuid4().hex + "-team-b"
TOKEN_ADMIN = "c" * 8 + uuid.uuid4().hex + "-admin"


@contextmanager
def refused_url() -> Iterator[str]:
    """An http URL on loopback whose connections are refused for as long as the block runs.

    The port is bound and never listened on: a port free_port() gave and let go can be taken meanwhile by a service
    another fixture starts, and then the "unreachable" URL answers.
    """
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def spec_body(tmp_path: Path, name: str = "job-one", **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": name,
        "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": str(tmp_path / "runs"),
    }
    body.update(extra)
    return body


def record_spec(output: str = "/tmp/rljob-runs", **extra: object) -> JobSpec:
    """A valid JobSpec for a JobRecord built by hand (a record holds a parsed spec), on cpu unless
    `hardware` says otherwise."""
    return JobSpec.model_validate({**spec_body(Path(output).parent, **extra), "output": output})


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0, interval_s: float = 0.02) -> None:
    """Poll real state (threads and child processes run in real time); bounded."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


# Supervisor.start's loops (service/supervisor.py): one thread of each per leading replica in a process.
SUPERVISOR_LOOPS = ("rljob-observations", "rljob-recovery", "rljob-attached-evals")


def supervisor_threads(earlier: Collection[threading.Thread] = ()) -> dict[str, int]:
    """How many threads of each supervisor loop are alive in this process, leaving out the `earlier` ones (what an
    earlier test in this process may have left). A renamed loop counts 0: a test of one supervisor fails."""
    names = [thread.name for thread in threading.enumerate() if thread not in earlier]
    return {name: names.count(name) for name in SUPERVISOR_LOOPS}


def wait_for_phase(read_phase: Callable[[], str | JobPhase], target: JobPhase, timeout_s: float = 20.0) -> list[JobPhase]:
    """Wait until the phase is `target`, asserting every phase seen on the way is a legal move."""
    seen = [JobPhase(read_phase())]
    deadline = time.monotonic() + timeout_s
    while seen[-1] is not target:
        if time.monotonic() > deadline:
            raise AssertionError(f"phase is {seen[-1]} after {timeout_s}s, wanted {target}; saw {seen}")
        if seen[-1].is_terminal():
            raise AssertionError(f"job ended {seen[-1]}, wanted {target}; saw {seen}")
        time.sleep(0.02)
        phase = JobPhase(read_phase())
        if phase is not seen[-1]:
            # Polling can skip intermediate phases; it must never see a move backwards or sideways
            # that no chain of legal transitions explains.
            assert can_reach(seen[-1], phase), f"illegal phase change {seen[-1]} -> {phase} (saw {seen})"
            seen.append(phase)
    return seen


T0 = datetime(2030, 1, 1, tzinfo=UTC)


class ManualClock:
    """An injected clock the test moves by hand, so no test sleeps for real."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
