"""What a renderer is asked for, and the one shape every renderer has.

``RenderOptions`` is plain data chosen by the caller (the command line works
out the terminal's width and whether to use colour); a renderer never looks at
the terminal itself, so the same trace and options give the same text
anywhere.
"""

from __future__ import annotations

from typing import FrozenSet, Optional, Protocol, Sequence, Tuple

from ..trace import Step, Trace
from .structs import record


@record
class RenderOptions:
    """What to show. The defaults show everything the trace holds."""

    steps: Optional[FrozenSet[int]] = None  # step indexes to show (1-based); None: all
    changes_only: bool = False  # only rows whose facts changed in that step
    all_rows: bool = False  # console: every row, even past layout.QUIET_ROWS tensors
    show: Optional[Tuple[str, ...]] = None  # names to show (overrides the scenario's)
    values: bool = True  # False: no values/grad columns
    width: Optional[int] = None  # console width in columns; None: DEFAULT_WIDTH
    color: bool = False  # ANSI colour in console output
    # what each step ran: "none", "calls" (what the code did: the calls it wrote, metadata
    # reads and repeats folded), "all" (every recorded call) or "aten" (and their ATen operations)
    ops: str = "calls"
    full_values: bool = False  # every recorded element, not a one-line summary past a few
    # a loop's passes: "first" (the first in full, the rest folded unless one differs) or "all"
    iterations: str = "first"


DEFAULT_OPTIONS = RenderOptions()
# Width of console output when the caller does not give one (e.g. not a terminal).
DEFAULT_WIDTH = 100
# The narrowest width asked for that the command line and snoop() take: a table's columns,
# and a tensor's facts as a block of lines, need about this much.
MIN_WIDTH = 40


def resolve_width(width: Optional[int]) -> int:
    """The width asked for (never narrower than 20 columns), else ``DEFAULT_WIDTH``."""
    if width is not None:
        return max(20, width)
    return DEFAULT_WIDTH


class Renderer(Protocol):
    """Every format: all traces in, one string out; nothing printed, nothing read."""

    def __call__(self, traces: Sequence[Trace], options: RenderOptions) -> str: ...


class StreamRenderer(Protocol):
    """A format written while the run goes: its text for each event, in order."""

    def start(self, trace: Trace) -> str: ...

    def step(self, trace: Trace, step: Step) -> str: ...

    def end(self, trace: Trace) -> str: ...


__all__ = [
    "DEFAULT_OPTIONS",
    "DEFAULT_WIDTH",
    "MIN_WIDTH",
    "RenderOptions",
    "Renderer",
    "StreamRenderer",
    "resolve_width",
]
