"""What the confined child may read.

Landlock (:mod:`.landlock`) allows reading only beneath the paths listed
here: the Python installation, the import path, torch's, numpy's and
tensortrace's own folders, the scenario file, and the few system paths they
read. Of ``/proc/self`` only a few files are listed, never ``environ``. No
device file is writable: safe mode runs on the CPU only. The lists are kept
apart from the system calls so that they can be read (and tested, and
documented in ``docs/safety.md``) on their own.
"""

from __future__ import annotations

import os
import sys
from typing import List, Sequence

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
