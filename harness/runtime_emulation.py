"""Run a command as the container runtimes rljob's trainer meets would run it, on this machine.

    python -m harness.runtime_emulation --runtime {gvisor,runtime-default} [--uid UID] -- COMMAND...

What each emulation does before it execs COMMAND (the filter and the capabilities stay with it and its children):
- `runtime-default`: containerd's RuntimeDefault seccomp profile (contrib/seccomp/seccomp_default.go at 96929a5)
  as a pod without CAP_SYS_ADMIN and CAP_SYS_PTRACE gets it: unshare, setns, mount and the new mount API, bpf,
  perf_event_open, kcmp, process_vm_readv/writev, pidfd_getfd, process_madvise, keyctl/add_key/request_key and
  userfaultfd answer EPERM (the profile lists them only under those capabilities, or not at all, and its default
  action is EPERM), clone with a namespace flag answers EPERM and clone3 ENOSYS; as root, the capabilities are
  containerd's default set for a container (oci/spec.go, defaultUnixCaps).
- `gvisor`: what gVisor (runsc, the TPU machine's runtime and GKE Sandbox's) answered there on 2026-12-05
  (bench/results/reward_sandbox_runtimes.json has the run): unshare of every namespace, pidfd_open, clone3 and
  Landlock's calls answer ENOSYS; seccomp filters, prctl and capset work; as root, the capabilities are the bounding
  set that machine showed (0xa82c35fb).
- `--uid UID`: the command runs as that user (no groups), with no capabilities. Started as root, this needs a mount
  namespace of its own: where the interpreter's installation, the venv, the checkout or the working directory sits
  under a directory other users cannot enter (pyenv under /root, a clone in root's 0700 home), a tmpfs with mode 755
  takes that directory's place and each is bound back at its own path, so the same interpreter, venv and checkout
  run as UID.
- as root (no `--uid`), they are made reachable the same way, as the installation is in rljob's image (/usr/local):
  a root trainer starts its reward workers as another user (trainer/rewards_sandbox/worker_user.py), who must be
  able to run the interpreter.
Only the system calls rljob's reward sandbox uses or a hostile reward would try are emulated: each profile allows
much else, and refuses more, than is listed here.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import sys
import tempfile
from pathlib import Path

from trainer.rewards_sandbox import confinement
from trainer.rewards_sandbox.confinement import Rule

CHECKOUT = Path(__file__).resolve().parents[1]
CLONE_NEW_ANY = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x02000000
# NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP: the mask the profile's clone rule tests

RUNTIME_DEFAULT = [
    *(
        Rule(name)
        for name in (
            "unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
            "fsmount", "fspick", "mount_setattr", "bpf", "perf_event_open", "kcmp", "process_vm_readv",
            "process_vm_writev", "pidfd_getfd", "process_madvise", "keyctl", "add_key", "request_key", "userfaultfd",
        )
    ),
    Rule("clone", refuse_arg0_bits=CLONE_NEW_ANY),
    Rule("clone3", errno_=errno.ENOSYS),
]  # fmt: skip
GVISOR = [
    Rule(name, errno_=errno.ENOSYS)
    for name in ("unshare", "setns", "pidfd_open", "clone3", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
]

CONTAINERD_DEFAULT_CAPS = (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31)  # CHOWN ... SETFCAP (oci/spec.go)
GVISOR_SEEN_CAPS = tuple(bit for bit in range(64) if 0xA82C35FB >> bit & 1)
RUNTIMES = {"runtime-default": (RUNTIME_DEFAULT, CONTAINERD_DEFAULT_CAPS), "gvisor": (GVISOR, GVISOR_SEEN_CAPS)}

_libc = ctypes.CDLL(None, use_errno=True)
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def encode(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    _check(_libc.mount(encode(source), target.encode(), encode(fstype), flags, encode(data)), f"mount {target}")


def _reachable_for_everyone(paths: list[Path]) -> None:
    """In this process's own mount namespace: make each of `paths` (the interpreter's installation, the venv, the
    checkout) reachable by any user. All at once: a tmpfs laid over a closed directory hides every path beneath it,
    so each is held aside first and bound back after (a checkout cloned into root's 0700 home holds its venv)."""

    def closed_parent(path: Path) -> Path | None:
        return next((p for p in reversed(path.parents) if p != Path("/") and not os.stat(p).st_mode & 0o001), None)

    wanted = sorted({p for p in paths if closed_parent(p) is not None}, key=lambda p: len(p.parts))
    wanted = [p for i, p in enumerate(wanted) if not any(p.is_relative_to(q) for q in wanted[:i])]  # nested: the outer one suffices
    if not wanted:
        return
    # Each path's topmost closed directory: two of them are never nested (the outer one would be the inner's topmost).
    closed = {c for c in (closed_parent(p) for p in wanted) if c is not None}
    held = {p: tempfile.mkdtemp(prefix="rljob-emulated-") for p in wanted}
    for path, aside in held.items():
        _mount(str(path), aside, None, _MS_BIND | _MS_REC)
    for directory in closed:
        _mount("tmpfs", str(directory), "tmpfs", 0, "mode=755")
    for path, aside in held.items():
        path.mkdir(parents=True, exist_ok=True)
        _mount(aside, str(path), None, _MS_BIND | _MS_REC)
        _check(_libc.umount2(aside.encode(), 2), f"umount {aside}")  # MNT_DETACH: the path stays bound where it was
        os.rmdir(aside)


def installation_for_everyone() -> None:
    """In a mount namespace of this process's own, the interpreter's installation, the venv and the checkout reachable
    by any user."""
    os.unshare(os.CLONE_NEWNS)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing here reaches the machine's mounts
    _reachable_for_everyone([Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.prefix, CHECKOUT, os.getcwd())])


def become(uid: int) -> None:
    if os.getuid() == uid:
        return
    installation_for_everyone()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # every capability goes with root


def keep_only(capabilities: tuple[int, ...]) -> None:
    """This root process's capabilities cut to `capabilities` (the bounding set too, so nothing regains the rest)."""
    for capability in range(64):
        if capability not in capabilities and _libc.prctl(24, capability, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # PR_CAPBSET_DROP; EINVAL: past the last capability this kernel knows
    mask = sum(1 << bit for bit in capabilities)
    words = (mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0, mask >> 32, mask >> 32, 0)  # effective, permitted, inheritable
    header = ctypes.create_string_buffer((0x20080522).to_bytes(4, sys.byteorder) + bytes(4))
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)(*words)), "capset")


def emulate(runtime: str, uid: int | None) -> None:
    rules, capabilities = RUNTIMES[runtime]
    if uid is not None:
        become(uid)
    elif os.getuid() == 0:
        installation_for_everyone()
        keep_only(capabilities)
    problem = confinement.install_filter(confinement.build_filter(rules))
    if problem:
        raise OSError(problem)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runtime_emulation")
    parser.add_argument("--runtime", choices=sorted(RUNTIMES), required=True)
    parser.add_argument("--uid", type=int, default=None, help="run as this user (from root: a mount namespace of its own)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    emulate(args.runtime, args.uid)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
