"""The reward worker's seccomp filter and its system call table (trainer/rewards_sandbox/confinement.py): the numbers
are the kernel's own (read from the installed kernel headers), and the filter refuses what it says, allows what a
reward needs (threads, a socketpair, signals to itself) and refuses x86_64's x32 calls, in a real process."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainer.rewards_sandbox import confinement, reach_probes

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # arm64's table is the generic one
}


@pytest.mark.parametrize("machine", sorted(confinement.ARCHES))
def test_every_system_call_number_is_the_kernels(machine):
    text = HEADERS[machine].read_text()
    kernel = {name: int(number) for name, number in re.findall(r"#define __NR_(\w+)\s+(\d+)", text)}
    split = {name: int(number) for name, number in re.findall(r"#define __NR3264_(\w+)\s+(\d+)", text)}
    aliases = re.findall(r"#define __NR_(\w+)\s+__NR3264_(\w+)", text)  # fcntl: one name per word size
    kernel |= {name: split[alias] for name, alias in aliases if alias in split}
    ours = confinement.ARCHES[machine][1]
    assert {name: kernel.get(name) for name in ours} == ours


ATTEMPT = """
def attempt(name, call):
    try:
        call()
        seen[name] = "allowed"
    except OSError as e:
        seen[name] = errno.errorcode.get(e.errno, str(e.errno))
"""  # the probes' way to try a call: its errno, or "allowed"

PROBE = (
    r"""
import ctypes, errno, json, os, signal, socket, sys, threading
sys.path.insert(0, sys.argv[1])
from trainer.rewards_sandbox import confinement, reach_probes

assert confinement.install_filter(confinement.build_filter(confinement.reward_rules(os.getpid()))) == ""
libc = ctypes.CDLL(None, use_errno=True)
seen = {}

"""
    + ATTEMPT
    + r"""

def raw(number, *args):
    if libc.syscall(number, *args) < 0:
        raise OSError(ctypes.get_errno(), "refused")

done = []
attempt("thread", lambda: (lambda t: (t.start(), t.join()))(threading.Thread(target=lambda: done.append(1))))
attempt("socketpair", lambda: socket.socketpair())
attempt("kill_self", lambda: os.kill(os.getpid(), 0))
attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
attempt("socket_unix", lambda: socket.socket(socket.AF_UNIX))
attempt("socket_inet", lambda: socket.socket(socket.AF_INET))
attempt("fork", lambda: os.fork())
attempt("exec", lambda: os.execv("/bin/true", ["/bin/true"]))
# PTRACE_SEIZE, not PTRACE_ATTACH: were the rule missing, ATTACH would leave pytest stopped and the suite hung
attempt("ptrace", lambda: raw(confinement.ARCHES[confinement.platform.machine()][1]["ptrace"], 0x4206, os.getppid(), 0, 0))
attempt("unshare", lambda: os.unshare(os.CLONE_NEWNET))
attempt("clone3", lambda: raw(435, None, 0))
if confinement.platform.machine() == "x86_64":
    attempt("x32_getpid", lambda: raw(0x40000000 | 39))
seen["thread_ran"] = done == [1]
print(json.dumps(seen))
"""
)

# Every route to another process against decoys of this test's own (started before the filter, which refuses fork);
# then what the worker may still do to itself, and the same calls with the high word of the argument set.
ROUTES_PROBE = (
    r"""
import ctypes, errno, fcntl, json, os, resource, signal, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from trainer.rewards_sandbox import confinement, reach_probes

numbers = confinement.ARCHES[confinement.platform.machine()][1]
routes = reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES
decoy_code = "import time; time.sleep(30)"
quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
decoys = {r: subprocess.Popen([sys.executable, "-S", "-c", decoy_code], start_new_session=True, **quiet) for r in routes}
assert confinement.install_filter(confinement.build_filter(confinement.reward_rules(os.getpid()))) == ""
libc = ctypes.CDLL(None, use_errno=True)
seen = {r: errno.errorcode.get(reach_probes.errno_of(r, numbers, d.pid, d.pid, signal.SIGKILL), "carried out") for r, d in decoys.items()}
time.sleep(0.5)
seen["decoys_alive"] = sorted(r for r, d in decoys.items() if d.poll() is None) == sorted(routes)

"""
    + ATTEMPT
    + r"""

def raw(name, *args):
    if libc.syscall(ctypes.c_long(numbers[name]), *[ctypes.c_long(a) for a in args]) < 0:
        raise OSError(ctypes.get_errno(), "refused")

me, decoy, high = os.getpid(), decoys["kill"].pid, 1 << 32
read_end, write_end = os.pipe()
attempt("prlimit_self", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))
attempt("prlimit_own_pid", lambda: resource.prlimit(me, resource.RLIMIT_NOFILE))
attempt("setpriority_self", lambda: os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0)))
attempt("setpriority_own_group", lambda: os.setpriority(os.PRIO_PGRP, 0, 0))
attempt("sched_setaffinity_self", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
attempt("ioprio_set_self", lambda: raw("ioprio_set", 1, 0, 0))
attempt("fcntl_getown", lambda: fcntl.fcntl(read_end, fcntl.F_GETOWN))
attempt("fcntl_setfl", lambda: fcntl.fcntl(read_end, fcntl.F_SETFL, os.O_NONBLOCK))
attempt("ioctl_fionbio", lambda: fcntl.ioctl(read_end, 0x5421, b"\x01\x00\x00\x00"))
attempt("prlimit_decoy_high_word", lambda: raw("prlimit64", high | decoy, resource.RLIMIT_CPU, 0, 0))
attempt("prlimit_self_high_word", lambda: raw("prlimit64", high | me, resource.RLIMIT_CPU, 0, 0))
attempt("setpriority_group_high_word", lambda: raw("setpriority", high | os.PRIO_PGRP, decoy, 19))
attempt("setpriority_decoy_high_word", lambda: raw("setpriority", os.PRIO_PROCESS, high | decoy, 19))
attempt("fcntl_setown_high_word", lambda: raw("fcntl", read_end, high | fcntl.F_SETOWN, decoy))
seen["decoy_pids"] = [d.pid for d in decoys.values()]  # this process may not signal them: the test ends them
print(json.dumps(seen))
"""
)


def run_probe(probe: str) -> dict[str, Any]:
    """A probe script in a process of its own (the filter is for good once installed): what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", probe, str(Path(__file__).resolve().parents[3])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.skipif(platform.machine() not in confinement.ARCHES, reason="no filter for this architecture")
def test_the_filter_refuses_what_it_says_and_allows_what_a_reward_needs():
    seen = run_probe(PROBE)
    assert seen.pop("thread_ran") is True
    expected = {
        "thread": "allowed",
        "socketpair": "allowed",
        "kill_self": "allowed",
        "kill_parent": "EPERM",
        "socket_unix": "EPERM",
        "socket_inet": "EPERM",
        "fork": "EPERM",
        "exec": "EPERM",
        "ptrace": "EPERM",
        "unshare": "EPERM",
        "clone3": "ENOSYS",  # so that libc falls back to clone, whose flags the filter can read
    }
    if platform.machine() == "x86_64":
        expected["x32_getpid"] = "EPERM"
    assert seen == expected


@pytest.mark.skipif(platform.machine() not in confinement.ARCHES, reason="no filter for this architecture")
def test_the_filter_refuses_every_route_to_another_process_and_leaves_the_worker_its_own():
    seen = run_probe(ROUTES_PROBE)
    for pid in seen.pop("decoy_pids"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    routes = reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES
    assert {route: seen[route] for route in routes} == dict.fromkeys(routes, "EPERM")
    assert seen["decoys_alive"]
    for own in ("prlimit_self", "prlimit_own_pid", "setpriority_self", "sched_setaffinity_self", "ioprio_set_self"):
        assert seen[own] == "allowed", own
    for harmless in ("fcntl_getown", "fcntl_setfl", "ioctl_fionbio"):
        assert seen[harmless] == "allowed", harmless
    assert seen["setpriority_own_group"] == "EPERM"  # the worker's group holds its keeper: a group is never only itself
    # The kernel reads only the low word of these arguments, so the high word changes nothing, either way.
    assert seen["prlimit_self_high_word"] == "allowed"
    for name in ("prlimit_decoy_high_word", "setpriority_group_high_word", "setpriority_decoy_high_word", "fcntl_setown_high_word"):
        assert seen[name] == "EPERM", name
