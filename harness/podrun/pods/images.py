"""What an image would give a container, read from our Dockerfiles: ENTRYPOINT, CMD, WORKDIR, ENV, USER.

No image is built here (no base image is reachable), so a container's image reference is mapped to the
Dockerfile it is built from (`.../rljob-trainer:tag` or `.../trainer:tag` -> docker/trainer.Dockerfile,
likewise `service`), and only the final stage's runtime settings are read. The project's venv stands in
for the image's `VIRTUAL_ENV` (both install the same packages, the venv also the dev extras); the
rest of the image's filesystem is this machine's.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = {"trainer": ROOT / "docker" / "trainer.Dockerfile", "service": ROOT / "docker" / "service.Dockerfile"}
# The python:3.12-slim base image's own ENV (docker inspect python:3.12-slim-bookworm), which our
# Dockerfiles extend with `PATH=/opt/venv/bin:$PATH`.
PYTHON_BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class ImageConfig:
    dockerfile: Path
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    user: str = "0"  # "uid[:gid]" or a name, as written after USER
    home: str = "/root"  # what the runtime sets HOME to when ENV does not: the user's passwd entry

    def uid_gid(self) -> tuple[int | None, int | None]:
        """Numeric uid/gid of USER; None where USER names a user we cannot resolve to a number."""
        name, _, group = self.user.partition(":")
        uid = int(name) if name.isdigit() else None
        gid = int(group) if group.isdigit() else uid
        return uid, gid


def image_name(ref: str) -> str:
    """`us-docker.pkg.dev/p/rljob/trainer:0.1.0` -> `trainer`; `rljob-service@sha256:...` -> `service`."""
    last = ref.rsplit("/", 1)[-1]
    last = last.split("@", 1)[0].split(":", 1)[0]
    return last.removeprefix("rljob-")


def image_for(ref: str) -> ImageConfig | None:
    path = DOCKERFILES.get(image_name(ref))
    return parse_dockerfile(path.read_text(), path) if path else None


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def _expand(value: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def _exec_form(arg: str) -> list[str]:
    arg = arg.strip()
    if arg.startswith("["):
        return [str(x) for x in json.loads(arg)]
    return ["/bin/sh", "-c", arg]  # shell form, as Docker runs it


def _env_pairs(arg: str) -> list[tuple[str, str]]:
    if "=" not in arg.split(None, 1)[0]:  # legacy `ENV KEY value`
        key, _, value = arg.partition(" ")
        return [(key, value.strip())]
    return [tuple(tok.split("=", 1)) for tok in shlex.split(arg)]  # type: ignore[misc]


def _passwd_home(lines: list[str], user: str) -> str | None:
    """Home directory that a `useradd` in the Dockerfile gave `user` (by name or uid)."""
    name = user.split(":", 1)[0]
    for line in lines:
        for cmd in line.split("&&"):
            words = shlex.split(cmd.replace("RUN ", "", 1)) if "useradd" in cmd else []
            if "useradd" not in words:
                continue
            opts = dict(zip(words, words[1:], strict=False))
            uid, login = opts.get("--uid") or opts.get("-u"), words[-1]
            if name in (uid, login):
                return opts.get("--home-dir") or opts.get("-d") or f"/home/{login}"
    return None


def parse_dockerfile(text: str, path: Path) -> ImageConfig:
    lines = _logical_lines(text)
    last_from = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    env = dict(PYTHON_BASE_ENV)
    entrypoint: list[str] = []
    cmd: list[str] = []
    workdir, user = "/", "0"
    for line in lines[last_from + 1 :]:
        keyword, _, arg = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ENV":
            for key, value in _env_pairs(arg):
                env[key] = _expand(value, env)
        elif keyword == "WORKDIR":
            target = _expand(arg.strip(), env)
            workdir = target if target.startswith("/") else f"{workdir.rstrip('/')}/{target}"
        elif keyword == "USER":
            user = _expand(arg.strip(), env)
        elif keyword == "ENTRYPOINT":
            entrypoint, cmd = _exec_form(arg), []  # a new ENTRYPOINT resets CMD, as in Docker
        elif keyword == "CMD":
            cmd = _exec_form(arg)
    home = env.get("HOME") or _passwd_home(lines, user) or ("/root" if user.split(":")[0] in ("0", "root") else "/")
    return ImageConfig(dockerfile=path, entrypoint=entrypoint, cmd=cmd, workdir=workdir, env=env, user=user, home=home)
