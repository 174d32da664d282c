"""Run one pod of a rendered manifest here, as the kubelet would (see harness/podrun/__init__.py):

    kubectl kustomize k8s/overlays/dev > /tmp/dev.yaml
    .venv/bin/python -m harness.podrun /tmp/dev.yaml --run Deployment/rljob-service \\
        --secret rljob-api-tokens bootstrap=$(openssl rand -hex 32)

FILES hold the object to run (a Pod, or the pod template of a Deployment, Job or JobSet) and the
Secrets, ConfigMaps, ServiceAccounts and Services it may refer to; `--secret NAME KEY=VALUE` adds a
Secret (what an operator creates by hand). The container logs stream to stdout, status changes to
stderr; Ctrl-C deletes the pod (SIGTERM, then SIGKILL after its grace period). There is no API server:
an in-cluster client in the pod has nothing to talk to (tests use EmulatedCluster for that).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from harness.podrun.pods.runner import PodRunner


def pod_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    if obj["kind"] == "Pod":
        return copy.deepcopy(obj)
    if obj["kind"] == "JobSet":
        template = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    else:  # Deployment, Job, StatefulSet, ...: spec.template
        template = obj["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **copy.deepcopy(template.get("metadata") or {}),
            "name": f"{meta['name']}-podrun",
            "namespace": meta.get("namespace", "default"),
            "uid": "podrun-cli",
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.podrun", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--run", help="KIND/NAME of the object whose pod to run (default: the only runnable one)")
    parser.add_argument("--secret", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"))
    parser.add_argument("--work-dir", type=Path, help="where volumes and logs go (default: a new temp dir)")
    args = parser.parse_args(argv)

    docs = [d for f in args.files for d in yaml.safe_load_all(f.read_text()) if d]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for name, *pairs in args.secret:
        objects[("Secret", name)] = {"kind": "Secret", "metadata": {"name": name}, "stringData": dict(p.split("=", 1) for p in pairs)}
    runnable = [d for d in docs if d["kind"] in ("Pod", "Deployment", "Job", "JobSet", "StatefulSet", "DaemonSet")]
    if args.run:
        kind, _, name = args.run.partition("/")
        runnable = [d for d in runnable if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    if len(runnable) != 1:
        parser.error(f"pick one object to run with --run KIND/NAME (found {len(runnable)})")
    pod = pod_of(runnable[0])
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="podrun-"))
    services = [d for d in docs if d["kind"] == "Service"]
    runner = PodRunner(pod, lookup=lambda kind, name: copy.deepcopy(objects.get((kind, name))), work_dir=work, services=services)
    runner.start()
    print(f"podrun: {pod['metadata']['name']} in {work}", file=sys.stderr)
    offsets: dict[Path, int] = {}
    last = None
    try:
        while not runner.finished():
            last = _report(runner, pod, offsets, last)
            time.sleep(0.2)
    except KeyboardInterrupt:
        runner.terminate()
        runner.wait(runner.grace_s + 5)
    _report(runner, pod, offsets, last)
    runner.cleanup()
    if runner.errors:
        raise runner.errors[0]
    codes = [(s["state"].get("terminated") or {}).get("exitCode", 1) for s in runner.status()["containerStatuses"]]
    return max(codes, default=1)


def _report(runner: PodRunner, pod: dict[str, Any], offsets: dict[Path, int], last: Any) -> Any:
    for container in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
        path = runner.log_path(container["name"])
        if path is not None and path.exists():
            with path.open("rb") as f:
                f.seek(offsets.get(path, 0))
                chunk = f.read()
            offsets[path] = offsets.get(path, 0) + len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
    for event in runner.drain_events():
        print(f"podrun: event {event.type} {event.reason}: {event.message}", file=sys.stderr)
    status = runner.status()
    summary = (status["phase"], [json.dumps(s["state"]) for s in status["containerStatuses"]])
    if summary != last:
        print(f"podrun: {status['phase']} {' '.join(summary[1])}", file=sys.stderr)
    return summary


if __name__ == "__main__":
    sys.exit(main())
