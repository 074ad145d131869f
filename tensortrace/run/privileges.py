"""The process's own side of the wall: descriptors, no_new_privs, capabilities.

Before Landlock and seccomp go up, the child gives away what it inherited:
every descriptor but the pipe to the parent is closed (so nothing opened
before the wall, an output file or a socket, can be written through it),
no_new_privs is set, and every capability is dropped (a child of root would
otherwise keep ``CAP_SYS_RESOURCE``, ``CAP_SYS_ADMIN`` and the rest, and could
raise the hard resource limits again).

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
