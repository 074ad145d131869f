"""The records of a doctor report: what the console shows and ``--format json`` writes.

Plain frozen values (str, int, tuples, other records), made after the run
from what the recorder saw; none holds a tensor, a frame or a graph node.
JSON goes through msgspec, and ``report_schema`` is the JSON Schema of the
same records, so a reader can check a report without this package.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple, Union

import msgspec

# 2: a fix is a record (its text, the edits that make it, whether running them worked); the
# freed-graph fields name the shared node, the carrier's line and the runs it crossed; a step
# or other bystander; cuts that starve leaves of gradients. Version 1 reports still load.
# 3: a failure's kind may be "not-scalar" (backward of a tensor of several numbers) or
# "leaf-in-place" (an in-place write into a leaf that requires grad) or "non-leaf-grad" (a
# ``.grad`` read as None from a tensor that is not a leaf) or "numpy-requires-grad"; for these
# three, ``backward`` is the line that raised. Versions 1 and 2 still load.
REPORT_VERSION = 3
# the kinds of failure raised by a line of the script, not by a backward
LINE_KINDS = ("leaf-in-place", "non-leaf-grad", "numpy-requires-grad")


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

    kind: str  # "detach()", "torch.no_grad()", ".numpy()", "argmax", "frozen parameters", ...
    place: Place


class Edit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One change to a file: lines ``line`` to ``end`` (1-based, inclusive) become ``text``.

    ``end == line - 1`` inserts ``text`` before ``line``; an empty ``text`` deletes the
    lines. ``text`` holds whole lines, indented, without the last newline."""

    path: str  # as places write it: relative to the working directory when under it
    line: int
    end: int
    text: str
    was: str = ""  # the lines it replaces, as they were


class Check(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What became of a fix applied to a copy of the script and run."""

    verdict: Literal["passed", "failed", "unchecked"]
    detail: str  # passed: what ran; failed: the error it met, and where; unchecked: why not


class Fix(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A change to make: in words, as edits of the named lines, and whether it was run."""

    text: str
    edits: Tuple[Edit, ...] = ()
    check: Optional[Check] = None  # None: not a change that can be run (advice)


class Failure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Why a backward (or autograd.grad) failed, and where to change the code."""

    kind: Literal[
        "modified-in-place",
        "freed-graph",
        "no-grad",
        "not-scalar",
        "leaf-in-place",
        "non-leaf-grad",
        "numpy-requires-grad",
        "other",
    ]
    headline: str  # the first line shown: names the line to change
    error: str  # the first line of PyTorch's message
    backward: Optional[Place]  # the call that failed
    saved: Optional[Saved] = None
    backward_run: int = 1  # which of its line's backward calls failed (1: the first)
    writes: Tuple[Write, ...] = ()
    freed_by: Optional[Place] = None  # the earlier backward that freed the graph
    carrier: Optional[str] = None  # the tensor that carries the old graph into this one
    carried_at: Optional[Place] = None  # where the new graph used it
    cuts: Tuple[Cut, ...] = ()  # nearest first
    # a version 1 report holds plain sentences; version 2 holds Fix records
    fixes: Tuple[Union[Fix, str], ...] = ()
    shared: Optional[Place] = None  # freed graph: the forward line of the node both backwards need
    shared_node: Optional[str] = None  # that node's name (its grad_fn)
    assigned_at: Optional[Place] = None  # freed graph: the line that assigned the carrier
    runs: Optional[Tuple[int, int]] = None  # freed graph: carried from run k to k+1 of a line
    unit: str = "run"  # what a run of that line is: "iteration" in a loop
    blocked: Tuple[Write, ...] = ()  # writes since the first backward that rule retain_graph out


class Silent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A backward that read a saved tensor whose contents changed, its version unchanged."""

    headline: str  # the first line shown: the write when seen, else where to look
    saved: Saved
    backward: Optional[Place]
    writes: Tuple[Write, ...]  # the writes the watch saw (.data); () for writes outside PyTorch
    shares: Tuple[Cut, ...]  # NumPy views of its memory the code made (``.numpy()``)
    leaves: Tuple[str, ...]  # leaves whose gradients were computed from the changed values
    times: int  # backward calls that read it changed
    unaffected: Tuple[str, ...] = ()  # leaves it reaches whose gradients came out the same
    exact: bool = False  # leaves found by running the node with the old and new values


class Starved(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An optimizer step over parameters that took part in a forward but got no gradient,
    because a cut on the way to the loss kept the backward from reaching them."""

    headline: str
    step: Optional[Place]  # the optimizer's step() line
    cut: Optional[Cut]  # where their output left the graph
    parameters: Tuple[str, ...]  # their names (module paths where known)
    times: int  # steps that found them without gradients
    fixes: Tuple[Fix, ...] = ()


class Aside(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A region doctor stepped out of, because what runs there refuses its hooks."""

    what: str  # "torch.func.grad", ...
    place: Optional[Place]
    times: int


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
    starved: Tuple[Starved, ...] = ()
    aside: Tuple[Aside, ...] = ()  # regions run without doctor's hooks
    checked: Optional[str] = None  # how fixes were checked (the script ran again), or why not
    nonfinite: Optional["nonfinite.NonFinite"] = None  # the first NaN or Inf of the run


from . import nonfinite  # noqa: E402 (its records use Place and Fix, defined above)


def report_json(report: Report) -> str:
    """The report as one JSON document, ending in a newline."""
    return msgspec.json.format(msgspec.json.encode(report).decode("utf-8"), indent=2) + "\n"


def report_from_json(text: str) -> Report:
    """A report read back (typed, checked) from ``report_json``'s output."""
    return msgspec.json.decode(text, type=Report)


def report_schema() -> dict:
    """The JSON Schema of a report."""
    return msgspec.json.schema(Report)
