"""What a step's code runs inside, so that it runs as it would in plain Python.

The recorder runs each step below its own frames and inside its own warning
capture. Here it gets back what a plain script's top level has: as many
stack frames, and the warning filters the scenario itself has set so far
(above rule 6's "record every warning, repeats included"), and the time
limit that stops a step that runs too long.
"""

from __future__ import annotations

import signal
import sys
import warnings
from typing import Any, Dict, List, Optional

# the C module under ``signal``: the same calls, without converting each handler to an enum
# (~8 µs a call)
try:
    import _signal as _raw_signal
except ImportError:  # pragma: no cover - an interpreter without it
    _raw_signal = signal  # type: ignore[misc]

from ..errors import StepTimeout

# Rule 6: every warning is recorded, repeats included, unless the scenario's
# own filters (which come first) say otherwise.
_ALWAYS = ("always", None, Warning, None, 0)


def _filters_mutated() -> None:
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(
        warnings, "_filters_mutated_lock_held", None
    )
    if mutated is not None:
        mutated()


# Frames between the probe's count and the step's code, so that the step's code
# gets what the module level of a plain script gets (measured, see the tests).
_PROBE_FRAMES = 3


def _free_depth() -> int:
    """How many more nested calls fit here.

    Counted by trying, not from the frames on the stack: calls made through C
    (hooks, ``map``, ``next`` of a generator) use the recursion budget
    without a frame of their own, so counting frames undercounts.
    """

    def down(n: int) -> int:
        try:
            return down(n + 1)
        except RecursionError:
            return n

    return down(0)


class PlainStackDepth:
    """As many frames for the step's code as a plain script's top level has.

    The step runs below the tool's own frames (runner, recorder, exec); the
    recursion limit is raised by their number, so that a recursion that works
    in plain Python works traced, and one that fails fails at the same depth.
    A limit the step sets itself is kept as it set it (it then counts the
    tool's frames too, as a limit set inside any caller's frames would).

    ``memo`` keeps the depth the tool uses between the steps of one run, whose
    code is always reached through the same calls: probing it costs about a
    quarter of a millisecond, once instead of once per step.
    """

    __slots__ = ("memo", "previous", "raised")

    def __init__(self, memo: Optional[Dict[str, int]] = None) -> None:
        self.memo = memo

    def __enter__(self) -> None:
        memo = self.memo
        previous = self.previous = sys.getrecursionlimit()
        if memo is not None and "used" in memo:
            used = memo["used"]
        else:
            used = previous - _free_depth()
            if memo is not None:
                memo["used"] = used
        self.raised = previous + max(0, used - _PROBE_FRAMES)
        sys.setrecursionlimit(self.raised)

    def __exit__(self, *exc: Any) -> None:
        if sys.getrecursionlimit() == self.raised:  # else the step set a limit of its own: keep it
            sys.setrecursionlimit(self.previous)


def install_warning_filters(scenario_filters: List[Any]) -> None:
    """The filters the scenario's code set so far, above rule 6's "always" for everything else."""
    warnings.filters[:] = list(scenario_filters) + [_ALWAYS]
    _filters_mutated()


def scenario_warning_filters() -> List[Any]:
    """The filters in force now, less the tool's own.

    They persist to the next step, as in plain Python.
    """
    return [f for f in warnings.filters if f is not _ALWAYS]


def _expire(signum: int, frame: Any) -> None:
    raise StepTimeout()


class StepAlarm:
    """``SIGALRM`` after ``seconds`` of the step's code: it raises ``StepTimeout`` there.

    The handler the process had is back in place after the step, so a
    handler the scenario's code installs lives on between steps, as it would.
    """

    __slots__ = ("seconds", "previous")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        self.previous = _raw_signal.signal(signal.SIGALRM, _expire)
        _raw_signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        _raw_signal.setitimer(signal.ITIMER_REAL, 0)
        _raw_signal.signal(signal.SIGALRM, self.previous)
