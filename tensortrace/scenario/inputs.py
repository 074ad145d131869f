"""Reading a file the user named: only a regular file, with a size bound, wherever a link leads.

A scenario folder may come from someone else, and a link in it may lead to
``/proc/kmsg`` (reading it as root blocks for ever), to a FIFO (blocks until
a writer comes), to a device, or to a private file outside the folder. So a
file is read only when, after every link is followed, it is a regular file
outside ``/proc`` and ``/sys`` (whose files are not what their size says),
and never more than the caller's bound, counted as it is read rather than
trusted from ``stat``. The checks are made on the opened descriptor too, so
that a path swapped between the check and the read is caught.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Tuple, Union

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}
_PSEUDO = ("/proc", "/sys")


class Unreadable(Exception):
    """Why a file is not read: a phrase that follows the file's name (``is a FIFO ...``)."""


class TooLarge(Unreadable):
    """The file holds more than the bound; nothing past the bound was read."""


def _kind_phrase(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _pseudo(real: str) -> str:
    """The kernel's pseudo file system ``real`` lies in (``/proc``, ``/sys``), or ''."""
    return next((root for root in _PSEUDO if real == root or real.startswith(root + "/")), "")


def _refusal(mode: int, real: str, what: str) -> str:
    """Why a file of this type at this resolved path is not read, or ''."""
    if not stat.S_ISREG(mode):
        return f"is {_kind_phrase(mode)}, not {what}"
    if _pseudo(real):
        return f"is a file of {_pseudo(real)} (the kernel's state), not {what}"
    return ""


def _opened_path(fd: int, fallback: str) -> str:
    """Where the descriptor really points, as the kernel says (Linux); else ``fallback``."""
    if sys.platform.startswith("linux"):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return fallback


def read_regular(
    path: Union[str, Path], limit: int, what: str = "a scenario file"
) -> Tuple[bytes, str]:
    """The bytes of ``path`` (at most ``limit``) and its resolved path; ``Unreadable`` otherwise.

    ``OSError`` (no such file, permission denied) goes to the caller, who
    words it. ``Unreadable`` is raised before anything is read from a file
    that is not a regular file, that lies in ``/proc`` or ``/sys``, or that
    turns out longer than ``limit`` bytes.
    """
    real = os.path.realpath(path)
    refusal = _refusal(os.stat(path).st_mode, real, what)
    if refusal:
        raise Unreadable(refusal)
    # O_NONBLOCK: a FIFO swapped in after the check must not hold the open.
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC", "O_BINARY"):  # those this system has
        flags |= getattr(os, name, 0)
    fd = os.open(path, flags)
    try:
        real = _opened_path(fd, real)
        refusal = _refusal(os.fstat(fd).st_mode, real, what)
        if refusal:
            raise Unreadable(refusal)
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise TooLarge(f"the file is over the {limit:,}-byte limit for {what}s")
        return b"".join(chunks), real
    finally:
        os.close(fd)


def plain_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` leads to a regular file outside ``/proc`` and ``/sys``: readable."""
    try:
        return not _refusal(os.stat(path).st_mode, os.path.realpath(path), "")
    except OSError:
        return False


def leaves_folder(path: Union[str, Path], real: str) -> bool:
    """Whether ``path`` (a name inside some folder) leads, through links, out of that folder."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    return os.path.dirname(real) != folder and not real.startswith(folder + os.sep)


__all__ = ["TooLarge", "Unreadable", "leaves_folder", "plain_file", "read_regular"]
