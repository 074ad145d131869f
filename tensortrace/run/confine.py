"""The kernel's wall around a safe-mode child: Landlock, seccomp, no_new_privs.

CPython cannot be sandboxed from inside itself: code that reaches native memory
(a dangling buffer, an ``__array_interface__`` at a chosen address, code
generation that ``exec``s strings) defeats any attribute guard. So the forked
child that runs a safe-mode scenario asks the kernel to hold it, after torch and
numpy are imported and before the first step:

* **inherited descriptors** other than the pipe to the parent are closed, and
  standard input and output are already ``/dev/null``, so nothing opened before
  the wall went up (an output file, a socket) can be written through it;
* **no_new_privs**, and every capability dropped (a child of root would
  otherwise keep ``CAP_SYS_RESOURCE``, ``CAP_SYS_ADMIN`` and the rest);
* **Landlock** (Linux 5.13+): reading only the Python installation, the
  import path, torch's, numpy's and tensortrace's files, the scenario file and a
  few system paths they read (of ``/proc/self`` only a few files, never
  ``environ``); writing, creating, renaming, truncating and
  removing nothing anywhere. On kernels with Landlock ABI 4+, no TCP bind or
  connect; with ABI 6+, no signals to, and no abstract unix sockets of,
  processes outside the child;
* **seccomp** (through libseccomp): no ``socket``, ``execve``, ``fork``/``vfork``
  or ``clone`` of a new process (threads stay allowed), no ``ptrace`` or
  cross-process memory access, no writable shared ``mmap``, no System V IPC or
  POSIX message queues, no descriptor owner (``F_SETOWN``/``F_SETSIG``: the
  kernel would signal whom the child names), no changes to file metadata and
  no reading of extended attributes, no inotify or fanotify, no ``setrlimit``
  or ``prlimit`` that sets a limit, no ``io_uring``, no namespaces or mounts;
* the resource limits the runner sets stay in force: their hard limits are
  lowered, and without capabilities they cannot be raised again.

Landlock is called through its three system calls and libseccomp through
ctypes, directly: both Python bindings on PyPI were judged (see
``docs/safety.md``) and neither covers what this needs cheaply.

``available()`` tells, without changing anything, what this machine can
enforce; ``confine()`` applies it in the child and reports what it applied. On
a kernel without Landlock, or on macOS or Windows, the report names what is
missing, and the runner and the command line say so (or refuse to run, with
``--require-confinement``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

from ..trace import CONFINEMENT_ESSENTIAL as ESSENTIAL
from ..trace import CONFINEMENT_EXTRA
from ..trace import Confinement as Report  # what was enforced, and what is missing and why

# --- the layers, by the names traces record --------------------------------------------

DESCRIPTORS, NO_NEW_PRIVS, CAPABILITIES, LANDLOCK_FILES, SECCOMP = ESSENTIAL
LANDLOCK_NETWORK, LANDLOCK_SCOPES = CONFINEMENT_EXTRA


class ConfinementError(Exception):
    """A layer could not be applied in the child; the message says which and why."""


# --- system calls -------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

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


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc_handle: Optional[ctypes.CDLL] = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.syscall.restype = ctypes.c_long
        _libc_handle.prctl.restype = ctypes.c_int
    return _libc_handle


def _fail(what: str) -> ConfinementError:
    code = ctypes.get_errno()
    return ConfinementError(f"{what} failed: {os.strerror(code) if code else 'unknown error'}")


def landlock_abi() -> Tuple[int, str]:
    """The kernel's Landlock ABI version (0 when absent) and, when absent, why."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is a Linux feature, and this is {sys.platform}"
    libc = _libc()
    abi = libc.syscall(
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
            return (
                0,
                "Landlock is built into this kernel but turned off (add landlock to the lsm= boot option)",
            )
        return 0, f"Landlock is unavailable: {os.strerror(code)}"
    return int(abi), ""


# --- libseccomp, through ctypes ---------------------------------------------------------

_SCMP_ACT_ALLOW = 0x7FFF0000


def _scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


_SCMP_CMP_NE = 1
_SCMP_CMP_EQ = 4
_SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


_seccomp_handle: Optional[ctypes.CDLL] = None
_SECCOMP_LIBRARIES = ("libseccomp.so.2", "libseccomp.so")


def _libseccomp() -> ctypes.CDLL:
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
        _libseccomp()
    except OSError as exc:
        return f"{exc}; install it (e.g. apt-get install libseccomp2)"
    if _libc().prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
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


def _load_seccomp() -> None:
    lib = _libseccomp()
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
        for name in ("fcntl", "fcntl64"):
            for command in _SIGNALLING_FCNTL:
                _seccomp_rule(lib, ctx, deny, name, (1, _SCMP_CMP_EQ, command, 0))
        for request in _SIGNALLING_IOCTL:
            _seccomp_rule(lib, ctx, deny, "ioctl", (1, _SCMP_CMP_EQ, request, 0))
        # Priorities of this process only: as root, lowering those of every
        # process of the same user (PRIO_USER, or another pid) needs no capability.
        # (which, who): PRIO_PROCESS is 0, IOPRIO_WHO_PROCESS 1; who 0 is the caller.
        for name, own_kind in (("setpriority", 0), ("ioprio_set", 1)):
            _seccomp_rule(lib, ctx, deny, name, (0, _SCMP_CMP_NE, own_kind, 0))
            _seccomp_rule(lib, ctx, deny, name, (1, _SCMP_CMP_NE, 0, 0))
        for name in ("sched_setscheduler", "sched_setparam", "sched_setattr"):
            _seccomp_rule(lib, ctx, deny, name, (0, _SCMP_CMP_NE, 0, 0))
        # Signals only to this process.
        me = os.getpid()
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            _seccomp_rule(lib, ctx, deny, name, (0, _SCMP_CMP_NE, me, 0))
        rc = lib.seccomp_load(ctypes.c_void_p(ctx))
        if rc < 0:
            raise ConfinementError(f"the seccomp filter could not be loaded: {os.strerror(-rc)}")
    finally:
        lib.seccomp_release(ctypes.c_void_p(ctx))


# --- the steps of confinement -----------------------------------------------------------


def _close_inherited(keep: Iterable[int]) -> None:
    """Close every descriptor but stdio and ``keep``: what was open before the wall stays usable."""
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


def _no_new_privs() -> None:
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


def _drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    libc = _libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() not in (
            errno.EINVAL,
            errno.EPERM,
        ):
            raise _fail("prctl(PR_CAPBSET_DROP)")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise _fail("capset")


def _landlock(abi: int, read_paths: Sequence[str], device_paths: Sequence[str]) -> List[str]:
    """Apply the filesystem (and, where the ABI has them, network and scope) rules."""
    libc = _libc()
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
    ruleset = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        device = _FS_READ_FILE | _FS_WRITE_FILE | (_FS_IOCTL_DEV if abi >= 5 else 0)
        for paths, rights in ((read_paths, read), (device_paths, device)):
            for path in paths:
                _allow(libc, ruleset, path, rights & fs)
        if (
            libc.syscall(
                ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF),
                ctypes.c_int(ruleset),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return layers


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine lacks needs no rule
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if (
            libc.syscall(
                ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise _fail(f"landlock_add_rule for {path}")
    finally:
        os.close(fd)


# --- what the child may read ------------------------------------------------------------

# The files of /proc/self the child may read: what Python, glibc, torch and
# the BLAS libraries look at (memory, limits, CPU placement). Never the whole
# folder: it holds environ (the user's environment at start-up), and
# task/*/environ again for each thread.
PROC_SELF_READ = (
    "/proc/self/stat",
    "/proc/self/statm",
    "/proc/self/status",
    "/proc/self/maps",
    "/proc/self/limits",
    "/proc/self/cgroup",
    "/proc/self/auxv",
)
_SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    *PROC_SELF_READ,
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/sys/kernel/cap_last_cap",
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/fs/cgroup",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
)
_CUDA_DEVICES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/dri",
)
_CUDA_READ = ("/proc/driver/nvidia", "/sys/bus/pci", "/sys/devices", "/sys/module/nvidia")


def read_paths(extra: Sequence[str] = ()) -> List[str]:
    """The Python installation, the import path, the modules' own folders, and ``extra``.

    The working directory is left out even when it is on the import path
    (``python -m`` puts it there): it is where a user's own files are.
    """
    roots: List[str] = []
    cwd = os.getcwd()
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [p for p in sys.path if p and os.path.abspath(p) != cwd]
    for name in ("torch", "numpy", "tensortrace", "tensortrace.scenarios"):
        module = sys.modules.get(name)
        for folder in getattr(module, "__path__", ()) or ():
            candidates.append(folder)
    candidates += list(_SYSTEM_READ) + list(extra)
    for path in candidates:
        path = os.path.abspath(path)
        if path not in roots:
            roots.append(path)
    return roots


def device_paths(device: str) -> List[str]:
    """Device files a CUDA child must open read-write (none for the CPU)."""
    if not _may_use_cuda(device):
        return []
    found = list(_CUDA_DEVICES)
    try:
        found += [
            os.path.join("/dev", n)
            for n in os.listdir("/dev")
            if n.startswith("nvidia") and n[6:].isdigit()
        ]
    except OSError:
        pass
    return found


def cuda_read_paths(device: str) -> List[str]:
    return list(_CUDA_READ) if _may_use_cuda(device) else []


def _may_use_cuda(device: str) -> bool:
    return device.startswith("cuda") or device == "auto"


# --- the two entry points -------------------------------------------------------------------


def available() -> Report:
    """What confinement this machine can enforce, found without changing anything."""
    enforced: List[str] = []
    missing: List[str] = []
    if not sys.platform.startswith("linux"):
        why = f"kernel confinement is implemented for Linux only, and this is {sys.platform}"
        return Report((), tuple(f"{layer}: {why}" for layer in ESSENTIAL))
    enforced += [DESCRIPTORS, NO_NEW_PRIVS, CAPABILITIES]
    abi, why = landlock_abi()
    if abi:
        enforced.append(LANDLOCK_FILES)
        enforced += [LANDLOCK_NETWORK] if abi >= 4 else []
        enforced += [LANDLOCK_SCOPES] if abi >= 6 else []
        if abi < 4:
            missing.append(
                f"{LANDLOCK_NETWORK}: Landlock ABI {abi} has no network rules (seccomp still refuses sockets)"
            )
    else:
        missing.append(f"{LANDLOCK_FILES}: {why}")
    why = seccomp_support()
    if why:
        missing.append(f"{SECCOMP}: {why}")
    else:
        enforced.append(SECCOMP)
    return Report(tuple(enforced), tuple(missing))


def confine(
    *, keep_fds: Sequence[int], extra_read: Sequence[str] = (), device: str = "cpu"
) -> Report:
    """Confine this (single-threaded, freshly forked) process; report what was applied.

    A layer the machine lacks is reported as missing; a layer that is there but
    fails to apply raises ``ConfinementError``, since a half-built wall must not
    be mistaken for a whole one.
    """
    if not sys.platform.startswith("linux"):
        return available()
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads != 1:
        raise ConfinementError(
            f"the child has {threads} threads; Landlock and seccomp would hold only one"
        )
    plan = available()
    enforced: List[str] = []
    paths = read_paths(list(extra_read) + cuda_read_paths(device))
    devices = device_paths(device)
    _close_inherited(keep_fds)
    enforced.append(DESCRIPTORS)
    _no_new_privs()
    enforced.append(NO_NEW_PRIVS)
    _drop_capabilities()
    enforced.append(CAPABILITIES)
    if LANDLOCK_FILES in plan.enforced:
        enforced += _landlock(landlock_abi()[0], paths, devices)
    if SECCOMP in plan.enforced:
        _load_seccomp()
        enforced.append(SECCOMP)
    return Report(tuple(enforced), plan.missing)
