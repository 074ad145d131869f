"""Where output goes: stdout, a file written atomically, or a stream written through.

A regular file is written to a temporary sibling and renamed into place only
when the output is complete, so a failed or interrupted run never leaves a
half-written file, and an earlier file stays intact until then. The file
gets the mode a plain ``open`` would give it: an existing regular file keeps
its read, write and execute bits (never set-user-ID, set-group-ID or sticky),
a new one follows the umask (the temporary file starts private, 0600). A
symbolic link to a file is replaced by a new file that follows the umask,
whatever the mode of the file it pointed to, which is untouched.

What is not a regular file is never renamed over: renaming a file over
``/dev/null`` (as root) would replace the machine's device with a file.
A character device, a FIFO or a unix socket is written through, as a shell's
``>`` would, while the output is made, and so is a link to one
(``/dev/stdout``, ``/dev/fd/3``); a directory or a block device is refused
with one sentence.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import IO, Optional

from .errors import UsageError


# What a file name says about the format wanted, when --format does not say.
_SUFFIX_FORMATS = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".svg": "svg",
    ".dot": "dot",
    ".gv": "dot",
    ".mmd": "mermaid",
}


def format_for(fmt: Optional[str], path: Optional[str]) -> str:
    """The format asked for; else the one the output file's suffix names; else ``console``."""
    if fmt is not None:
        return fmt
    if path not in (None, "-"):
        suffix = Path(path).suffix.lower()
        if suffix in ("", ".txt", ".log"):
            return "console"
        if suffix not in _SUFFIX_FORMATS:  # out.pdf would otherwise get console text
            known = ", ".join(sorted(_SUFFIX_FORMATS))
            raise UsageError(
                f"-o {path}: no format writes {suffix} files (known suffixes: {known}, "
                "and .txt for console text); name one with --format, or use one of these suffixes"
            )
        return _SUFFIX_FORMATS[suffix]
    return "console"


def _kind(path: Path, *, follow: bool = False) -> Optional[int]:
    """The type bits of ``path`` (of a link itself unless ``follow``), or None when absent."""
    try:
        return stat.S_IFMT((os.stat if follow else os.lstat)(path).st_mode)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


_STREAMS = (stat.S_IFCHR, stat.S_IFIFO, stat.S_IFSOCK)


def _written_through(path: Path) -> Optional[int]:
    """The type of the stream ``path`` leads to, when it must be written through; None for a file.

    A character device, FIFO or socket, or a link to one, is written through.
    So is a link into ``/proc`` (``/dev/stdout`` -> ``/proc/self/fd/1``),
    which names an open descriptor whatever it is: ``-o /dev/stdout`` writes
    where standard output goes, and the link stays. A directory or a block
    device is refused; any other link is replaced by the new file.
    """
    kind = _kind(path)
    if kind is None or kind == stat.S_IFREG:
        return None
    followed = _kind(path, follow=True) if kind == stat.S_IFLNK else kind
    if followed == stat.S_IFDIR:
        raise UsageError(f"{path} is a directory; give a file name to -o")
    if followed == stat.S_IFBLK:
        raise UsageError(
            f"{path} is a block device; "
            "give -o a file name, a terminal, a pipe or a character device"
        )
    if followed in _STREAMS:
        return followed
    if kind == stat.S_IFLNK and followed == stat.S_IFREG and _names_a_descriptor(path):
        return stat.S_IFREG
    return None


def _names_a_descriptor(path: Path) -> bool:
    """Whether the link ``path`` leads through ``/proc`` (``/dev/fd/N``, ``/dev/stdout``)."""
    where = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        try:
            target = os.readlink(where)
        except OSError:
            return False
        where = os.path.normpath(os.path.join(os.path.dirname(where), target))
        if where == "/proc" or where.startswith("/proc/"):
            return True
    return False


def _flag(name: str) -> int:
    """An ``os.O_*`` flag, or 0 where this system has none (Windows has no O_NOCTTY)."""
    return getattr(os, name, 0)


def _open_stream(path: Path, kind: int) -> IO[str]:
    """A text handle writing through ``path`` (a device, FIFO, socket or descriptor)."""
    try:
        if kind == stat.S_IFSOCK:
            import socket  # only for a socket given to -o

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
            except OSError:
                sock.close()
                raise
            fd = os.dup(sock.fileno())
            sock.close()
        else:  # a FIFO waits here for its reader, as a shell's redirection does
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | _flag("O_NOCTTY") | _flag("O_CLOEXEC"))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    if stat.S_IFMT(os.fstat(fd).st_mode) != kind:  # swapped for something else meanwhile
        os.close(fd)
        raise UsageError(f"cannot write {path}: it changed while it was being opened; try again")
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")


_UNFINISHED: dict = {}  # temporary files of outputs not committed or discarded yet


def discard_unfinished() -> None:
    """Remove every temporary file not yet renamed into place: for a signal handler, which
    ends the process without unwinding (nothing half-written is ever left)."""
    for tmp in list(_UNFINISHED):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _UNFINISHED.pop(tmp, None)


class Output:
    """A text sink: ``write`` as you go, then ``commit`` (or ``discard``)."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = None if path in (None, "-") else Path(path)
        self._tmp: Optional[str] = None
        self._file: Optional[IO[str]] = None
        self._stream = False  # written through, not renamed into place
        if self.path is None:
            return
        stream = _written_through(self.path)
        if stream is not None:
            self._file = _open_stream(self.path, stream)
            self._stream = True
            return
        folder = self.path.parent
        if not folder.is_dir():
            raise UsageError(f"cannot write {self.path}: the folder {folder} does not exist")
        try:
            # only when writing a file: printing to the terminal needs neither it nor random
            import tempfile

            fd, self._tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=folder
            )
        except OSError as exc:
            raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        _UNFINISHED[self._tmp] = None
        # lone surrogates (from YAML escapes or a step's output) become \udxxx escapes
        self._file = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")

    @property
    def is_terminal(self) -> bool:
        return self.path is None and sys.stdout.isatty()

    def write(self, text: str) -> None:
        if self._file is not None:
            try:
                self._file.write(text)
                if self._stream:
                    self._file.flush()
            except BrokenPipeError:
                raise  # the reader went away: the command stops quietly, as with stdout
            except OSError as exc:
                raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        else:
            try:
                sys.stdout.write(text)
            except UnicodeEncodeError:  # a character stdout's encoding cannot carry
                encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
                sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))
            sys.stdout.flush()

    def commit(self) -> None:
        if self._file is None:
            return
        if self._stream:
            handle, self._file = self._file, None
            try:
                handle.close()
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from None
            return
        self._file.flush()
        os.fchmod(self._file.fileno(), _mode_for(self.path))
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        if _kind(self.path) not in (None, stat.S_IFREG, stat.S_IFLNK):  # now a device or folder
            self.discard()
            raise UsageError(
                f"cannot write {self.path}: it is no longer a regular file; nothing was replaced"
            )
        os.replace(self._tmp, self.path)
        _UNFINISHED.pop(self._tmp, None)
        self._tmp = None

    def discard(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # a stream whose reader went away: nothing more to say
            self._file = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            _UNFINISHED.pop(self._tmp, None)
            self._tmp = None


def _mode_for(path: Path) -> int:
    """The permission bits the new file gets: a regular file's own, else 0666 less the umask.

    Only the read, write and execute bits are kept, never set-user-ID, set-group-ID or
    sticky: the new file is a new file. A link's target lends nothing: the link is
    replaced, and its target may be anyone's file (a setuid 4777 one was seen).
    """
    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode):
            return stat.S_IMODE(info.st_mode) & 0o777
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
