"""The records of a doctor report: what the console shows and ``--format json`` writes.

Plain frozen values (str, int, tuples, other records), made after the run
from what the recorder saw; none holds a tensor, a frame or a graph node.
JSON goes through msgspec, and ``report_schema`` is the JSON Schema of the
same records, so a reader can check a report without this package.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import msgspec

REPORT_VERSION = 1


class Place(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A line of the user's code: ``path:line`` (relative to the working directory when
    under it), the function it is in, and its text."""

    path: str
    line: int
    function: str
    code: str


class Write(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An in-place write to the memory of a saved tensor, seen at the dispatch level."""

    op: str  # the ATen operation, e.g. aten.relu_
    place: Optional[Place]
    alias: Optional[str]  # what the writing code called the tensor it wrote: "h", ".data of y"
    version: Optional[int]  # the saved tensor's version before; None: the write bumped none (.data)


class Saved(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tensor autograd saved for backward."""

    name: Optional[str]  # what the code called it, where known
    node: Optional[str]  # the graph node that saved it (its grad_fn name), where known
    shape: Tuple[int, ...]
    dtype: str
    place: Optional[Place]  # the user's line whose operation saved it
    version: int  # its version when saved


class Cut(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A place where a tensor lost its link to the graph."""

    kind: str  # "detach()", "torch.no_grad()", ".numpy()", ...
    place: Place


class Failure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Why a backward (or autograd.grad) failed, and where to change the code."""

    kind: Literal["modified-in-place", "freed-graph", "no-grad", "other"]
    headline: str  # the first line shown: names the line to change
    error: str  # the first line of PyTorch's message
    backward: Optional[Place]  # the call that failed
    saved: Optional[Saved] = None
    writes: Tuple[Write, ...] = ()
    freed_by: Optional[Place] = None  # the earlier backward that freed the graph
    carrier: Optional[str] = None  # the tensor that carries the old graph into this one
    carried_at: Optional[Place] = None  # where the new graph used it
    cuts: Tuple[Cut, ...] = ()  # nearest first
    fixes: Tuple[str, ...] = ()


class Silent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A backward that read a saved tensor whose contents changed, its version unchanged."""

    headline: str  # the first line shown: the write when seen, else where to look
    saved: Saved
    backward: Optional[Place]
    writes: Tuple[Write, ...]  # the writes the watch saw (.data); () for writes outside PyTorch
    shares: Tuple[Cut, ...]  # NumPy views of its memory the code made (``.numpy()``)
    leaves: Tuple[str, ...]  # leaves whose gradients were computed from the changed values
    times: int  # backward calls that read it changed


class Watched(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How much the run gave the doctor to watch."""

    saved: int  # tensors saved for backward
    writes: int  # in-place writes to the memory of a saved tensor
    backwards: int  # backward and autograd.grad calls


class Report(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything doctor found in one run."""

    version: int
    target: str
    watched: Watched
    failure: Optional[Failure]
    silent: Tuple[Silent, ...]
    exit_status: Optional[int] = None  # the script's, under the command line
    nonfinite: Optional["nonfinite.NonFinite"] = None  # the first NaN or Inf of the run


from . import nonfinite  # noqa: E402 (its records use Place, defined above)


def report_json(report: Report) -> str:
    """The report as one JSON document, ending in a newline."""
    return msgspec.json.format(msgspec.json.encode(report).decode("utf-8"), indent=2) + "\n"


def report_from_json(text: str) -> Report:
    """A report read back (typed, checked) from ``report_json``'s output."""
    return msgspec.json.decode(text, type=Report)


def report_schema() -> dict:
    """The JSON Schema of a report."""
    return msgspec.json.schema(Report)
