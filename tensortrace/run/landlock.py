"""Landlock: what the child may read, and that it may write nothing at all.

Landlock (Linux 5.13+) is the wall's filesystem layer: reading only beneath
the paths :mod:`.readable` lists, and writing, creating, renaming, truncating
and removing nothing anywhere. Later ABIs add what the kernel offers: with ABI
4+, no TCP bind or connect; with ABI 6+, no signals to, and no abstract unix
sockets of, processes outside the child. It is called through its three
system calls directly (see ``docs/safety.md`` for why not a binding).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import List, Sequence, Tuple

from ..trace import CONFINEMENT_ESSENTIAL, CONFINEMENT_EXTRA
from .privileges import fail, libc

# The layers this module applies, by the names traces record.
LANDLOCK_FILES = CONFINEMENT_ESSENTIAL[3]
LANDLOCK_NETWORK, LANDLOCK_SCOPES = CONFINEMENT_EXTRA[:2]

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

# Landlock filesystem rights, by the ABI that introduced them.
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> Tuple[int, str]:
    """The kernel's Landlock ABI version (0 when absent) and, when absent, why."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is a Linux feature, and this is {sys.platform}"
    lib = libc()
    abi = lib.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 0:
        code = ctypes.get_errno()
        if code == errno.ENOSYS:
            return 0, "this kernel has no Landlock (Linux 5.13 or later is needed)"
        if code == errno.EOPNOTSUPP:
            return 0, (
                "Landlock is built into this kernel but turned off "
                "(add landlock to the lsm= boot option)"
            )
        return 0, f"Landlock is unavailable: {os.strerror(code)}"
    return int(abi), ""


def apply(abi: int, read_paths: Sequence[str]) -> List[str]:
    """Apply the filesystem (and, where the ABI has them, network and scope) rules.

    Returns the names of the layers it applied.
    """
    lib = libc()
    fs = _FS_ABI1
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    attr = _RulesetAttr(handled_access_fs=fs)
    size = 8
    layers = [LANDLOCK_FILES]
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
        layers.append(LANDLOCK_NETWORK)
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = 24
        layers.append(LANDLOCK_SCOPES)
    ruleset = lib.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        raise fail("landlock_create_ruleset")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        for path in read_paths:
            _allow(lib, ruleset, path, read & fs)
        if (
            lib.syscall(
                ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF),
                ctypes.c_int(ruleset),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return layers


def _allow(lib: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine lacks needs no rule
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if (
            lib.syscall(
                ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise fail(f"landlock_add_rule for {path}")
    finally:
        os.close(fd)
