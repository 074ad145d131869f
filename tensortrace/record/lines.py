"""Steps of the user's own code, one line (or statement) at a time: ``LineRecorder``.

``snoop()`` hears that a line of the user's function is about to start, and
the ``%%tensortrace`` cell magic runs a cell one top-level statement at a
time; both hand each finished line, with the names it can see, to a
``LineRecorder``, which records it with the same ``steps.StepRecorder`` the
scenario tracer uses: tensors, op log, gradient flow, graphs, saved tensors
and predictions alike. Nothing is captured or changed: the code's output
and warnings go where they always go.

Operations are recorded in one of two ways:

* ``running()`` around each statement that the caller runs itself (the cell
  magic ``exec``s statement by statement);
* ``span()`` around code that runs on its own (a function under ``snoop()``):
  the recording modes are entered once, ``begin(line)`` starts a line's
  recording and ``record`` ends it. A line past ``max_iterations`` runs with
  the recording paused, so a long loop pays for it only while it is recorded.

A warning PyTorch raises from C++ is attributed to the innermost Python frame,
which under the recording modes is theirs; in a span, ``placed_warnings``
shows it where plain PyTorch shows it, at the line of the user's code that
made the call (the tracer does the same for the warnings it records).
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import types
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.overrides
import torch.utils._python_dispatch

from ..trace import ScenarioInfo, Step, TensorState, Trace
from ..trace.names import covers
from . import flow, opmodes, ops
from .graph import saved_suspects
from .sites import SiteReader
from .outcome import error_info, first_line
from .steps import StepRecorder, environment, unrecorded

DEFAULT_MAX_ITERATIONS = 10  # times one line is recorded before its later runs are only counted
# Names a notebook's namespace holds for the shell itself, never the user's tensors.
SHELL_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})


class LineRecorder:
    """Records the steps of one traced piece of code, and makes them a ``Trace``.

    ``code``: the text the recording will see, which decides how deep operations
    can be recorded (``recordability``); ``ops`` False records none. ``user_file``: the
    file of the code recorded, whose expressions name the calls made inside them (``sites``);
    ``user_code``: the one code object of it that is recorded (the function ``snoop()``
    traces), when the rest of the file is not the code the steps show.
    """

    def __init__(
        self,
        title: str,
        source: Optional[str],
        *,
        code: str = "",
        show: Optional[Sequence[str]] = None,
        graph: Optional[Sequence[str]] = None,
        values: bool = True,
        ops: bool = True,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        user_file: Optional[str] = None,
        user_code: Any = None,
    ) -> None:
        self.title = title
        self.source = source
        self.show = tuple(show) if show is not None else None
        self.graph = tuple(graph or ())
        self.max_iterations = max_iterations
        self.notices: List[str] = []
        self.recorder = StepRecorder(
            code, ops=ops, values=values, notices=self.notices, scope="in scope"
        )
        if user_file is not None:  # a call made inside another is said by the line's expression
            ops = self.recorder.ops
            if user_code is not None:
                ops.users = user_code.__eq__
            else:
                ops.users = lambda code: code.co_filename == user_file
            ops.reader = SiteReader(linecache.getlines)
        self.caught: List[Any] = []  # warnings are not captured: they reach the user as ever
        self.steps: List[Step] = []
        self.runs: Dict[int, int] = {}  # line -> times it ran
        self.skipped: Dict[int, int] = {}  # line -> runs not recorded since the last recorded step
        self.graphed: Dict[str, int] = {}  # name -> id of the grad_fn whose graph was drawn last

    # recording operations ----------------------------------------------------------
    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The context that records the operations of one statement the caller runs."""
        if self.recorder.level is None:
            yield
            return
        with placed_warnings(), self.recorder.modes(self.caught):
            yield

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        """The context that records operations over code that runs on its own (``begin``)."""
        if self.recorder.level is None:
            yield
            return
        with placed_warnings(), self.recorder.watch(self.caught):
            yield

    def begin(self, line: Optional[int]) -> None:
        """``line`` is about to run: its operations are its own. Past max_iterations it runs
        with the recording paused, and no step's recording is made for it (a loop's later
        runs cost a few microseconds each, not a recorder's set-up)."""
        if line is not None and self.runs.get(line, 0) >= self.max_iterations:
            self.recorder.cut()
        else:
            self.recorder.resume(self.caught)

    # what the backends and the cell magic call ---------------------------------------
    def record(
        self,
        code: str,
        line: Optional[int],
        namespace: Dict[str, Any],
        error: Optional[BaseException] = None,
        *,
        counted: bool = False,
    ) -> None:
        """The statement ``code`` at ``line`` just ran (or raised ``error``); ``namespace`` is
        what it sees. ``counted``: the caller has already counted this run with ``skip``."""
        if not counted and self.skip(line, error):
            return
        recorder = self.recorder
        recorder.cut()
        index = len(self.steps) + 1
        gap = self._skipped_runs()
        if gap is not None:  # what a prediction may not blame on this step's own code
            recorder.predictor.gaps[index] = f"{gap} that were not recorded"
        note = self._skipped_note()
        failed = None if error is None else error_info(error, line)
        suspects = None if error is None else saved_suspects(error, failed.message)
        with recorder.reading():
            tensors, objects = recorder.snapshot(recorder.named(_in_scope(namespace)))
            done = recorder.complete(
                index,
                code,
                tensors,
                objects,
                drawn=self._drawn(tensors, objects),
                error=failed,
                suspects=suspects,
            )
        del objects, suspects
        self.steps.append(
            Step(
                index=index,
                code=code,
                line=line,
                note=note,
                none=tuple(recorder.nones),
                status="ok" if error is None else "raised",
                error=done.error,
                behaved=error is None,
                failures=()
                if error is None
                else (f"raised {type(error).__name__}: {first_line(error)}",),
                shown=self._shown(tensors),
                tensors=tensors,
                graphs=done.graphs,
                predictions=done.predictions,
                ops=done.ops,
                ops_omitted=done.ops_omitted,
                flow=done.flow,
                sites=done.sites,
                loop=done.loop,
            )
        )

    def skip(self, line: Optional[int], error: Optional[BaseException] = None) -> bool:
        """Count a run of ``line``; True when it is past ``max_iterations`` and only counted."""
        runs = self.runs[line] = self.runs.get(line, 0) + 1
        if line is not None and runs > self.max_iterations and error is None:
            self.skipped[line] = self.skipped.get(line, 0) + 1
            return True
        return False

    def trace(self, device: Optional[str] = None) -> Trace:
        """Everything recorded so far, as a trace."""
        notices = list(self.notices)
        pending = self._skipped_note()
        if pending:
            notices.append(pending[0].upper() + pending[1:])
        more = {
            line: runs - self.max_iterations
            for line, runs in self.runs.items()
            if line is not None and runs > self.max_iterations
        }
        if more:
            listed = ", ".join(
                f"line {line} ran {extra:,} more times" for line, extra in sorted(more.items())
            )
            notices.append(
                f"lines run more than max_iterations={self.max_iterations} times were recorded "
                f"only the first {self.max_iterations} times ({listed}); "
                "pass a larger max_iterations to see more"
            )
        if device is None:
            device = devices_of(self.steps)
        if device is None:
            with unrecorded():  # under a snooped line (a snooped function calling this one)
                device = str(torch.get_default_device())
        return Trace(
            scenario=ScenarioInfo(title=self.title, source=self.source),
            environment=environment(device, safe=False),
            steps=tuple(self.steps),
            storages=self.recorder.storages(),
            notices=tuple(notices),
        )

    # observing -----------------------------------------------------------------------
    def _skipped_runs(self) -> Optional[str]:
        """The runs counted since the last recorded step: "2 runs of lines 5-6"."""
        if not self.skipped:
            return None
        total = sum(self.skipped.values())
        lines = sorted(self.skipped)
        where = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"
        return f"{total:,} {'run' if total == 1 else 'runs'} of {where}"

    def _skipped_note(self) -> Optional[str]:
        runs = self._skipped_runs()
        if runs is None:
            return None
        self.skipped = {}
        return (
            f"before this step, {runs.replace(' run', ' more run', 1)} "
            f"(past max_iterations={self.max_iterations}) ran without being recorded"
        )

    def _shown(self, tensors: Sequence[TensorState]) -> Optional[Tuple[str, ...]]:
        if self.show is None:
            return None
        return tuple(t.name for t in tensors if any(covers(w, t.name) for w in self.show))

    def _drawn(
        self, tensors: Sequence[TensorState], objects: Dict[str, Any]
    ) -> List[Tuple[str, Any]]:
        """(name, grad_fn) of the names asked for, at the steps where they are (re)bound to a
        tensor with a new grad_fn."""
        result: List[Tuple[str, Any]] = []
        if not self.graph:
            return result
        for state in tensors:
            if state.grad_fn is None or not any(covers(w, state.name) for w in self.graph):
                continue
            grad_fn = objects[state.name].grad_fn
            if self.graphed.get(state.name) == id(grad_fn):
                continue
            self.graphed[state.name] = id(grad_fn)
            result.append((state.name, grad_fn))
        return result


def devices_of(steps: Sequence[Step]) -> Optional[str]:
    """The devices the recorded tensors were on, in order of first sight (``cuda:0`` or
    ``cuda:0, cpu``); None when no tensor was recorded.

    The code picks its tensors' devices itself: the default device says nothing of them.
    """
    seen: Dict[str, None] = {}
    for step in steps:
        for state in step.tensors:
            if state.device is not None:
                seen.setdefault(state.device, None)
    if not seen:
        return None
    text = ", ".join(seen)
    return text if len(text) <= 200 else text[:199] + "\u2026"


#: Files whose frames the recording modes add between the user's call and PyTorch.
_MODE_FILES = frozenset(
    {
        ops.__file__,
        opmodes.__file__,
        flow.__file__,
        torch._ops.__file__,
        torch.overrides.__file__,
        torch.utils._python_dispatch.__file__,
    }
)


@contextlib.contextmanager
def placed_warnings() -> Iterator[None]:
    """Warnings attributed to the recording modes' frames are shown at the user's call."""
    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        if filename in _MODE_FILES:
            caller = _caller_of_modes()
            if caller is not None:
                filename, lineno, rest = caller.f_code.co_filename, caller.f_lineno, rest[:1]
        previous(message, category, filename, lineno, *rest)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = previous


def _caller_of_modes() -> Optional[types.FrameType]:
    """The frame that called into the innermost chain of the recording modes' frames."""
    frame: Optional[types.FrameType] = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename not in (ops.__file__, opmodes.__file__):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename in _MODE_FILES:
        frame = frame.f_back
    return frame


def _in_scope(namespace: Dict[str, Any]) -> Iterator[Tuple[str, Any]]:
    """The user's names in ``namespace``: not private ones, the shell's, modules or classes."""
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in SHELL_NAMES:
            continue
        if isinstance(value, (types.ModuleType, type)):
            continue
        yield name, value


__all__ = ["DEFAULT_MAX_ITERATIONS", "LineRecorder", "SHELL_NAMES", "devices_of"]
