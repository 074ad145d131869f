"""Reading a saved trace the user named (``render``, ``explore``): bounded bytes, typed records.

The file is read as any input is (``inputs.read_regular``: a regular file only,
wherever a link leads, never more than ``MAX_TRACE_FILE_BYTES``), and its bytes
go straight to the typed records, which check every value; every failure is
one ``TraceFormatError`` naming the file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from ..errors import TraceFormatError
from ..trace import Trace
from ..render.json import traces_from_json

# A saved trace of a 250,000-node graph over a long run is far below this.
MAX_TRACE_FILE_BYTES = 1 << 30


def load_traces(source: str) -> List[Trace]:
    """The traces of a saved document (``-``: standard input).

    Every byte is checked against the records.
    """
    from ..scenario.inputs import Unreadable, read_regular

    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_TRACE_FILE_BYTES + 1)
            if len(data) > MAX_TRACE_FILE_BYTES:
                raise Unreadable(
                    f"the input is over the {MAX_TRACE_FILE_BYTES:,}-byte limit for a saved trace"
                )
        else:
            data, _ = read_regular(source, MAX_TRACE_FILE_BYTES, what="a saved trace")
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=source) from None
    except Unreadable as exc:
        raise TraceFormatError(str(exc), path=source) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot be read: {exc.strerror or exc}", path=source) from None
    try:
        return traces_from_json(data)
    except TraceFormatError as exc:
        raise TraceFormatError(exc.message, path=source, line=exc.line, column=exc.column) from None


def is_saved_trace(target: str) -> bool:
    """A JSON trace rather than a scenario: a .json file, or another file (not a scenario's
    suffix) holding JSON."""
    from ..scenario.inputs import plain_file

    path = Path(target)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return True
    if suffix in (".yaml", ".yml", ".py", ".ipynb") or not plain_file(path):
        return False  # a device, FIFO or /proc file: the scenario loader refuses it, unread
    try:
        with path.open("rb") as handle:
            return handle.read(64).lstrip().startswith(b"{")
    except OSError:
        return False
