"""The one family of exceptions the library raises.

Each carries a message a user can act on, and, where there is one, the place
in the input it is about. Only the CLI prints them. An exception raised *by a
scenario's own code* is not one of these: it is recorded in the trace.
"""

from __future__ import annotations

from typing import Any, List, Optional


class TensorTraceError(Exception):
    """Base of every error the tool reports to a user (exit status 2)."""

    slug = "error"

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.column = column

    def location(self) -> str:
        """``file:line:column`` (as much of it as is known), or ''."""
        parts = [p for p in (self.path, self.line, self.column) if p is not None]
        return ":".join(str(p) for p in parts)

    def __str__(self) -> str:
        where = self.location()
        return f"{where}: {self.message}" if where else self.message


class ScenarioError(TensorTraceError):
    """A scenario file that cannot be used: missing, unreadable, or off-contract."""

    slug = "scenario"


class PolicyError(ScenarioError):
    """Code that safe mode refuses to run."""

    slug = "policy"


class TraceFormatError(TensorTraceError):
    """A saved trace that cannot be read back."""

    slug = "trace-format"


class UsageError(TensorTraceError):
    """A command line that asks for something impossible."""

    slug = "usage"


class StepTimeout(BaseException):
    """Raised inside a step that ran past its wall-clock limit.

    Internal: the recorder turns it into the step's ``timeout`` outcome, so it
    never reaches the user. A ``BaseException``, so that a scenario's own
    ``except Exception`` cannot swallow it.
    """


class Interrupted(Exception):
    """Ctrl-C during a run; ``traces`` holds what was traced so far, the cut one last.

    Not a ``TensorTraceError``: the CLI prints what was traced, then exits 130.
    """

    def __init__(self, traces: List[Any]) -> None:
        super().__init__("interrupted")
        self.traces = traces
