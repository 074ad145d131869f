"""What ``python FILE ARGS`` sets up before a script's first line, so that the tool sets it too.

A Python file is run by ``tensortrace run FILE -- ARGS`` (and by
``tensortrace doctor FILE ARGS``) as ``python FILE ARGS`` would run it:
``sys.argv`` is ``[FILE, *ARGS]``, ``sys.path[0]`` the script's folder (its
symbolic links resolved, as Python resolves them), so that a module next to it
imports, and the script's module is ``__main__`` with ``__file__`` its
absolute path. ``running_as_python`` sets the first two for the length of the
run and puts back what was there; ``main_globals`` gives the last two.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Dict, Iterator, Sequence


def script_folder(path: str) -> str:
    """The folder Python puts first on ``sys.path`` for ``python path``."""
    return os.path.dirname(os.path.realpath(path))


def main_globals(path: str) -> Dict[str, str]:
    """The names a script's module has before its first line: ``__name__`` and ``__file__``."""
    return {"__name__": "__main__", "__file__": os.path.abspath(path)}


@contextlib.contextmanager
def running_as_python(argv0: str, args: Sequence[str], folder: str) -> Iterator[None]:
    """``sys.argv`` as ``[argv0, *args]`` and ``sys.path[0]`` as ``folder`` meanwhile."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [argv0, *args]
    sys.path[0:1] = [folder]
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


__all__ = ["main_globals", "running_as_python", "script_folder"]
