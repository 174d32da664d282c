"""The reward worker's seccomp filter and its system call table (trainer/rewards_sandbox/confinement.py): the numbers
are the kernel's own (read from the installed kernel headers), and the filter refuses what it says, allows what a
reward needs (threads, a socketpair, signals to itself) and refuses x86_64's x32 calls, in a real process."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.rewards_sandbox import confinement

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # arm64's table is the generic one
}


@pytest.mark.parametrize("machine", sorted(confinement.ARCHES))
def test_every_system_call_number_is_the_kernels(machine):
    text = HEADERS[machine].read_text()
    kernel = {name: int(number) for name, number in re.findall(r"#define __NR_(\w+)\s+(\d+)", text)}
    ours = confinement.ARCHES[machine][1]
    assert {name: kernel.get(name) for name in ours} == ours


PROBE = r"""
import ctypes, errno, json, os, signal, socket, sys, threading
sys.path.insert(0, sys.argv[1])
from trainer.rewards_sandbox import confinement

assert confinement.install_filter(confinement.build_filter(confinement.reward_rules(os.getpid()))) == ""
libc = ctypes.CDLL(None, use_errno=True)
seen = {}

def attempt(name, call):
    try:
        call()
        seen[name] = "allowed"
    except OSError as e:
        seen[name] = errno.errorcode.get(e.errno, str(e.errno))

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


@pytest.mark.skipif(platform.machine() not in confinement.ARCHES, reason="no filter for this architecture")
def test_the_filter_refuses_what_it_says_and_allows_what_a_reward_needs():
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(Path(__file__).resolve().parents[2])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
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
