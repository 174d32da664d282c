"""The three backends bench/control_plane/kill_loop.py kills the service on, and the watchers it counts with.

Each backend is a context manager yielding a `Backend`: the RLJOB_* environment the service process
is started with, the database it writes (the audit reads it directly), where runs go, and for
Kubernetes how many Jobs were created per job id.

- local-sqlite: the local launcher, SQLite in the state directory (the embedded default);
- local-postgres: the local launcher, a throwaway Debian PostgreSQL (harness/pg_server.py);
- k8s-kmock: the Kubernetes launcher against kmock, with the emulated Job controller and kubelet of
  harness/podrun running each Job's pod as a local process (harness/podrun/pods/process.py), on its own event loop thread.
  kmock stands in for the API server and outlives every service kill, as a cluster would. The trainer
  container's command is swapped for the stand-in trainer on create (what a mutating webhook could
  do); everything else is the manifest the service rendered.

The stand-in trainer (harness/fake_trainer.py) waits at its gate file after the first train step,
so the bench decides when each job ends and jobs are still running when the service dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

REPO = Path(__file__).resolve().parents[2]
FAKE_TRAINER = REPO / "harness" / "fake_trainer.py"
K8S_NAMESPACE = "rljob"
TRAINER_IMAGE = "us-docker.pkg.dev/example-project/rljob/trainer:0.1.0"
BACKENDS = ("local-sqlite", "local-postgres", "k8s-kmock")


@dataclass
class Backend:
    name: str
    env: dict[str, str]  # RLJOB_* settings of the service process
    database_url: str
    runs_dir: Path  # the specs' `output`: <runs_dir>/<job id>/{gate, starts, events.jsonl}
    spec_base: dict[str, Any]  # model, hardware, output of every submitted spec
    jobs_created: dict[str, list[str]] = field(default_factory=dict)  # job id -> uids of the K8s Jobs created
    cluster_failure: list[str] = field(default_factory=list)  # the emulator's own errors, if any


def _local_env(work: Path, database_url: str) -> dict[str, str]:
    return {
        "RLJOB_LAUNCHER": "local",
        "RLJOB_DATABASE_URL": database_url,
        "RLJOB_TRAINER_COMMAND": json.dumps([sys.executable, str(FAKE_TRAINER)]),
        "RLJOB_MAX_CONCURRENT_JOBS": "4",  # fewer than the bench keeps running: the launcher's queue is exercised
        "RLJOB_LOCAL_POLL_INTERVAL_S": "0.1",
        "RLJOB_CANCEL_GRACE_S": "5",
    }


def _spec_base(runs_dir: Path, model_source: str) -> dict[str, Any]:
    return {
        "model": {"source": model_source},
        "dataset": {"name": "org/data"},
        "hardware": {
            "accelerator": "cpu",
            "chips_per_vm": 1,
            "rollout_engine": "jax",
            "rollout_data_parallelism": 1,
            "rollout_tensor_parallelism": 1,
        },
        "output": str(runs_dir),
    }


@contextlib.contextmanager
def local_sqlite(work: Path) -> Iterator[Backend]:
    url = f"sqlite:///{work / 'state' / 'rljob.db'}"
    yield Backend("local-sqlite", _local_env(work, url), url, work / "runs", _spec_base(work / "runs", "/models/tiny"))


@contextlib.contextmanager
def local_postgres(work: Path) -> Iterator[Backend]:
    from sqlalchemy import create_engine, text

    from harness.pg_server import postgres_url

    with postgres_url() as server:
        name = f"rljob_kill_{uuid.uuid4().hex[:8]}"
        admin = create_engine(server, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        url = server.rsplit("/", 1)[0] + f"/{name}"
        yield Backend("local-postgres", _local_env(work, url), url, work / "runs", _spec_base(work / "runs", "/models/tiny"))


class EmulatorThread:
    """kmock + EmulatedCluster on an event loop in a thread of their own; stopped on exit."""

    def __init__(self, node_dir: Path, jobs_created: dict[str, list[str]]) -> None:
        self.node_dir, self.jobs_created = node_dir, jobs_created
        self.url = ""
        self.failure: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._cluster: Any = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="kmock", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(60) or not self.url:
            raise RuntimeError(f"the emulated cluster did not start: {self.failure}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def cluster_failure(self) -> BaseException | None:
        return self.failure or (self._cluster.failure if self._cluster is not None else None)

    async def _main(self) -> None:
        import kmock

        from harness.podrun.cluster import EmulatedCluster
        from harness.podrun.manifests import service_accounts

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with kmock.KubernetesEmulator() as km, kmock.Server(km) as server:
                self._install_create_hook(km)
                async with EmulatedCluster(km, self.node_dir / "kubelet", install_defaults=False) as cluster:
                    self._cluster = cluster
                    for account in service_accounts():
                        await cluster.create(account)
                    self.url = str(server.url).rstrip("/")
                    self._ready.set()
                    await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported by the bench
            self.failure = e
            self._ready.set()

    def _install_create_hook(self, km: Any) -> None:
        """What the API server stamps on create (uid, creationTimestamp), plus: the trainer command becomes
        the stand-in trainer, and every Job created is counted under its job id."""
        import kmock

        from harness.podrun.api.kapi import now_iso

        def on_create(request: Any) -> Any:
            meta = request.data.get("metadata", {})
            obj = km.objects[request.resource, request.namespace or meta.get("namespace"), meta["name"]]
            if obj.get("metadata", {}).get("uid"):
                return dict(obj.raw)
            uid = str(uuid.uuid4())
            patch: dict[str, Any] = {"metadata": {"uid": uid, "creationTimestamp": meta.get("creationTimestamp") or now_iso()}}
            if request.resource.plural == "jobs":
                job_id = (meta.get("labels") or {}).get("rljob.dev/job-id", meta["name"])
                self.jobs_created.setdefault(job_id, []).append(uid)
                patch["spec"] = {"template": {"spec": _stand_in_pod_spec(obj.raw)}}
            obj.patch(patch)
            return dict(obj.raw)

        km[kmock.action.CREATE] << 201 << on_create


def _stand_in_pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    """The trainer container runs the stand-in from this checkout, mounted into the pod read-only at
    its own path (a pod sees its own /tmp, and the checkout may live there)."""
    pod = copy.deepcopy(job["spec"]["template"]["spec"])
    trainer = pod["containers"][0]
    command = list(trainer["command"])
    assert command[:3] == ["python", "-m", "trainer"], command  # the rendered command, checked before swapping
    trainer["command"] = ["python", str(FAKE_TRAINER), *command[3:]]
    trainer["env"] = [*(trainer.get("env") or []), {"name": "PYTHONPATH", "value": str(REPO)}]
    trainer["volumeMounts"] = [*(trainer.get("volumeMounts") or []), {"name": "bench-checkout", "mountPath": str(REPO), "readOnly": True}]
    volumes = [*(pod.get("volumes") or []), {"name": "bench-checkout", "hostPath": {"path": str(REPO), "type": "Directory"}}]
    return {"containers": pod["containers"], "volumes": volumes}


@contextlib.contextmanager
def k8s_kmock(work: Path) -> Iterator[Backend]:
    node_dir = work / "node"
    runs = node_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    created: dict[str, list[str]] = {}
    with EmulatorThread(node_dir, created) as emulator:
        kubeconfig = work / "kubeconfig.yaml"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "kmock",
                    "clusters": [{"name": "kmock", "cluster": {"server": emulator.url}}],
                    "users": [{"name": "bench", "user": {}}],
                    "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "bench", "namespace": K8S_NAMESPACE}}],
                }
            )
        )
        url = f"sqlite:///{work / 'state' / 'rljob.db'}"
        env = {
            "RLJOB_LAUNCHER": "kubernetes",
            "RLJOB_DATABASE_URL": url,
            "RLJOB_K8S_KUBECONFIG": str(kubeconfig),
            "RLJOB_K8S_NAMESPACE": K8S_NAMESPACE,
            "RLJOB_K8S_IMAGE": TRAINER_IMAGE,
            "RLJOB_K8S_HOST_PATHS": json.dumps([str(node_dir)]),
            # Small pods: the emulated node is this machine (2 cores); many trainers must fit at once.
            "RLJOB_K8S_CPU_JOB_CPU": "50m",
            "RLJOB_K8S_CPU_JOB_MEMORY": "128Mi",
            "RLJOB_K8S_CPU_JOB_SHM_SIZE": "16Mi",
            "RLJOB_K8S_TERMINATION_GRACE_S": "30",
            "RLJOB_K8S_WATCH_TIMEOUT_S": "10",
            "RLJOB_K8S_WATCH_RESYNC_INTERVAL_S": "2",
            "RLJOB_K8S_RETRY_BACKOFF_S": "0.1",
            "RLJOB_K8S_RETRY_BACKOFF_MAX_S": "1",
            "RLJOB_K8S_REQUEST_TIMEOUT_S": "10",
        }
        backend = Backend("k8s-kmock", env, url, runs, _spec_base(runs, "org/model"), jobs_created=created)
        try:
            yield backend
        finally:
            failure = emulator.cluster_failure()
            if failure is not None:
                backend.cluster_failure.append(repr(failure))


def open_backend(name: str, work: Path) -> contextlib.AbstractContextManager[Backend]:
    return {"local-sqlite": local_sqlite, "local-postgres": local_postgres, "k8s-kmock": k8s_kmock}[name](work)


def live_trainers() -> dict[str, list[int]]:
    """Stand-in trainer processes alive now, by job id (from /proc; wrappers such as the local job
    runner or proot name the trainer later in their argv and are not counted)."""
    out: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if len(argv) < 2 or not argv[1].endswith(b"fake_trainer.py") or state == "Z" or b"--job-id" not in argv:
            continue
        job_id = argv[argv.index(b"--job-id") + 1].decode()
        out.setdefault(job_id, []).append(int(entry.name))
    return out
