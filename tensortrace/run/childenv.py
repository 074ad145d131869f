"""The environment a safe-mode child keeps: what Python, torch, NumPy and BLAS read, no more.

The child is forked from the command, so it starts with the user's whole
environment, API tokens and passwords included, and a scenario could print
them into a trace that is then shared. Before the first step the child's
environment is replaced by a short allow list: locale and time zone, thread
counts and settings of OpenMP, MKL, OpenBLAS and BLIS, and the ``PYTORCH_*``,
``TORCH_*``, ``CUDA_*`` ... settings that torch and its libraries read while
they run. A name that looks like a credential (``TOKEN``, ``SECRET``,
``PASSWORD``, ``_KEY``, ...) is dropped even under a kept prefix.

Both views are replaced: ``os.environ`` and the C library's ``environ``
(cleared with ``clearenv``, then filled again with ``putenv``), and the
strings the process was started with, which stay in its memory and are what
``/proc/self/environ`` shows, are overwritten with zeros for every name that
is dropped. (Landlock also keeps ``/proc/self/environ`` unreadable.)
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, Mapping, Optional, Tuple

KEPT_NAMES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "GOTO_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "CUBLAS_WORKSPACE_CONFIG",
    }
)
KEPT_PREFIXES = (
    "LC_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "BLIS_",
    "NPY_",
    "NUMPY_",
    "PYTORCH_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "CUDA_",
    "CUBLAS_",
    "CUDNN_",
    "NVIDIA_",
)
_CREDENTIAL_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "_KEY",
    "APIKEY",
)


def kept(name: str) -> bool:
    """Whether a variable of this name survives into the child's environment."""
    upper = name.upper()
    if any(word in upper for word in _CREDENTIAL_WORDS):
        return False
    return name in KEPT_NAMES or name.startswith(KEPT_PREFIXES)


def kept_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """The part of ``environ`` the child keeps."""
    return {name: value for name, value in environ.items() if kept(name)}


def _initial_block() -> Optional[Tuple[int, int]]:
    """Where the strings this process was started with lie in memory (Linux), or None."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        # fields[0] is the state (field 3); env_start and env_end are fields 50 and 51
        start, end = int(fields[47]), int(fields[48])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end) if 0 < start < end else None


def _zero_dropped(block: Tuple[int, int]) -> None:
    """Overwrite each ``NAME=value`` of the start-up block whose name is dropped."""
    start, end = block
    data = ctypes.string_at(start, end - start)
    offset = 0
    for entry in data.split(b"\0"):
        name = entry.split(b"=", 1)[0].decode("utf-8", "surrogateescape")
        if entry and not kept(name):
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def scrub(extra: Mapping[str, str] = ()) -> None:
    """Replace this process's environment by the kept part of it, plus ``extra``."""
    keep = kept_environment(os.environ)
    keep.update(extra)
    block = _initial_block() if sys.platform.startswith("linux") else None
    try:
        libc = ctypes.CDLL(None)
        clearenv = libc.clearenv
    except (OSError, AttributeError):
        clearenv = None
    if clearenv is not None:
        clearenv()  # the C environ, including what native code set with setenv
    for name in list(os.environ):
        del os.environ[name]  # (unsetenv)
    for name, value in keep.items():
        os.environ[name] = value  # (putenv)
    if block is not None:
        _zero_dropped(block)


__all__ = ["KEPT_NAMES", "KEPT_PREFIXES", "kept", "kept_environment", "scrub"]
