"""A reward worker: a job's reward functions run here, in a process of their own, never in the trainer's.

Run by pool.py as a script, `python -I worker.py LIFELINE_FD`, with an empty environment and a temporary working
directory. Standard library only, and nothing of rljob is imported but confinement.py, loaded by path: the only
thing of the trainer's that reaches this process is what the pool sends over the pipe. Replies are JSON, never
pickle, so the trainer never runs code it reads from here.

Two processes:
- the keeper (the pool's child, leader of its own session) asks Linux for new user, network and PID namespaces,
  then forks the server and waits on it. It watches the lifeline, a pipe only the trainer holds open: when the
  trainer dies, the keeper kills the server, so no reward code outlives the job. It learns of the server's end from
  SIGCHLD through a wakeup pipe, not pidfd_open, which gVisor does not implement.
- the server, pid 1 of the new PID namespace, sets its limits (rlimits: address space, CPU time, open files, file
  size, no core files, no new processes), confines itself (confinement.py: no capabilities, Landlock, a seccomp
  filter), tries each route to another process (reach_probes.py) and to the trainer's files (file_probes.py: what
  held is reported, not assumed), loads the user's file and answers calls. A process the reward starts (only
  possible where seccomp is missing) is killed after each call (strays.py), and when the server dies the kernel
  kills the namespace's every process.
A root trainer starts the keeper as another user (worker_user.py), so the kernel's file permissions hold too.
Where Linux refuses namespaces (a container's seccomp profile, gVisor), fewer are used (see `isolate`): the seccomp
filter is what keeps the network out (no socket() at all, by any route); where it too is missing, Python's socket
constructors raise in this process, which code can get around, and the job's log and status say the network is not
isolated. Without a PID namespace, the server is a child subreaper and kills its descendants after each call, and
the pool kills the session on a deadline. What each layer gave is reported to the pool.

Messages both ways: a 4-byte big-endian length, then that many bytes of UTF-8 JSON, at most MAX_MESSAGE_BYTES.
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import json
import math
import os
import resource
import select
import signal
import struct
import sys
import traceback
from typing import Any

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a call carries a batch's prompts and completions
MAX_ERROR_CHARS = 2000
OPEN_FILES = 64
MAX_FILE_BYTES = 256 * 1024 * 1024  # RLIMIT_FSIZE: what a reward may write into its working directory
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_HEADER = struct.Struct(">I")


def _load_beside(filename: str) -> Any:
    """A module beside this file (confinement.py, reach_probes.py), loaded by path: `python -I` puts no script
    directory on sys.path."""
    name = "rljob_reward_" + filename.removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), filename))
    if spec is None or spec.loader is None:
        raise ImportError(f"{filename} is missing beside worker.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class ProtocolError(Exception):
    """The other end sent something that is not a message (too long, cut short, not JSON)."""


def encode_message(body: dict[str, Any]) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a {len(data)}-byte message is over the {MAX_MESSAGE_BYTES}-byte bound")
    return _HEADER.pack(len(data)) + data


def decode_body(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"not a JSON message: {e}") from None
    if not isinstance(body, dict):
        raise ProtocolError("a message is a JSON object")
    return body


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message_blocking(fd: int) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a {size}-byte message is over the {MAX_MESSAGE_BYTES}-byte bound")
    return decode_body(_read_exactly(fd, size))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- isolation -------------------------------------------------------------------------------------------------

_NAMESPACE_TRIES = (
    ("user+net+pid", getattr(os, "CLONE_NEWUSER", 0) | getattr(os, "CLONE_NEWNET", 0) | getattr(os, "CLONE_NEWPID", 0)),
    ("net+pid", getattr(os, "CLONE_NEWNET", 0) | getattr(os, "CLONE_NEWPID", 0)),  # root with CAP_SYS_ADMIN, no user namespaces
    ("user+net", getattr(os, "CLONE_NEWUSER", 0) | getattr(os, "CLONE_NEWNET", 0)),
    ("net", getattr(os, "CLONE_NEWNET", 0)),
)


def isolate() -> dict[str, Any]:
    """Enter the strongest set of new namespaces Linux grants this process (its children get the PID namespace).
    Returns what was obtained, for the pool to report."""
    refusals = []
    if not hasattr(os, "unshare"):
        return {"namespaces": "", "network_isolated": False, "pid_namespace": False, "refused": "os.unshare: not Linux"}
    for name, flags in _NAMESPACE_TRIES:
        try:
            os.unshare(flags)
        except OSError as e:
            refusals.append(f"{name}: {e.strerror or e}")
            continue
        return {"namespaces": name, "network_isolated": "net" in name, "pid_namespace": "pid" in name, "refused": "; ".join(refusals)}
    return {"namespaces": "", "network_isolated": False, "pid_namespace": False, "refused": "; ".join(refusals)}


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _refuse_sockets() -> None:
    """Without a network namespace: Python's own ways to a socket raise. A reward can get around it (ctypes, a
    subprocess if it could start one): the pool reports the network as not isolated."""
    import socket

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError("network access is refused to reward functions")

    for name in ("socket", "create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
        setattr(socket, name, refused)
    import _socket

    for name in ("socket", "socketpair", "getaddrinfo", "fromfd"):
        if hasattr(_socket, name):
            setattr(_socket, name, refused)


def set_limits(memory_bytes: int, cpu_s: int) -> None:
    """The server's rlimits, set before any user code runs. RLIMIT_NPROC 0 refuses every new process and thread
    to a non-root user (root is exempt: the PID namespace or the subreaper then contains what it starts)."""
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES),
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_s),
    ]
    if hasattr(resource, "RLIMIT_NPROC"):
        limits.append((resource.RLIMIT_NPROC, 0))
    for which, value in limits:
        resource.setrlimit(which, (value, value))


# --- the server ------------------------------------------------------------------------------------------------


class ConfigView:
    """train_rl's config as the reward sees it (`tmvp_config`): its plain values (numbers, strings, booleans,
    one level of nested ones), read-only. The real object holds JAX types and never leaves the trainer."""

    def __init__(self, values: dict[str, Any]):
        for key, value in values.items():
            object.__setattr__(self, key, ConfigView(value) if isinstance(value, dict) else value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("tmvp_config is read-only")

    def get_keys(self) -> dict[str, Any]:
        return dict(vars(self))


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _load_functions(path: str, names: list[str], import_dir: str | None = None) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """`import_dir`: the original file's directory where `path` is the pool's copy of it (worker_user.py), so that its
    neighbours still import where this worker's user may read them."""
    for directory in (os.path.dirname(path), import_dir):
        if directory and directory not in sys.path:
            sys.path.append(directory)  # as MaxText's loader does: the file may import its neighbours
    module_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name if module_name.isidentifier() else "rewards", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    functions, params = {}, {}
    for name in names:
        fn = getattr(module, name, None)
        if not callable(fn):
            raise AttributeError(f"{path} defines no function {name!r}")
        functions[name] = fn
        params[name] = [[p.name, p.kind.name] for p in inspect.signature(fn).parameters.values()]
    return functions, params


def _scores(result: Any, expected: int) -> list[float | None]:
    """The reward's return as floats (None for NaN), or a TypeError saying what was wrong with it."""
    if hasattr(result, "tolist"):
        result = result.tolist()  # a numpy array
    if not isinstance(result, (list, tuple)) or len(result) != expected:
        got = f"{len(result)} values" if isinstance(result, (list, tuple)) else type(result).__name__
        raise TypeError(f"a reward function returns one number per completion ({expected}); it returned {got}")
    out: list[float | None] = []
    for value in result:
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"a reward is a number, not {type(value).__name__}")
        number = float(value)
        out.append(number if math.isfinite(number) else None)
    return out


def confine(isolation: dict[str, Any], decoys: str | None) -> None:
    """The server's own confinement (confinement.py), merged into what the pool is told: the network counts as
    isolated with a network namespace or with the seccomp filter (no socket at all); signals and other processes
    count as out of reach only where every route reach_probes.py tried from here was refused; writes and reads of
    the trainer's files only where file_probes.py's tries on the pool's decoys were refused."""
    numbers: dict[str, int] = {}
    try:
        confinement = _load_beside("confinement.py")
        held = confinement.confine(os.getcwd(), os.getpid())
        numbers = confinement.ARCHES.get(os.uname().machine, (0, {}, 0))[1]
    except Exception as e:  # noqa: BLE001 - an unknown platform's failure is reported, the worker still serves
        held = {"capabilities_dropped": False, "landlock_abi": 0, "landlock_refused": "", "seccomp": False}
        held["seccomp_refused"] = f"{type(e).__name__}: {e}"
    isolation.update(held)
    isolation.update(_load_beside("reach_probes.py").probe_own_routes(numbers, isolation["pid_namespace"]))
    isolation.update(_load_beside("file_probes.py").probe_files(decoys))
    isolation["network_isolated"] = bool(isolation["network_isolated"] or held["seccomp"])
    isolation["filesystem_confined"] = held["landlock_abi"] > 0
    if not isolation["network_isolated"]:
        _refuse_sockets()


def serve(proto_in: int, proto_out: int, isolation: dict[str, Any]) -> None:
    start = read_message_blocking(proto_in)
    kill_strays = _load_beside("strays.py").kill_strays  # loaded before the limits and the filter
    set_limits(int(start["memory_bytes"]), int(start["cpu_s"]))
    confine(isolation, start.get("decoys"))
    try:
        functions, params = _load_functions(str(start["path"]), [str(n) for n in start["names"]], start.get("import_dir"))
    except BaseException as e:  # noqa: BLE001 - anything the user's file does on import is the reply
        write_all(proto_out, encode_message({"ok": False, "error": _error_text(e), "isolation": isolation}))
        return
    write_all(proto_out, encode_message({"ok": True, "params": params, "isolation": isolation}))
    config: ConfigView | None = None
    while True:
        try:
            request = read_message_blocking(proto_in)
        except EOFError:
            return
        if "config" in request:
            config = ConfigView(request["config"])
        kwargs = dict(request["kwargs"])
        if "tmvp_config" in kwargs:
            kwargs["tmvp_config"] = config
        fatal = False
        try:
            reply: dict[str, Any] = {"ok": True, "scores": _scores(functions[request["call"]](**kwargs), len(kwargs["completions"]))}
        except MemoryError as e:
            reply, fatal = {"ok": False, "error": _error_text(e), "fatal": True}, True
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from user code are errors too
            reply = {"ok": False, "error": _error_text(e)}
            if not isinstance(e, Exception):
                reply["error"] += "\n" + "".join(traceback.format_exception_only(e))[-200:]
        kill_strays(isolation["pid_namespace"])
        usage = resource.getrusage(resource.RUSAGE_SELF)
        reply["cpu_s"] = usage.ru_utime + usage.ru_stime  # the pool retires a worker well before its RLIMIT_CPU
        write_all(proto_out, encode_message(reply))
        if fatal:
            return  # out of memory: the pool replaces this process rather than trust its heap


def keep(server: int, lifeline: int, wakeup: int) -> int:
    """The keeper's loop: the server's exit status, or kill it when the trainer is gone (the lifeline closed).
    `wakeup` is SIGCHLD's wakeup pipe (set before the fork, so an early exit is not missed)."""
    poller = select.poll()
    poller.register(lifeline, select.POLLIN | select.POLLHUP)
    poller.register(wakeup, select.POLLIN)
    while True:
        pid, status = os.waitpid(server, os.WNOHANG)
        if pid == server:
            return os.waitstatus_to_exitcode(status) & 0xFF
        ready = {fd for fd, _ in poller.poll()}
        if wakeup in ready:
            while True:
                try:
                    if not os.read(wakeup, 512):
                        break
                except BlockingIOError:
                    break
        if lifeline in ready:
            os.kill(server, signal.SIGKILL)
            poller.unregister(lifeline)  # closed for good: polling it again would spin until SIGCHLD


def main(argv: list[str]) -> int:
    lifeline = int(argv[0])
    # The protocol moves off stdin/stdout, so a reward's print() cannot corrupt it: it goes to stderr (the job's log).
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper under `python -I`
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Whom the kernel checks files against, read before a user namespace would show an unmapped uid as 65534.
    identity = {"worker_uid": os.getuid(), "worker_gid": os.getgid(), "worker_groups": sorted(os.getgroups())}
    isolation = {**isolate(), **identity}
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal reaches the wakeup pipe
    signal.set_wakeup_fd(wakeup_write)
    server = os.fork()
    if server == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wakeup_read)
        os.close(wakeup_write)
        os.close(lifeline)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper is single-threaded: its death is this process's
        if not isolation["pid_namespace"]:
            isolation["subreaper"] = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        code = 0
        try:
            serve(proto_in, proto_out, isolation)
        except BaseException:  # noqa: BLE001 - said on stderr; the pool sees the pipe close and replaces the worker
            traceback.print_exc()
            code = 70
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(proto_in)
    os.close(proto_out)
    return keep(server, lifeline, wakeup_read)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
