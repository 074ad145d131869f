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
* **a thread limit** (``RLIMIT_NPROC``, counted as the kernel counts it: per
  real user, never for root, so a child of root counts under a user id of its
  own; see :func:`.privileges.cap_threads`), so that the child cannot use up
  the machine's process ids;
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
  ``prctl`` only from a short allow list, and ``sched_set*`` only on itself;
* the resource limits the runner sets stay in force: their hard limits are
  lowered, and without capabilities they cannot be raised again.

Each layer lives in a module of its own: :mod:`.privileges` (descriptors,
no_new_privs, capabilities), :mod:`.landlock`, :mod:`.seccomp`, and
:mod:`.readable` (the paths Landlock lets the child read). This module puts
them together in order and says what went up.

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

import os
import sys
from typing import List, Sequence

from ..trace import CONFINEMENT_ESSENTIAL as ESSENTIAL
from ..trace import CONFINEMENT_EXTRA

# Report: what was enforced, and what is missing and why
from ..trace import Confinement as Report
from .landlock import apply as apply_landlock
from .landlock import landlock_abi
from .privileges import (
    ConfinementError,
    cap_threads,
    close_inherited,
    counting_uid,
    drop_capabilities,
    no_new_privs,
    thread_cap,
)
from .readable import PROC_SELF_READ, read_paths
from .seccomp import load as load_seccomp
from .seccomp import seccomp_support

__all__ = [
    "ESSENTIAL",
    "PROC_SELF_READ",
    "ConfinementError",
    "Report",
    "available",
    "confine",
    "counting_uid",
    "landlock_abi",
    "read_paths",
    "seccomp_support",
    "thread_cap",
]

# --- the layers, by the names traces record --------------------------------------------

DESCRIPTORS, NO_NEW_PRIVS, CAPABILITIES, LANDLOCK_FILES, SECCOMP = ESSENTIAL
LANDLOCK_NETWORK, LANDLOCK_SCOPES, THREAD_LIMIT = CONFINEMENT_EXTRA


# --- the two entry points -------------------------------------------------------------------


def available() -> Report:
    """What confinement this machine can enforce, found without changing anything."""
    enforced: List[str] = []
    missing: List[str] = []
    if not sys.platform.startswith("linux"):
        why = f"kernel confinement is implemented for Linux only, and this is {sys.platform}"
        return Report((), tuple(f"{layer}: {why}" for layer in ESSENTIAL))
    enforced += [DESCRIPTORS, NO_NEW_PRIVS, CAPABILITIES, THREAD_LIMIT]
    abi, why = landlock_abi()
    if abi:
        enforced.append(LANDLOCK_FILES)
        enforced += [LANDLOCK_NETWORK] if abi >= 4 else []
        enforced += [LANDLOCK_SCOPES] if abi >= 6 else []
        if abi < 4:
            missing.append(
                f"{LANDLOCK_NETWORK}: Landlock ABI {abi} has no network rules "
                "(seccomp still refuses sockets)"
            )
    else:
        missing.append(f"{LANDLOCK_FILES}: {why}")
    why = seccomp_support()
    if why:
        missing.append(f"{SECCOMP}: {why}")
    else:
        enforced.append(SECCOMP)
    return Report(tuple(enforced), tuple(missing))


def confine(*, keep_fds: Sequence[int], extra_read: Sequence[str] = ()) -> Report:
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
    paths = read_paths(list(extra_read))
    close_inherited(keep_fds)
    enforced.append(DESCRIPTORS)
    no_new_privs()
    enforced.append(NO_NEW_PRIVS)
    missing = list(plan.missing)
    why = cap_threads(thread_cap())  # before the capabilities go: root's needs CAP_SETUID
    if why:
        missing.append(f"{THREAD_LIMIT}: {why}")
    else:
        enforced.append(THREAD_LIMIT)
    drop_capabilities()
    enforced.append(CAPABILITIES)
    if LANDLOCK_FILES in plan.enforced:
        enforced += apply_landlock(landlock_abi()[0], paths)
    if SECCOMP in plan.enforced:
        load_seccomp()
        enforced.append(SECCOMP)
    return Report(tuple(enforced), tuple(missing))
