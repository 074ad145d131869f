"""seccomp: the system calls the child may not make, through libseccomp.

Landlock covers files and, on newer kernels, TCP and signals; everything else
that reaches outside the process is refused here, before the kernel looks at
the arguments: no ``socket``, ``execve``, ``fork``/``vfork`` or ``clone`` of a
new process (threads stay allowed), no ``ptrace`` or cross-process memory
access, no writable shared ``mmap``, no System V IPC or POSIX message queues,
no descriptor owner (``F_SETOWN``/``F_SETSIG``: the kernel would signal whom
the child names), no changes to file metadata and no reading of extended
attributes, no inotify or fanotify, no ``setrlimit`` or ``prlimit`` that sets
a limit, no ``io_uring``, no namespaces or mounts. libseccomp is called
through ctypes (see ``docs/safety.md`` for why not a binding); what it cannot
say (an argument that must be one of a few values: ``prctl``'s options, the
``sched_set*`` calls on the child itself) is a second filter, ``argfilter``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Optional, Tuple

from . import argfilter
from .privileges import ConfinementError, libc

_PR_GET_SECCOMP = 21

_SCMP_ACT_ALLOW = 0x7FFF0000


def _scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


_SCMP_CMP_NE = 1
_SCMP_CMP_MASKED_EQ = 7
_LOW_32 = 0xFFFFFFFF


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


_seccomp_handle: Optional[ctypes.CDLL] = None
_SECCOMP_LIBRARIES = ("libseccomp.so.2", "libseccomp.so")


def libseccomp() -> ctypes.CDLL:
    """libseccomp, loaded by its soname (``find_library`` would start ``ldconfig``)."""
    global _seccomp_handle
    if _seccomp_handle is None:
        last: Optional[OSError] = None
        for name in _SECCOMP_LIBRARIES:
            try:
                lib = ctypes.CDLL(name, use_errno=True)
                break
            except OSError as exc:
                last = exc
        else:
            raise OSError(f"libseccomp is not installed ({last})")
        lib.seccomp_init.argtypes = (ctypes.c_uint32,)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_release.argtypes = (ctypes.c_void_p,)
        lib.seccomp_release.restype = None
        lib.seccomp_load.argtypes = (ctypes.c_void_p,)
        lib.seccomp_load.restype = ctypes.c_int
        lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        lib.seccomp_rule_add_array.argtypes = (
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_void_p,
        )
        lib.seccomp_rule_add_array.restype = ctypes.c_int
        _seccomp_handle = lib
    return _seccomp_handle


def seccomp_support() -> str:
    """Empty when seccomp filters can be loaded here; otherwise why not."""
    if not sys.platform.startswith("linux"):
        return f"seccomp is a Linux feature, and this is {sys.platform}"
    try:
        libseccomp()
    except OSError as exc:
        return f"{exc}; install it (e.g. apt-get install libseccomp2)"
    if libc().prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return "this kernel was built without seccomp filters"
    return ""


# Denied outright: other processes, programs, sockets, namespaces, kernel
# interfaces that bypass the checks above, and changes to file metadata (which
# Landlock does not cover).
_DENIED = (
    "execve",
    "execveat",
    "fork",
    "vfork",
    "socket",
    "socketpair",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "tkill",
    "setrlimit",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsmount",
    "fsconfig",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "truncate",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
    "mknod",
    "mknodat",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "mkdir",
    "mkdirat",
    "memfd_create",
    "memfd_secret",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "capset",
    # System V IPC: segments, queues and semaphores outlive the run and are
    # shared by key with other processes; Landlock does not cover them, and
    # shmat would get around the refusal of shared writable mappings. (On
    # architectures with the "ipc" multiplexer, libseccomp filters its calls
    # under these names.) POSIX message queues likewise.
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "ipc",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    # Metadata of files the child may not read: extended attributes, and
    # watches that report names and changes.
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "getxattrat",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "listxattrat",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    "fanotify_init",
    "fanotify_mark",
    # Other processes' memory and pages, the kernel log, and old interfaces.
    "process_madvise",
    "process_mrelease",
    "move_pages",
    "migrate_pages",
    "get_robust_list",
    "syslog",
    "quotactl_fd",
    "fspick",
    "lookup_dcookie",
    "uselib",
    "vhangup",
    "modify_ldt",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "sethostname",
    "setdomainname",
)
# fcntl commands that make the kernel send signals to a chosen process (a
# descriptor's owner, with F_SETSIG choosing the signal) or watch files.
_F_SETLEASE, _F_NOTIFY = 1024, 1026
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_SIGNALLING_FCNTL = (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETLEASE, _F_NOTIFY)
# ioctl spellings of F_SETOWN: FIOSETOWN and SIOCSPGRP.
_SIGNALLING_IOCTL = (0x8901, 0x8902)
_CLONE_THREAD = 0x00010000
_MAP_SHARED = 0x01
_PROT_WRITE = 0x2


# Calls newer than some libseccomp releases, by their number (the same on
# every architecture but alpha since Linux 5.1): an older libseccomp would
# otherwise leave them open on a newer kernel.
_NEWER_CALLS = {
    "fchmodat2": 452,
    "setxattrat": 463,
    "getxattrat": 464,
    "listxattrat": 465,
    "removexattrat": 466,
}


def _resolve(lib: ctypes.CDLL, name: str) -> Optional[int]:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0 and name in _NEWER_CALLS and not os.uname().machine.startswith("alpha"):
        return _NEWER_CALLS[name]
    return None if number < 0 else number  # a call this architecture or libseccomp does not know


def _seccomp_rule(
    lib: ctypes.CDLL, ctx: int, action: int, name: str, *args: Tuple[int, int, int, int]
) -> None:
    number = _resolve(lib, name)
    if number is None:
        return
    array = (_ScmpArgCmp * max(1, len(args)))()
    for i, (arg, op, a, b) in enumerate(args):
        array[i].arg, array[i].op, array[i].datum_a, array[i].datum_b = arg, op, a, b
    rc = lib.seccomp_rule_add_array(
        ctypes.c_void_p(ctx), ctypes.c_uint32(action), number, len(args), array
    )
    if rc < 0:
        raise ConfinementError(f"seccomp rule for {name} could not be added: {os.strerror(-rc)}")


def load() -> None:
    """Load the filter into this process (and the threads it starts later)."""
    lib = libseccomp()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise ConfinementError("seccomp_init failed")
    try:
        deny = _scmp_act_errno(errno.EPERM)
        for name in _DENIED:
            _seccomp_rule(lib, ctx, deny, name)
        # clone: threads yes (CLONE_THREAD set), new processes no.
        _seccomp_rule(lib, ctx, deny, "clone", (0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0))
        # clone3 passes its flags in memory a filter cannot read: say it does
        # not exist, and the C library falls back to clone, checked above.
        _seccomp_rule(lib, ctx, _scmp_act_errno(errno.ENOSYS), "clone3")
        # No shared writable mappings: they write through to files.
        _seccomp_rule(
            lib,
            ctx,
            deny,
            "mmap",
            (2, _SCMP_CMP_MASKED_EQ, _PROT_WRITE, _PROT_WRITE),
            (3, _SCMP_CMP_MASKED_EQ, _MAP_SHARED, _MAP_SHARED),
        )
        # Reading a limit is fine; setting one is not.
        _seccomp_rule(lib, ctx, deny, "prlimit64", (2, _SCMP_CMP_NE, 0, 0))
        # No descriptor owner: the kernel would signal that process (F_SETOWN
        # on the event pipe, with F_SETSIG, could kill the parent).
        # The kernel reads both as 32-bit: a command with upper bits set is the same command,
        # so only the low 32 bits are compared.
        for name in ("fcntl", "fcntl64"):
            for command in _SIGNALLING_FCNTL:
                _seccomp_rule(lib, ctx, deny, name, (1, _SCMP_CMP_MASKED_EQ, _LOW_32, command))
        for request in _SIGNALLING_IOCTL:
            _seccomp_rule(lib, ctx, deny, "ioctl", (1, _SCMP_CMP_MASKED_EQ, _LOW_32, request))
        # Priorities of this process only: as root, lowering those of every
        # process of the same user (PRIO_USER, or another pid) needs no capability.
        # (which, who): PRIO_PROCESS is 0, IOPRIO_WHO_PROCESS 1; who 0 is the caller.
        for name, own_kind in (("setpriority", 0), ("ioprio_set", 1)):
            _seccomp_rule(lib, ctx, deny, name, (0, _SCMP_CMP_NE, own_kind, 0))
            _seccomp_rule(lib, ctx, deny, name, (1, _SCMP_CMP_NE, 0, 0))
        # sched_set* on the child itself only, and prctl's allow list: argfilter.py.
        # Signals only to this process.
        me = os.getpid()
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            _seccomp_rule(lib, ctx, deny, name, (0, _SCMP_CMP_NE, me, 0))
        rc = lib.seccomp_load(ctypes.c_void_p(ctx))
        if rc < 0:
            raise ConfinementError(f"the seccomp filter could not be loaded: {os.strerror(-rc)}")
    finally:
        lib.seccomp_release(ctypes.c_void_p(ctx))
    argfilter.load(lib)
