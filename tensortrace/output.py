"""Where output goes: stdout, or a file written atomically.

A file is written to a temporary sibling and renamed into place only when
the output is complete, so a failed or interrupted run never leaves a
half-written file, and an earlier file stays intact until then. The file
gets the mode a plain ``open`` would give it: an existing file keeps its own,
a new one follows the umask (the temporary file starts private, 0600).
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
            raise UsageError(f"-o {path}: no format writes {suffix} files (known suffixes: {known}, and .txt for "
                             "console text); name one with --format, or use one of these suffixes")
        return _SUFFIX_FORMATS[suffix]
    return "console"


class Output:
    """A text sink: ``write`` as you go, then ``commit`` (or ``discard``)."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = None if path in (None, "-") else Path(path)
        self._tmp: Optional[str] = None
        self._file: Optional[IO[str]] = None
        if self.path is not None:
            if self.path.is_dir():
                raise UsageError(f"{self.path} is a directory; give a file name to -o")
            folder = self.path.parent
            if not folder.is_dir():
                raise UsageError(f"cannot write {self.path}: the folder {folder} does not exist")
            try:
                import tempfile  # only when writing a file: printing to the terminal does not need it (nor random)

                fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
            except OSError as exc:
                raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from None
            # lone surrogates (from YAML escapes or a step's output) become \udxxx escapes
            self._file = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")

    @property
    def is_terminal(self) -> bool:
        return self.path is None and sys.stdout.isatty()

    def write(self, text: str) -> None:
        if self._file is not None:
            self._file.write(text)
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
        self._file.flush()
        os.fchmod(self._file.fileno(), _mode_for(self.path))
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._tmp, self.path)
        self._tmp = None

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None


def _mode_for(path: Path) -> int:
    """The permission bits ``path`` should end with: its own if it exists, else 0666 less the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
