"""The process's own side of the wall: descriptors, no_new_privs, threads, capabilities.

Before Landlock and seccomp go up, the child gives away what it inherited:
every descriptor but the pipe to the parent is closed (so nothing opened
before the wall, an output file or a socket, can be written through it),
no_new_privs is set, its threads are capped (``cap_threads``), and every
capability is dropped (a child of root would otherwise keep
``CAP_SYS_RESOURCE``, ``CAP_SYS_ADMIN`` and the rest, and could raise the hard
resource limits again).

The C library handle and ``ConfinementError`` live here too, because every
layer (this one, :mod:`.landlock`, :mod:`.seccomp`) calls into libc and
reports a failure the same way, and :mod:`.confine` imports them all.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Iterable, Optional


class ConfinementError(Exception):
    """A layer could not be applied in the child; the message says which and why."""


_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc_handle: Optional[ctypes.CDLL] = None


def libc() -> ctypes.CDLL:
    """The C library, loaded once, with ``syscall`` and ``prctl`` typed."""
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.syscall.restype = ctypes.c_long
        _libc_handle.prctl.restype = ctypes.c_int
    return _libc_handle


def fail(what: str) -> ConfinementError:
    """The error for a call to the kernel that failed, with the reason ``errno`` gives."""
    code = ctypes.get_errno()
    return ConfinementError(f"{what} failed: {os.strerror(code) if code else 'unknown error'}")


def close_inherited(keep: Iterable[int]) -> None:
    """Close every descriptor but stdio and ``keep``.

    Otherwise what was open before the wall went up would stay usable behind it.
    """
    kept = set(keep) | {0, 1, 2}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in kept:
            try:
                os.close(fd)
            except OSError:
                pass


def thread_cap() -> int:
    """How many threads the child may run: room for torch's, NumPy's and BLAS's pools."""
    return 4 * (os.cpu_count() or 1) + 64


# The real user ids a child of root counts its threads under: one per pid, above every
# id a system or a container hands out, below 2**31 (some programs take ids as signed).
_COUNTING_BASE = 0x7F000000
_PID_LIMIT = 1 << 22  # the kernel's largest pid_max


def counting_uid(pid: int) -> Optional[int]:
    """The real user id a child of root with this pid counts its threads under, or None.

    It must be mapped in this user namespace (a container may map only 65,536 ids); a
    run of ids no process uses is assumed at the top of 31 bits, one per pid, so that
    two children running at once never count each other's threads.
    """
    wanted = _COUNTING_BASE + pid % _PID_LIMIT
    try:
        with open("/proc/self/uid_map") as f:
            ranges = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except (OSError, ValueError):
        return None
    mapped = any(inside <= wanted < inside + count for inside, _, count in ranges)
    return wanted if mapped else None


def tasks_of(uid: int) -> Optional[int]:
    """How many threads processes of real user ``uid`` run now, read from ``/proc``; None if
    it cannot be read. The kernel counts these against ``RLIMIT_NPROC``."""
    total = 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read(4096)
        except OSError:
            continue  # gone meanwhile
        real = threads = None
        for line in status.splitlines():
            if line.startswith(b"Uid:"):
                real = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if real == uid and threads:
            total += threads
    return total


def cap_threads(cap: int) -> str:
    """Cap this process's threads with ``RLIMIT_NPROC``; empty, or why it could not be.

    The kernel counts every thread of the real user against that limit and never
    limits root's. So a child of root takes a real user id of its own
    (``counting_uid``), keeping root as its effective and saved id (files are
    read as before), and counts its threads alone; any other child's limit is
    its user's threads now plus ``cap``. The limit is hard, and with capabilities
    dropped and ``setrlimit`` refused it cannot be raised again.
    """
    import resource

    uid = os.getuid()
    if uid == 0:
        counted = counting_uid(os.getpid())
        if counted is None:
            return "no user id is free to count a child of root's threads under here"
        try:
            os.setresuid(counted, 0, 0)
        except OSError as exc:
            return f"a child of root could not take a user id to count its threads: {exc}"
        limit = cap
    else:
        running = tasks_of(uid)
        if running is None:
            return "/proc cannot be read to count this user's threads"
        limit = running + cap
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as exc:
        return f"RLIMIT_NPROC could not be set: {exc}"
    return ""


def no_new_privs() -> None:
    """Let nothing gain privileges later; Landlock and seccomp need this without root."""
    if libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise fail("prctl(PR_SET_NO_NEW_PRIVS)")


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    lib = libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if lib.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() not in (
            errno.EINVAL,
            errno.EPERM,
        ):
            raise fail("prctl(PR_CAPBSET_DROP)")
    lib.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if lib.capset(ctypes.byref(header), data) != 0:
        raise fail("capset")
