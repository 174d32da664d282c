"""What the reward sandbox holds on this machine's runtime: `python -m trainer sandbox-check` (docs/reward-sandbox.md).

The check starts this module as a child process (`python -m trainer.rewards_sandbox.self_check --outside-dir DIR`)
with a random secret in its environment: the child plays the train stage. It starts the real pool (pool.py) over
PROBES, a reward file that tries what a hostile reward would, calls each function once and prints one JSON object:
what the workers obtained (`isolation`), each call's outcome, and what is seen from outside the worker (a bystander
process of the same user still alive, connections that reached a loopback listener, a file in DIR, and this
process's own 0644 and 0600 files in DIR, which a reward tries to append to and to read). Each route to
another process that reach_probes.py knows (signals, SIGIO, rlimits, priority, scheduling, I/O class, memory,
pidfds) is tried against a decoy process started here (never this process or its parent); `routes` says what each
answered and whether its decoy lived. `verdict` turns that into what held. The same child runs under each emulated
runtime in tests/trainer/test_reward_sandbox_runtimes.py and on the TPU machine's real gVisor
(bench/reward_sandbox_runtime.py). The bystander gets no secret, so a worker
finding the secret anywhere found it in this process's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import reach_probes
from .confinement import ARCHES
from .pool import RewardSandboxPool, SandboxLimits

SECRET_NAME = "RLJOB_SANDBOX_CHECK_SECRET"

PROBES = '''
import ctypes, os, signal, struct, subprocess, sys

def score(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]

def environ_secrets(prompts, completions, secret, **kwargs):
    """How many processes' environments this worker could read that hold the secret."""
    found = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    found += secret.encode() in f.read()
            except OSError:
                pass
    return [float(found)] * len(completions)

def socket_reimported(prompts, completions, port, **kwargs):
    for name in ("socket", "_socket"):
        sys.modules.pop(name, None)
    import _socket
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    return [1.0] * len(completions)

def socket_ctypes(prompts, completions, port, **kwargs):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket() refused: " + os.strerror(ctypes.get_errno()))
    address = struct.pack("=H", 2) + struct.pack("!H4s8x", port, bytes([127, 0, 0, 1]))  # struct sockaddr_in
    if libc.connect(fd, address, len(address)) != 0:
        raise OSError(ctypes.get_errno(), "connect() failed: " + os.strerror(ctypes.get_errno()))
    return [1.0] * len(completions)

def socket_subprocess(prompts, completions, port, **kwargs):
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
    return [float(subprocess.run([sys.executable, "-c", code], timeout=10).returncode == 0)] * len(completions)

def kill_bystander(prompts, completions, pid, **kwargs):
    os.kill(pid, signal.SIGKILL)
    return [1.0] * len(completions)

def signal_trainer(prompts, completions, pid, **kwargs):
    os.kill(pid, 0)  # permission only: signal 0 is delivered to nobody
    return [1.0] * len(completions)

def trainer_files(prompts, completions, pid, **kwargs):
    """How many of the trainer's open files (and its memory) this worker could open through /proc."""
    opened = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK))
            opened += 1
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            opened += 1000 * (f.read(1) is not None)
    except OSError:
        pass
    return [float(opened)] * len(completions)

def write_outside(prompts, completions, directory, **kwargs):
    with open(os.path.join(directory, "written-by-a-reward"), "w") as f:
        f.write("a reward wrote here")
    return [1.0] * len(completions)

def append_trainer_file(prompts, completions, directory, **kwargs):
    with open(os.path.join(directory, "trainer-file"), "a") as f:
        f.write("a reward appended here")
    return [1.0] * len(completions)

def read_trainer_file(prompts, completions, directory, **kwargs):
    with open(os.path.join(directory, "trainer-private")) as f:
        return [float(len(f.read()))] * len(completions)
'''
NAMES = [
    "score", "environ_secrets", "socket_reimported", "socket_ctypes", "socket_subprocess", "kill_bystander",
    "signal_trainer", "trainer_files", "write_outside", "append_trainer_file", "read_trainer_file", "reach",
]  # fmt: skip
# The trainer's own files in the outside directory, with the modes rljob's files have (a run's log, the service's
# database: 0644; a token, a lock: 0600): a reward must not append to the first nor read the second.
TRAINER_FILES = {"trainer-file": 0o644, "trainer-private": 0o600}
TRAINER_TEXT = "the trainer's\n"
BATCH = {"prompts": ["p"], "completions": ["abc"]}
# The reward that tries one route against a decoy, pasted after reach_probes.py's text: the reward file is one file
# (a pod's reward container receives no other).
REACH_REWARD = """
def reach(prompts, completions, route, pid, numbers, **kwargs):
    return [float(errno_of(route, numbers, pid, pid, signal.SIGKILL))] * len(completions)
"""
# A decoy drops its capabilities first, so that a root worker (which has none) is not stopped by the kernel's own
# rule that a process may not act on one holding capabilities it lacks: what stops it must be the sandbox.
DECOY = (
    "import ctypes, sys, time; ctypes.CDLL(None).capset(ctypes.create_string_buffer((0x20080522).to_bytes(4, sys.byteorder)"
    " + bytes(4)), ctypes.create_string_buffer(24)); time.sleep(600)"
)
SIGNAL_SETTLE_S = 1.0  # how long a decoy that was sent a signal may take to die


def _listener() -> tuple[socket.socket | None, int, str]:
    try:
        listener = socket.create_server(("127.0.0.1", 0))
    except OSError as e:  # the TPU machine refuses every internet socket, loopback too
        return None, 9, f"{type(e).__name__}: {e}"
    listener.setblocking(False)
    return listener, int(listener.getsockname()[1]), ""


def _connections(listener: socket.socket | None) -> int:
    count = 0
    while listener is not None:
        try:
            listener.accept()[0].close()
        except BlockingIOError:
            break
        count += 1
    return count


def run(port: int | None, outside_dir: str) -> dict[str, Any]:
    secret = os.environ.get(SECRET_NAME, "")
    listener, listening_port, listener_error = _listener() if port is None else (None, port, "")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={"PATH": os.environ.get("PATH", "")})
    workdir = tempfile.mkdtemp(prefix="rljob-probe-")
    rewards = Path(workdir, "probe_rewards.py")
    rewards.write_text(PROBES + Path(reach_probes.__file__).read_text() + REACH_REWARD)
    decoys = _start_decoys()
    for name, mode in TRAINER_FILES.items():
        Path(outside_dir, name).write_text(TRAINER_TEXT)
        os.chmod(Path(outside_dir, name), mode)
    pool = RewardSandboxPool(str(rewards), NAMES, SandboxLimits(timeout_s=20, memory_mib=1024), size=1)
    results: dict[str, Any] = {}
    try:
        pool.start()
        arguments: dict[str, dict[str, Any]] = {
            "environ_secrets": {"secret": secret},
            "socket_reimported": {"port": listening_port},
            "socket_ctypes": {"port": listening_port},
            "socket_subprocess": {"port": listening_port},
            "kill_bystander": {"pid": bystander.pid},
            "signal_trainer": {"pid": os.getpid()},
            "trainer_files": {"pid": os.getpid()},
            "write_outside": {"directory": outside_dir},
            "append_trainer_file": {"directory": outside_dir},
            "read_trainer_file": {"directory": outside_dir},
        }
        for name in NAMES[:-1]:  # all but `reach`, which _try_routes calls once per route
            started = time.monotonic()
            result = pool.call(name, {**BATCH, **arguments.get(name, {})})
            results[name] = {
                "outcome": str(result.outcome),
                "scores": result.scores,
                "error": result.error,
                "seconds": round(time.monotonic() - started, 3),
            }
        routes = _try_routes(pool, decoys)
        return {
            "uid": os.getuid(),
            "secret_set": bool(secret),
            "isolation": pool.isolation,
            "results": results,
            "bystander_alive": bystander.poll() is None,
            "listener_error": listener_error,
            "connections_reached_listener": _connections(listener),
            "outside_file_written": Path(outside_dir, "written-by-a-reward").exists(),
            "trainer_file_appended": Path(outside_dir, "trainer-file").read_text() != TRAINER_TEXT,
            "routes": routes,
            "workers_replaced": pool.replaced,
        }
    finally:
        pool.close()
        for decoy in decoys.values():
            decoy.kill()
            decoy.wait()
        bystander.kill()
        bystander.wait()
        if listener is not None:
            listener.close()


def _start_decoys() -> dict[str, subprocess.Popen[bytes]]:
    """One decoy for each signal route (a route that reaches its decoy kills it) and one the others share, each the
    leader of a process group of its own (the group routes name it by its pid)."""
    env = {"PATH": os.environ.get("PATH", "")}
    command = [sys.executable, "-S", "-c", DECOY]
    return {name: subprocess.Popen(command, env=env, start_new_session=True) for name in (*reach_probes.SIGNAL_ROUTES, "shared")}


def _try_routes(pool: RewardSandboxPool, decoys: dict[str, subprocess.Popen[bytes]]) -> dict[str, dict[str, Any]]:
    """Each route once against its decoy, in the worker: what it answered, whether the decoy lived, whether it held."""
    numbers = ARCHES.get(platform.machine(), (0, {}, 0))[1]
    answers: dict[str, int | str] = {}
    for route in reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES:
        decoy = decoys.get(route, decoys["shared"])
        result = pool.call("reach", {**BATCH, "route": route, "pid": decoy.pid, "numbers": numbers})
        answers[route] = int(result.scores[0] or 0) if result.scores else f"{result.outcome}: {result.error}"
    settle_until = time.monotonic() + SIGNAL_SETTLE_S
    while time.monotonic() < settle_until and any(decoys[r].poll() is None and answers[r] == 0 for r in reach_probes.SIGNAL_ROUTES):
        time.sleep(0.05)  # a signal that was let through may still be on its way
    pid_namespace = bool(pool.isolation.get("pid_namespace"))
    routes = {}
    for route, answer in answers.items():
        alive = decoys.get(route, decoys["shared"]).poll() is None
        held = isinstance(answer, int) and reach_probes.held(route, answer, True, pid_namespace) and alive
        routes[route] = {"answer": reach_probes.describe(answer) if isinstance(answer, int) else answer, "decoy_alive": alive}
        routes[route]["held"] = held
    return routes


def _all_held(result: dict[str, Any], routes: tuple[str, ...]) -> bool:
    return all(result["routes"][route]["held"] for route in routes)


# What must hold wherever rljob runs rewards; the trainer's files written or read are reported, not required: a
# trainer that is not root keeps its workers' uid, and without Landlock nothing in-process stops them there
# (docs/reward-sandbox.md).
REQUIRED: dict[str, Callable[[dict[str, Any]], bool]] = {
    "a reward call is scored": lambda r: r["results"]["score"]["outcome"] == "ok" and r["workers_replaced"] == 0,
    "no environment holding the trainer's secret is read": lambda r: r["results"]["environ_secrets"]["scores"] == [0.0],
    "no internet socket opens (Python, ctypes, a subprocess)": lambda r: (
        all(r["results"][name]["outcome"] != "ok" for name in ("socket_reimported", "socket_ctypes", "socket_subprocess"))
        and r["connections_reached_listener"] == 0
    ),
    "no signal leaves the worker": lambda r: (
        r["bystander_alive"] and r["results"]["signal_trainer"]["outcome"] != "ok" and _all_held(r, reach_probes.SIGNAL_ROUTES)
    ),
    "no other process is limited, reniced, rescheduled, moved or opened": lambda r: _all_held(r, reach_probes.PROCESS_ROUTES),
    "the trainer's open files and memory stay closed": lambda r: r["results"]["trainer_files"]["scores"] == [0.0],
}


def verdict(result: dict[str, Any]) -> dict[str, dict[str, bool]]:
    """What held: `required` everywhere rljob runs rewards, `reported` where the runtime allows it."""
    return {
        "required": {what: bool(test(result)) for what, test in REQUIRED.items()},
        "reported": {
            "writes stay in the worker's directory": not result["outside_file_written"] and not result["trainer_file_appended"],
            "the trainer's 0600 files stay unread": result["results"]["read_trainer_file"]["outcome"] != "ok",
        },
    }


def check(python: str = sys.executable, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the child with a fresh secret and directory; its result with `verdict` added."""
    secret = "rljob-sandbox-check-" + secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="rljob-sandbox-check-") as outside:
        os.chmod(outside, 0o755)  # as a run's directory may be: what refuses a reward must be the files' own modes
        done = subprocess.run(
            [python, "-m", "trainer.rewards_sandbox.self_check", "--outside-dir", outside],
            env={**(env if env is not None else os.environ), SECRET_NAME: secret},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the sandbox check's child failed (exit {done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["verdict"] = verdict(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.rewards_sandbox.self_check")
    parser.add_argument("--port", type=int, default=None, help="a loopback port to try (default: a listener of this process)")
    parser.add_argument("--outside-dir", required=True, help="a directory this process may write and a worker must not")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.port, args.outside_dir), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
