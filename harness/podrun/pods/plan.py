"""One container's process, decided before it starts: argv, environment, working directory, the path
mapping, its user, and the loopback ports it will listen on. Pure functions; raising means the kubelet
would not start it (ContainerConfigError, StartError).

Paths. The process sees this machine's filesystem with directories bound over container paths
(process.py: real bind mounts in a mount namespace of its own, or proot where namespaces are refused):
each volume mount at its mountPath, the project venv at the image's VIRTUAL_ENV, and a per-container
directory for the image's WORKDIR, HOME (when the Dockerfile sets it) and /tmp. So `/etc/rljob/spec.json` or
the service-account token path is readable as written, by Python and native code alike; nothing in argv or env is rewritten for paths.

Ports. There is no network namespace: every pod shares this machine's loopback, so each declared
containerPort gets a free loopback port, and the process learns it because the runner rewrites what
tells it where to listen: `--port N`/`--port=N` in argv and env variables named *PORT whose value is N;
`--host 0.0.0.0` becomes 127.0.0.1 (tests listen on loopback only). Probes then use the new port.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.rollout.native_cache import CACHE_VARIABLE, cache_dir

from .envvars import ContainerConfigError, expand_refs
from .guard import guard_source, guarded_pth
from .images import ImageConfig
from .volumes import Mount

ALL_INTERFACES = "0.0.0.0"
LOOPBACK = "127.0.0.1"


class StartError(Exception):
    """The runtime could not start the process (containerd's StartError, exit code 128)."""

    exit_code = 128


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    argv: list[str]  # argv[0]: the executable's path in the container
    env: dict[str, str]
    cwd: str
    binds: list[tuple[Path, str]]  # host path -> container path
    uid: int
    gid: int
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> loopback port
    named_ports: dict[str, int] = field(default_factory=dict)  # port name -> containerPort
    guard: str = ""  # the venv's .pth text with the line that enforces read-only paths (guard.py)
    guard_name: str = ""  # that .pth file's name
    guard_paths: list[str] = field(default_factory=list)  # where Python reads it in the container


def to_host(guest: str, binds: list[tuple[Path, str]]) -> Path:
    """Where a container path lives on this machine: under the deepest bind that covers it, else itself."""
    best: tuple[Path, str] | None = None
    for host, prefix in binds:
        if guest == prefix or guest.startswith(prefix.rstrip("/") + "/"):
            if best is None or len(prefix) > len(best[1]):
                best = (host, prefix)
    if best is None:
        return Path(guest)
    rest = guest[len(best[1]) :].lstrip("/")
    return best[0] / rest if rest else best[0]


def resolve_executable(name: str, path_var: str, binds: list[tuple[Path, str]]) -> str:
    """The container path of argv[0], found as the runtime finds it: as given if it has a '/', else on PATH."""
    candidates = [name] if "/" in name else [f"{d.rstrip('/')}/{name}" for d in path_var.split(":") if d]
    for guest in candidates:
        host = to_host(guest, binds)
        if host.is_file() and os.access(host, os.X_OK):
            return guest
    where = "" if "/" in name else " in $PATH"
    raise StartError(
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        f'failed: unable to start container process: exec: "{name}": executable file not found{where}: unknown'
    )


def process_argv(container: dict[str, Any], image: ImageConfig, env: dict[str, str]) -> list[str]:
    """Kubernetes' rule: `command` replaces ENTRYPOINT (and drops CMD), `args` replaces CMD; `$(VAR)` expands."""
    if container.get("command"):
        argv = [*container["command"], *(container.get("args") or [])]
    else:
        argv = [*image.entrypoint, *(container["args"] if "args" in container else image.cmd)]
    if not argv:
        raise ContainerConfigError("no command specified")
    return [expand_refs(a, env) for a in argv]


def remap_ports(argv: list[str], env: dict[str, str], ports: dict[int, int]) -> tuple[list[str], dict[str, str]]:
    """Tell the process the loopback ports it got (see the module docstring)."""
    old_new = {str(c): str(h) for c, h in ports.items()}
    out = list(argv)
    for i, tok in enumerate(out):
        prev = out[i - 1] if i else ""
        if prev in ("--port", "-p") and tok in old_new:
            out[i] = old_new[tok]
        elif prev in ("--host", "-H") and tok == ALL_INTERFACES:
            out[i] = LOOPBACK
        elif tok.startswith("--port=") and tok[7:] in old_new:
            out[i] = "--port=" + old_new[tok[7:]]
        elif tok == f"--host={ALL_INTERFACES}":
            out[i] = f"--host={LOOPBACK}"
    new_env = dict(env)
    for key, value in env.items():
        if key.upper().endswith("PORT") and value in old_new:
            new_env[key] = old_new[value]
        elif key.upper().endswith("HOST") and value == ALL_INTERFACES:
            new_env[key] = LOOPBACK
    return out, new_env


def effective_user(pod: dict[str, Any], container: dict[str, Any], image: ImageConfig) -> tuple[int, int]:
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    sc = container.get("securityContext") or {}
    image_uid, image_gid = image.uid_gid()
    uid = sc.get("runAsUser", pod_sc.get("runAsUser", image_uid))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", image_gid if image_gid is not None else 0))
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot", False))
    meta = pod["metadata"]
    who = f'(pod: "{meta["name"]}_{meta.get("namespace", "default")}({meta.get("uid", "")})", container: {container["name"]})'
    if non_root and uid is None:
        raise ContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({image.user}), cannot verify user is non-root {who}"
        )
    if non_root and uid == 0:
        raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {who}")
    return (0 if uid is None else int(uid)), int(gid)


def image_binds(image: ImageConfig, env: dict[str, str], mounts: list[Mount], rootfs: Path, venv: Path) -> list[tuple[Path, str]]:
    """The image's own directories: venv, native kernel cache, WORKDIR, HOME (if set by ENV) and /tmp, unless a mount
    covers them."""
    binds: list[tuple[Path, str]] = []
    if image.env.get("VIRTUAL_ENV"):
        binds.append((venv, image.env["VIRTUAL_ENV"]))
    if image.env.get(CACHE_VARIABLE):
        # The kernels the image builds into its cache (trainer.Dockerfile's `few_rows_matmul build`): here, what
        # bootstrap built into this machine's cache, for the same jaxlib, as the venv stands in for the image's.
        host_cache = cache_dir()
        host_cache.mkdir(parents=True, exist_ok=True)
        binds.append((host_cache, image.env[CACHE_VARIABLE]))
    for guest in {image.workdir, "/tmp", *([env["HOME"]] if "HOME" in image.env else [])}:
        if guest == "/" or any(guest == m.guest or guest.startswith(m.guest.rstrip("/") + "/") for m in mounts):
            continue
        host = rootfs / guest.lstrip("/")
        host.mkdir(parents=True, exist_ok=True)
        binds.append((host, guest))
    return binds


def checkout_bind(binds: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """The project checkout at its own path when a bind would hide it: the venv's editable install of rljob
    points there (a clone under /tmp vanished behind the image's /tmp, and the service pod never started)."""
    checkout = Path(__file__).resolve().parents[3]
    hidden = any(checkout.is_relative_to(guest) and not checkout.is_relative_to(host) for host, guest in binds)
    return [(checkout, str(checkout))] if hidden else []


def guard_pth_paths(image: ImageConfig, venv: Path) -> tuple[Path, list[str]]:
    """The venv's first `.pth` file (site runs them in name order) and where each venv path the container
    can start Python from reads it."""
    lib = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    found = sorted((venv / lib).glob("*.pth"))
    if not found:
        raise RuntimeError(
            f"podrun needs a .pth file in {venv / lib} to guard read-only paths (guard.py); "
            "the project's editable install makes one: run scripts/bootstrap.sh"
        )
    roots = {str(venv)} | ({image.env["VIRTUAL_ENV"]} if image.env.get("VIRTUAL_ENV") else set())
    return found[0], [f"{r.rstrip('/')}/{lib}/{found[0].name}" for r in sorted(roots)]


def plan_container(
    pod: dict[str, Any],
    container: dict[str, Any],
    image: ImageConfig,
    mounts: list[Mount],
    env: dict[str, str],
    *,
    rootfs: Path,
    venv: Path,
    ports: dict[int, int],
) -> ContainerPlan:
    uid, gid = effective_user(pod, container, image)
    env = dict(env)
    env.setdefault("HOME", image.home)
    binds = image_binds(image, env, mounts, rootfs, venv) + [(m.host, m.guest) for m in mounts]
    binds += checkout_bind(binds)
    argv = process_argv(container, image, env)
    argv, env = remap_ports(argv, env, ports)
    argv[0] = resolve_executable(argv[0], env.get("PATH", ""), binds)
    cwd = container.get("workingDir") or image.workdir
    sc = container.get("securityContext") or {}
    guard = guard_source(
        read_only_root=bool(sc.get("readOnlyRootFilesystem")),
        writable=[m.guest for m in mounts if not m.read_only],
        read_only=[m.guest for m in mounts if m.read_only],
    )
    pth, guard_paths = guard_pth_paths(image, venv)
    named = {p["name"]: int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name")}
    return ContainerPlan(
        name=container["name"],
        argv=argv,
        env=env,
        cwd=cwd,
        binds=binds,
        uid=uid,
        gid=gid,
        ports=dict(ports),
        named_ports=named,
        guard=guarded_pth(pth.read_text(), guard),
        guard_name=pth.name,
        guard_paths=guard_paths,
    )
