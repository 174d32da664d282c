"""Each route by which a reward could act on another process, tried from inside a confined worker. What a worker
and `trainer sandbox-check` say about reaching other processes comes from these tries, not from which layers were
installed: the worker (worker.py) tries every route at start against no process at all, and the check
(self_check.py) tries each against a decoy process of its own.

A route is held when the call fails with a refusal: EPERM or EACCES (a filter, Landlock, the kernel's permission
check), ENOSYS (the runtime has no such call), or ESRCH where the target exists but is not visible (a PID namespace).
Any other answer means the kernel went on to act on the target.

Loaded by path (worker.py runs under `python -I`) and pasted into the check's reward file, so: standard library
only, no relative import and no `from __future__` (which must open a file). The system call numbers come from the
caller (confinement.ARCHES).
"""

import ctypes
import errno
import fcntl
import os
import resource
import signal
import struct
from collections.abc import Callable

NOT_TRIED = -1
UNUSED_ID = 0x3FFFFFFF  # above PID_MAX_LIMIT (2**22) and any uid a pod maps: names no process, group or user

# Routes that deliver a signal: a decoy they reach dies (SIGKILL, or SIGIO's default action).
SIGNAL_ROUTES = (
    "kill", "tgkill", "rt_sigqueueinfo", "pidfd_send_signal", "sigio_fcntl_setown", "sigio_fcntl_setown_group",
    "sigio_fcntl_setown_ex", "sigio_fcntl_setsig", "sigio_ioctl_fiosetown", "sigio_ioctl_siocspgrp",
)  # fmt: skip
# Routes that change or read another process: limits, priority, scheduling, I/O class, memory, pidfds.
PROCESS_ROUTES = (
    "prlimit64", "setpriority", "setpriority_group", "setpriority_user", "sched_setaffinity", "sched_setscheduler",
    "sched_setparam", "sched_setattr", "ioprio_set", "ioprio_set_group", "ioprio_set_user", "migrate_pages",
    "move_pages", "get_robust_list", "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease",
    "kcmp", "pidfd_open",
)  # fmt: skip
# These name every process of a user, so they are only ever tried on UNUSED_ID (never on the test's or the
# trainer's user): ESRCH there means the kernel looked and found no one, not that the route was refused.
USER_ROUTES = ("setpriority_user", "ioprio_set_user")

_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_OWNER_PGRP = 8, 10, 15, 2
_FIOSETOWN, _SIOCSPGRP, _FIOASYNC = 0x8901, 0x8902, 0x5452
_IOPRIO_IDLE = 3 << 13  # IOPRIO_CLASS_IDLE: the victim's I/O only runs when the disk is otherwise idle
_SCHED_ATTR = struct.Struct("=IIQiIQQQ")  # struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes)
_libc = ctypes.CDLL(None, use_errno=True)


def _raw(numbers: dict[str, int], name: str, *args: object) -> int:
    """The system call `name` (a KeyError where the caller knows no number for it: the route is not tried)."""
    result: int = _libc.syscall(ctypes.c_long(numbers[name]), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _iovec(address: int, length: int) -> bytes:
    return struct.pack("=QQ", address, length)


def _pidfd(numbers: dict[str, int], pid: int) -> int:
    """A pidfd for `pid` where pidfd_open answers, else -1 (the pidfd routes then test only their own refusal)."""
    try:
        return _raw(numbers, "pidfd_open", ctypes.c_long(pid), ctypes.c_long(0))
    except OSError:
        return -1


def _sigio(owner_call: Callable[[int], object], use_socket: bool, numbers: dict[str, int]) -> None:
    """Make this process's file owned by a target (owner_call sets it), ask for SIGIO and make the file ready."""
    fds = (ctypes.c_int * 2)()
    if use_socket:
        _raw(numbers, "socketpair", ctypes.c_long(1), ctypes.c_long(1), ctypes.c_long(0), fds)  # AF_UNIX, STREAM
        ours, other = fds[0], fds[1]
    else:
        ours, other = os.pipe()
    try:
        owner_call(ours)
        if use_socket:
            fcntl.ioctl(ours, _FIOASYNC, struct.pack("=i", 1))
        else:
            fcntl.fcntl(ours, fcntl.F_SETFL, fcntl.fcntl(ours, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(other, b"x")  # the pipe's read end (the socket's peer) now has data: SIGIO goes to its owner
    finally:
        os.close(ours)
        os.close(other)


def try_route(route: str, numbers: dict[str, int], pid: int, signal_pid: int, signal_number: int) -> None:
    """Act on `pid` (and on its process group, named by the same number: decoys lead their own) by `route`; the
    direct signal routes send `signal_number` to `signal_pid`. Returns when the kernel carried it out; raises
    OSError when it refused."""
    n = numbers
    if route == "kill":
        os.kill(signal_pid, signal_number)
    elif route == "tgkill":
        _raw(n, "tgkill", ctypes.c_long(signal_pid), ctypes.c_long(signal_pid), ctypes.c_long(signal_number))
    elif route == "rt_sigqueueinfo":
        info = ctypes.create_string_buffer(struct.pack("=iii", signal_number, 0, -1), 128)  # si_code SI_QUEUE
        _raw(n, "rt_sigqueueinfo", ctypes.c_long(signal_pid), ctypes.c_long(signal_number), info)
    elif route == "pidfd_send_signal":  # a /proc/<pid> directory is a pidfd to this call
        try:
            fd = os.open(f"/proc/{signal_pid}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            fd = -1
        try:
            _raw(n, "pidfd_send_signal", ctypes.c_long(fd), ctypes.c_long(signal_number), None, ctypes.c_long(0))
        finally:
            if fd >= 0:
                os.close(fd)
    elif route == "sigio_fcntl_setown":
        _sigio(lambda fd: fcntl.fcntl(fd, _F_SETOWN, pid), False, n)
    elif route == "sigio_fcntl_setown_group":
        _sigio(lambda fd: fcntl.fcntl(fd, _F_SETOWN, -pid), False, n)
    elif route == "sigio_fcntl_setown_ex":
        _sigio(lambda fd: fcntl.fcntl(fd, _F_SETOWN_EX, struct.pack("=ii", _F_OWNER_PGRP, pid)), False, n)
    elif route == "sigio_fcntl_setsig":  # which signal SIGIO is: SIGKILL makes any owner's signal fatal
        read_end, write_end = os.pipe()
        try:
            fcntl.fcntl(read_end, _F_SETSIG, signal.SIGKILL)
        finally:
            os.close(read_end)
            os.close(write_end)
    elif route == "sigio_ioctl_fiosetown":
        _sigio(lambda fd: fcntl.ioctl(fd, _FIOSETOWN, struct.pack("=i", pid)), True, n)
    elif route == "sigio_ioctl_siocspgrp":
        _sigio(lambda fd: fcntl.ioctl(fd, _SIOCSPGRP, struct.pack("=i", -pid)), True, n)
    else:
        _try_process_route(route, n, pid)


def _try_process_route(route: str, n: dict[str, int], pid: int) -> None:
    target = ctypes.c_long(pid)
    if route == "prlimit64":
        resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))  # one second of CPU time, then SIGKILL
    elif route in ("setpriority", "setpriority_group", "setpriority_user"):
        which = {"setpriority": os.PRIO_PROCESS, "setpriority_group": os.PRIO_PGRP, "setpriority_user": os.PRIO_USER}
        os.setpriority(which[route], UNUSED_ID if route == "setpriority_user" else pid, 19)
    elif route == "sched_setaffinity":
        os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})
    elif route == "sched_setscheduler":
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    elif route == "sched_setparam":
        os.sched_setparam(pid, os.sched_param(0))
    elif route == "sched_setattr":
        attr = ctypes.create_string_buffer(_SCHED_ATTR.pack(_SCHED_ATTR.size, 0, 0, 19, 0, 0, 0, 0), _SCHED_ATTR.size)
        _raw(n, "sched_setattr", target, attr, ctypes.c_long(0))  # SCHED_OTHER at nice 19
    elif route in ("ioprio_set", "ioprio_set_group", "ioprio_set_user"):
        who = {"ioprio_set": (1, pid), "ioprio_set_group": (2, pid), "ioprio_set_user": (3, UNUSED_ID)}[route]
        _raw(n, "ioprio_set", ctypes.c_long(who[0]), ctypes.c_long(who[1]), ctypes.c_long(_IOPRIO_IDLE))
    elif route == "migrate_pages":  # from no node to node 0: moves nothing, but only after reaching the target
        old, new = ctypes.c_ulong(0), ctypes.c_ulong(1)
        _raw(n, "migrate_pages", target, ctypes.c_long(64), ctypes.byref(old), ctypes.byref(new))
    elif route == "move_pages":  # no page: only the target's lookup and permission
        _raw(n, "move_pages", target, ctypes.c_long(0), None, None, None, ctypes.c_long(0))
    elif route == "get_robust_list":
        head, length = ctypes.c_void_p(), ctypes.c_size_t()
        _raw(n, "get_robust_list", target, ctypes.byref(head), ctypes.byref(length))
    elif route in ("process_vm_readv", "process_vm_writev"):  # one byte at address 0: EFAULT once in its memory
        local = ctypes.create_string_buffer(1)
        local_iov = ctypes.create_string_buffer(_iovec(ctypes.addressof(local), 1))
        remote_iov = ctypes.create_string_buffer(_iovec(0, 1))
        _raw(n, route, target, local_iov, ctypes.c_long(1), remote_iov, ctypes.c_long(1), ctypes.c_long(0))
    elif route in ("process_madvise", "process_mrelease"):
        fd = _pidfd(n, pid)
        try:
            if route == "process_madvise":
                iov = ctypes.create_string_buffer(_iovec(0, 4096))
                _raw(n, route, ctypes.c_long(fd), iov, ctypes.c_long(1), ctypes.c_long(20), ctypes.c_long(0))  # COLD
            else:
                _raw(n, route, ctypes.c_long(fd), ctypes.c_long(0))
        finally:
            if fd >= 0:
                os.close(fd)
    elif route == "kcmp":
        _raw(n, "kcmp", ctypes.c_long(os.getpid()), target, ctypes.c_long(1), ctypes.c_long(0), ctypes.c_long(0))
    elif route == "pidfd_open":
        os.close(_raw(n, "pidfd_open", target, ctypes.c_long(0)))
    else:
        raise ValueError(f"no route {route!r}")


def errno_of(route: str, numbers: dict[str, int], pid: int, signal_pid: int, signal_number: int) -> int:
    """The errno `route` failed with, 0 when the kernel carried it out, NOT_TRIED when it could not be tried."""
    try:
        try_route(route, numbers, pid, signal_pid, signal_number)
    except OSError as e:
        return e.errno or NOT_TRIED
    except KeyError:
        return NOT_TRIED
    return 0


def describe(code: int) -> str:
    return {0: "carried out", NOT_TRIED: "not tried"}.get(code) or errno.errorcode.get(code, str(code))


def held(route: str, code: int, target_exists: bool, pid_namespace: bool) -> bool:
    """Whether errno `code` from `route` means the route was closed (module docstring)."""
    if code in (errno.EPERM, errno.EACCES, errno.ENOSYS):
        return True
    return code == errno.ESRCH and (pid_namespace or (target_exists and route not in USER_ROUTES))


def probe_own_routes(numbers: dict[str, int], pid_namespace: bool) -> dict[str, object]:
    """Every route, tried from a worker before any reward code runs, against no process at all (UNUSED_ID), so
    that an open route harms no one: ESRCH then says the call was let through. The direct signals go to the
    worker's keeper (its parent) with signal 0, which delivers nothing: there Landlock's signal scoping counts too.
    What the pool reports (worker.py): whether every signal route and every other route held, and which did not."""
    keeper = os.getppid()
    signal_pid = keeper if keeper > 1 else UNUSED_ID
    not_held = []
    for route in SIGNAL_ROUTES + PROCESS_ROUTES:
        code = errno_of(route, numbers, UNUSED_ID, signal_pid, 0)
        target_exists = signal_pid != UNUSED_ID and route in ("kill", "tgkill", "rt_sigqueueinfo", "pidfd_send_signal")
        if not held(route, code, target_exists, pid_namespace):
            not_held.append(f"{route} ({describe(code)})")
    return {
        "routes_tried": len(SIGNAL_ROUTES) + len(PROCESS_ROUTES),
        "routes_not_held": not_held,
        "signals_confined": not any(entry.split()[0] in SIGNAL_ROUTES for entry in not_held),
        "processes_confined": not any(entry.split()[0] in PROCESS_ROUTES for entry in not_held),
    }
