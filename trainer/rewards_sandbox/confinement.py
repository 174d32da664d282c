"""What a reward worker's server does to itself before the user's file is loaded, beyond rlimits and namespaces.

Three layers, each tried on its own and reported, because the runtimes rljob meets grant different things: gVisor
(GKE Sandbox, the TPU machines rljob was tried on) implements seccomp but neither namespaces, pidfd_open nor Landlock;
containerd's RuntimeDefault profile refuses unshare but allows seccomp and Landlock; an old kernel may lack Landlock.
- capabilities: all dropped, so a root worker gets no CAP_SYS_PTRACE (reading a non-dumpable trainer's
  /proc/<pid>/environ), CAP_KILL or CAP_DAC_OVERRIDE from its uid;
- Landlock (Linux >= 5.13 where the LSM is enabled): writes only beneath the worker's own directory (and /dev/null),
  reads everywhere; from ABI 4 no TCP bind or connect, from ABI 6 no signal to a process outside the worker;
- seccomp (needs no privilege: no_new_privs first): no socket() of any family (socketpair of AF_UNIX only: it reaches
  nothing), no new process (clone without CLONE_THREAD, fork, vfork; clone3 answers ENOSYS so libc falls back to
  clone), no exec, no signal to any process but itself, no SIGIO owner (fcntl F_SETOWN, F_SETOWN_EX, F_SETSIG; ioctl
  FIOSETOWN, SIOCSPGRP), no ptrace or reading another process's memory, nothing that sets another process's rlimits,
  priority, scheduling, CPUs, I/O class or memory placement (prlimit64, setpriority, sched_set*, ioprio_set,
  migrate_pages, move_pages: itself only), no pidfd, no new namespaces, mounts, keyrings, io_uring, bpf or perf
  events. Refused calls fail with EPERM, so a reward sees an error it can report, not a killed worker. Which of
  these held on a runtime is not assumed from the filter: reach_probes.py tries each route.

Standard library only: worker.py loads this file by path (it runs under `python -I`, with no rljob package on its
path); harness/runtime_emulation.py builds its emulated runtimes' filters with the same assembler.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable
from dataclasses import dataclass

# --- system call numbers (checked against the kernel headers by tests/trainer/test_reward_confinement.py) ----------

_X86_64 = {
    "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "ptrace": 101,
    "rt_sigqueueinfo": 129, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166, "tkill": 200,
    "tgkill": 234, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "rt_tgsigqueueinfo": 297,
    "perf_event_open": 298, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "bpf": 321,
    "execveat": 322, "userfaultfd": 323, "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "ioctl": 16, "fcntl": 72, "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
    "sched_setaffinity": 203, "ioprio_set": 251, "migrate_pages": 256, "get_robust_list": 274, "move_pages": 279,
    "prlimit64": 302, "sched_setattr": 314, "process_mrelease": 448,
}  # fmt: skip
_AARCH64 = {  # asm-generic numbering; aarch64 has no fork or vfork
    "socket": 198, "socketpair": 199, "clone": 220, "execve": 221, "kill": 129, "ptrace": 117, "rt_sigqueueinfo": 138,
    "pivot_root": 41, "chroot": 51, "mount": 40, "umount2": 39, "tkill": 130, "tgkill": 131, "add_key": 217,
    "request_key": 218, "keyctl": 219, "unshare": 97, "rt_tgsigqueueinfo": 240, "perf_event_open": 241, "setns": 268,
    "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "bpf": 280, "execveat": 281, "userfaultfd": 282,
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "ioctl": 29, "fcntl": 25, "setpriority": 140, "sched_setparam": 118, "sched_setscheduler": 119,
    "sched_setaffinity": 122, "ioprio_set": 30, "migrate_pages": 238, "get_robust_list": 100, "move_pages": 239,
    "prlimit64": 261, "sched_setattr": 274, "process_mrelease": 448,
}  # fmt: skip
# (seccomp_data.arch, syscall numbers, the x32 bit: x86_64's second ABI reaches the same calls under other numbers)
ARCHES = {"x86_64": (0xC000003E, _X86_64, 0x40000000), "aarch64": (0xC00000B7, _AARCH64, 0)}
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # one numbering on every architecture

# --- a classic BPF program for seccomp ----------------------------------------------------------------------------

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (args are 64-bit, little-endian: low word first)
CLONE_THREAD = 0x00010000
AF_UNIX = 1
# The targets a call may name when it acts on "a process" (asm-generic's values, which x86_64 and arm64 both use)
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1  # setpriority's and ioprio_set's `which`; the others name groups or users
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15  # fcntl: where SIGIO goes, and which signal it is
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902  # ioctl on a socket: the same owner as F_SETOWN


@dataclass(frozen=True)
class Rule:
    """What one system call gets: refused with `errno_`, unless each argument `allow_args` names is one of its values
    (`allow_args[i]`: argument i's) or the first argument has a bit of `allow_arg0_bits`; with `refuse_arg0_bits`
    or `refuse_arg1`, refused only when the first argument has one of those bits or the second is one of those values.

    Each test reads an argument's low 32-bit word, and that is all the kernel reads of it: every argument tested here
    is an int, a pid_t or an unsigned int, which the system call entry truncates (SYSCALL_DEFINEn), or clone's flags,
    of which it keeps lower_32_bits. A value with its high word set names the same process or command as its low word."""

    syscall: str
    errno_: int = errno.EPERM
    allow_args: tuple[tuple[int, ...], ...] = ()
    allow_arg0_bits: int = 0
    refuse_arg0_bits: int = 0
    refuse_arg1: tuple[int, ...] = ()


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _load_arg(index: int) -> bytes:
    return _ins(_LD_ABS_W, _ARG0_LOW + 8 * index)


def _allowed_args_block(allow_args: tuple[tuple[int, ...], ...], refuse: bytes) -> list[bytes]:
    """Argument by argument: a value on the list goes on to the next argument (after the last: allow); none of them
    falls through to the refusal."""
    sizes = [1 + len(values) for values in allow_args]
    refuse_at = sum(sizes)
    body, start = [], 0
    for index, values in enumerate(allow_args):
        on_match = start + sizes[index] if index + 1 < len(allow_args) else refuse_at + 1
        body.append(_load_arg(index))
        for j, value in enumerate(values):
            here = start + 1 + j
            body.append(_ins(_JEQ, value, jt=on_match - here - 1, jf=refuse_at - here - 1 if j == len(values) - 1 else 0))
        start += sizes[index]
    return [*body, refuse, _ins(_RET, RET_ALLOW)]


def _block(rule: Rule) -> list[bytes]:
    refuse = _ins(_RET, _RET_ERRNO | rule.errno_)
    if rule.refuse_arg0_bits:
        return [_load_arg(0), _ins(_JSET, rule.refuse_arg0_bits, jf=1), refuse, _ins(_RET, RET_ALLOW)]
    if rule.allow_arg0_bits:
        return [_load_arg(0), _ins(_JSET, rule.allow_arg0_bits, jt=1), refuse, _ins(_RET, RET_ALLOW)]
    if rule.refuse_arg1:
        count = len(rule.refuse_arg1)
        tests = [_ins(_JEQ, value, jt=count - i) for i, value in enumerate(rule.refuse_arg1)]
        return [_load_arg(1), *tests, _ins(_RET, RET_ALLOW), refuse]
    if rule.allow_args:
        return _allowed_args_block(rule.allow_args, refuse)
    return [refuse]


def build_filter(rules: Iterable[Rule], machine: str | None = None) -> bytes:
    """The program: another architecture's calls kill the process (their numbers mean other calls); on x86_64 every
    x32 call is refused; each rule's call gets its block; everything else is allowed."""
    audit_arch, numbers, x32_bit = ARCHES[machine or platform.machine()]
    program = [_ins(_LD_ABS_W, _ARCH), _ins(_JEQ, audit_arch, jt=1), _ins(_RET, RET_KILL_PROCESS), _ins(_LD_ABS_W, _NR)]
    if x32_bit:
        program += [_ins(_JGE, x32_bit, jf=1), _ins(_RET, _RET_ERRNO | errno.EPERM)]
    for rule in rules:
        block = _block(rule)
        program += [_ins(_JEQ, numbers[rule.syscall], jf=len(block)), *block]
    program.append(_ins(_RET, RET_ALLOW))
    return b"".join(program)


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _errno_text(call: str) -> str:
    code = ctypes.get_errno()
    return f"{call}: {os.strerror(code)} ({errno.errorcode.get(code, code)})"


def no_new_privs() -> bool:
    """Required before an unprivileged process installs a seccomp filter or a Landlock domain; kept across exec."""
    return bool(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)


def install_filter(program: bytes) -> str:
    """Install `program` on this process (and what it starts); '' on success, else why not."""
    if not no_new_privs():
        return _errno_text("prctl(PR_SET_NO_NEW_PRIVS)")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return _errno_text("prctl(PR_SET_SECCOMP)")
    return ""


def reward_rules(own_pid: int) -> list[Rule]:
    """The worker's filter. Signals may go to itself (its pid, or 0: its own process group, the worker's session);
    what else acts on a process may act on itself (pid 0 or its own), never on another."""
    refused = [
        "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
        "process_mrelease", "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "unshare", "setns", "mount",
        "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
        "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
        "io_uring_setup", "io_uring_enter", "io_uring_register", "socket",
    ]  # fmt: skip
    machine = platform.machine()
    rules = [Rule(name) for name in refused if name in ARCHES[machine][1]]
    itself = (own_pid, 0)
    rules += [
        Rule("socketpair", allow_args=((AF_UNIX,),)),
        Rule("clone", allow_arg0_bits=CLONE_THREAD),  # a thread (RLIMIT_NPROC still bounds a non-root worker)
        Rule("clone3", errno_=errno.ENOSYS),  # its flags sit in a struct a filter cannot read: libc then uses clone
        Rule("kill", allow_args=(itself,)),
        Rule("tkill", allow_args=((own_pid,),)),
        Rule("tgkill", allow_args=((own_pid,),)),
        Rule("rt_sigqueueinfo", allow_args=((own_pid,),)),
        Rule("rt_tgsigqueueinfo", allow_args=((own_pid,),)),
        # SIGIO: a file's owner gets a signal (any signal, with F_SETSIG) when the file is ready; the owner may be
        # any process or group of the user. No reward needs to own a file for signals: refused whatever the owner.
        Rule("fcntl", refuse_arg1=(F_SETOWN, F_SETSIG, F_SETOWN_EX)),
        Rule("ioctl", refuse_arg1=(FIOSETOWN, SIOCSPGRP)),
        # Groups and users (PRIO_PGRP, PRIO_USER, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER) always take in other processes.
        Rule("setpriority", allow_args=((PRIO_PROCESS,), itself)),
        Rule("ioprio_set", allow_args=((IOPRIO_WHO_PROCESS,), itself)),
    ]
    # Another process's rlimits (a 1 s RLIMIT_CPU kills it), CPUs, scheduling class, NUMA placement, robust futex list
    rules += [
        Rule(name, allow_args=(itself,))
        for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
                     "migrate_pages", "move_pages", "get_robust_list")
    ]  # fmt: skip
    return rules


def drop_capabilities() -> bool:
    """Every capability gone (effective, permitted, inheritable, ambient; the bounding set where CAP_SETPCAP allows).
    True when none is left in effect."""
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for capability in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3, this process
    _libc.capset(header, ctypes.create_string_buffer(24))  # two words each of effective, permitted, inheritable: all 0
    return effective_capabilities() == 0


def effective_capabilities() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return None


# --- Landlock -----------------------------------------------------------------------------------------------------

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (an old kernel, the LSM not enabled, gVisor)."""
    return max(0, int(_libc.syscall(LANDLOCK_CREATE_RULESET, None, 0, 1)))  # LANDLOCK_CREATE_RULESET_VERSION


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute, write, read, read dir, remove and make every kind of file
    rights |= _REFER if abi >= 2 else 0
    rights |= _TRUNCATE if abi >= 3 else 0
    return rights | (_IOCTL_DEV if abi >= 5 else 0)


def confine_writes(writable_dir: str) -> tuple[int, str]:
    """A Landlock domain for this process: read and execute anything, write only beneath `writable_dir` (and
    /dev/null); TCP and outside signals refused where the ABI knows them. (abi, '') on success, (0, why) if not."""
    abi = landlock_abi()
    if abi < 1:
        return 0, "Landlock is not available: " + _errno_text("landlock_create_ruleset")
    handled = _fs_rights(abi)
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", handled, net, scoped)[:size], size)
    ruleset = _libc.syscall(LANDLOCK_CREATE_RULESET, attr, size, 0)
    if ruleset < 0:
        return 0, _errno_text("landlock_create_ruleset")
    try:
        file_rights = (_EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV) & handled
        for path, rights in (("/", _EXECUTE | _READ_FILE | _READ_DIR), (writable_dir, handled), ("/dev/null", file_rights)):
            problem = _add_path_rule(ruleset, path, rights & ~_EXECUTE if path == "/dev/null" else rights)
            if problem:
                return 0, problem
        if not no_new_privs():
            return 0, _errno_text("prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            return 0, _errno_text("landlock_restrict_self")
        return abi, ""
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, path: str, rights: int) -> str:
    try:
        parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        return f"open {path}: {e.strerror}"
    try:
        beneath = ctypes.create_string_buffer(struct.pack("=Qi", rights, parent), 12)  # landlock_path_beneath_attr
        if _libc.syscall(LANDLOCK_ADD_RULE, ruleset, 1, beneath, 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
            return _errno_text(f"landlock_add_rule({path})")
        return ""
    finally:
        os.close(parent)


def confine(workdir: str, own_pid: int) -> dict[str, object]:
    """All three layers on this process, strongest first where order matters (Landlock needs no_new_privs, which
    the filter sets too; capabilities go first so that nothing after runs privileged). What held, for the pool."""
    capabilities_dropped = drop_capabilities()
    abi, landlock_problem = confine_writes(workdir)
    machine = platform.machine()
    seccomp_problem = install_filter(build_filter(reward_rules(own_pid))) if machine in ARCHES else f"no filter for {machine}"
    return {
        "capabilities_dropped": capabilities_dropped,
        "landlock_abi": abi,
        "landlock_refused": landlock_problem,
        "seccomp": not seccomp_problem,
        "seccomp_refused": seccomp_problem,
    }
