"""Fixtures for the pod runner and the emulated cluster: pods built in code, runners with bounded waits."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.pods.runner import PodRunner

NS = "rljob"
TRAINER_IMAGE = "us-docker.pkg.dev/example-project/rljob/trainer:0.1.0"


def make_pod(
    *containers: dict[str, Any], name: str = "p", volumes: list[dict[str, Any]] | None = None, restart_policy: str = "Never", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": {"app": "demo", "tier": "x"},
            "annotations": {"note": "hello"},
        },
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "image": TRAINER_IMAGE, **c} for c in containers],
            "volumes": volumes or [],
            **spec,
        },
    }


def python(code: str, *args: str, **container: Any) -> dict[str, Any]:
    return {"command": ["python", "-c", code, *args], **container}


class Runs:
    """Starts PodRunners over an in-memory set of API objects; stops them all at teardown."""

    def __init__(self, work: Path) -> None:
        self.work, self.objects, self.runners = work, {}, []
        self._lock = threading.Lock()  # tests may start pods from several threads

    def add(self, kind: str, name: str, **body: Any) -> None:
        self.objects[(kind, name)] = {"kind": kind, "metadata": {"name": name, "namespace": NS}, **body}

    def start(self, pod: dict[str, Any], **kwargs: Any) -> PodRunner:
        with self._lock:
            runner = PodRunner(
                copy.deepcopy(pod),
                lookup=lambda kind, name: copy.deepcopy(self.objects.get((kind, name))),
                work_dir=self.work / f"pod{len(self.runners)}",
                restart_backoff_s=0.2,
                retry_s=0.2,
                **kwargs,
            )
            self.runners.append(runner)
        runner.start()
        return runner

    def run(self, pod: dict[str, Any], timeout_s: float = 30, **kwargs: Any) -> PodRunner:
        runner = self.start(pod, **kwargs)
        assert runner.wait(timeout_s), f"pod did not finish in {timeout_s}s: {runner.status()}"
        assert not runner.errors, runner.errors
        return runner


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def state(runner: PodRunner, container: str = "c") -> dict[str, Any]:
    return next(s for s in runner.status()["containerStatuses"] if s["name"] == container)["state"]


def log(runner: PodRunner, container: str = "c", *, previous: bool = False) -> str:
    path = runner.log_path(container, previous=previous)
    return path.read_text() if path is not None and path.exists() else ""


@pytest.fixture()
def runs(tmp_path: Path) -> Iterator[Runs]:
    r = Runs(tmp_path)
    yield r
    for runner in r.runners:
        runner.terminate(grace_s=1)
    for runner in r.runners:
        runner.wait(10)
        runner.cleanup()


@pytest_asyncio.fixture()
async def emulated(kmock: Any, tmp_path: Path) -> AsyncIterator[EmulatedCluster]:
    async with EmulatedCluster(kmock, tmp_path / "node") as cluster:
        yield cluster
