"""Trace the user's own code, line by line, in this process: ``@tensortrace.snoop()``.

A ``LineRecorder`` turns "this line just finished" into a ``Step`` holding the
facts of every tensor the code can see (its locals, and the parameters and
buffers of modules among them, named as scenarios name them:
``model.0.weight``). Its probing is the tracer's own (``probe.probe_tensor``,
``StorageRegistry``, ``graph.walk_graph``), and it only reads: values, grads
and the random number generator are as they would be without it.

Two small backends tell the recorder when a line of the traced code object
starts: ``sys.monitoring`` (Python 3.12+, LINE events for that one code
object, under a free tool id that is released afterwards) and
``sys.settrace`` before that. Everything else is shared. The cell magic of
``jupyter.py`` feeds the same recorder one top-level statement at a time.

Unlike a scenario, this is the user's own code in the user's own process:
no fork, no safe mode, nothing captured or changed (stdout and warnings go
where they always go). An exception leaving the traced code is recorded as
the error of the line it came from, the trace is still written, and the
exception goes on unchanged.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import platform
import shutil
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from .version import __version__
from .errors import TensorTraceError, UsageError
from .trace import (
    Environment,
    ErrorInfo,
    Graph,
    ScenarioInfo,
    Step,
    StorageInfo,
    TensorState,
    Trace,
)
from .trace.names import covers
from .record.probe import StorageRegistry, plain_reads, probe_named
from .record.reuse import SnapshotCache
from .record.tracer import MAX_MESSAGE, MAX_NAMES, _expand, _exception_text, bounded

DEFAULT_MAX_ITERATIONS = 10  # times one line is recorded before its later runs are only counted
# Names a notebook's namespace holds for the shell itself, never the user's tensors.
_SHELL_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})


class LineRecorder:
    """Records steps of one traced piece of code, and makes them a ``Trace``."""

    def __init__(
        self,
        title: str,
        source: Optional[str],
        *,
        show: Optional[Sequence[str]] = None,
        graph: Optional[Sequence[str]] = None,
        values: bool = True,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        self.title = title
        self.source = source
        self.show = tuple(show) if show is not None else None
        self.graph = tuple(graph or ())
        self.values = values
        self.max_iterations = max_iterations
        self.registry = StorageRegistry()
        # Per run, as the tracer's: a tensor's record is kept while it is provably
        # unchanged (same object, version, layout and bytes), not read again each line.
        self.memo = SnapshotCache()
        self.steps: List[Step] = []
        self.runs: Dict[int, int] = {}  # line -> times it ran
        self.skipped: Dict[int, int] = {}  # line -> runs not recorded since the last recorded step
        self.notices: List[str] = []
        self.graphed: Dict[str, int] = {}  # name -> id of the tensor whose graph was drawn last

    # what the backends and the cell magic call ---------------------------------
    def record(
        self,
        code: str,
        line: Optional[int],
        namespace: Dict[str, Any],
        error: Optional[BaseException] = None,
        *,
        counted: bool = False,
    ) -> None:
        """The statement ``code`` at ``line`` just ran (or raised ``error``); ``namespace`` is what it sees.

        ``counted``: the caller has already counted this run with ``skip``.
        """
        if not counted and self.skip(line, error):
            return
        note = self._skipped_note()
        with plain_reads():
            tensors, objects = self._snapshot(namespace)
            graphs = self._graphs(tensors, objects)
        del objects
        shown = (
            None
            if self.show is None
            else tuple(t.name for t in tensors if any(covers(w, t.name) for w in self.show))
        )
        self.steps.append(
            Step(
                index=len(self.steps) + 1,
                code=code,
                line=line,
                note=note,
                status="ok" if error is None else "raised",
                error=None if error is None else error_info(error, line),
                behaved=error is None,
                failures=()
                if error is None
                else (f"raised {type(error).__name__}: {_first_line(error)}",),
                shown=shown,
                tensors=tensors,
                graphs=graphs,
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
                f"lines run more than max_iterations={self.max_iterations} times were recorded only the first "
                f"{self.max_iterations} times ({listed}); pass a larger max_iterations to see more"
            )
        return Trace(
            scenario=ScenarioInfo(title=self.title, source=self.source),
            environment=Environment(
                tensortrace=__version__,
                torch=torch.__version__,
                python=platform.python_version(),
                device=device or str(torch.get_default_device()),
                safe=False,
                confinement=None,
            ),
            steps=tuple(self.steps),
            storages=tuple(
                StorageInfo(
                    label=a.label, nbytes=a.nbytes, device=a.device, ptr=a.ptr, names=tuple(a.names)
                )
                for a in self.registry.allocations
            ),
            notices=tuple(notices),
        )

    # observing -------------------------------------------------------------------
    def _skipped_note(self) -> Optional[str]:
        if not self.skipped:
            return None
        total = sum(self.skipped.values())
        lines = sorted(self.skipped)
        where = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"
        self.skipped = {}
        return (
            f"before this step, {total:,} more runs of {where} (past max_iterations={self.max_iterations}) "
            "ran without being recorded"
        )

    def _snapshot(
        self, namespace: Dict[str, Any]
    ) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
        found: List[Tuple[str, Any, str]] = []
        notes: List[str] = []
        for name, value in list(namespace.items()):
            if (
                name.startswith("_")
                or name in _SHELL_NAMES
                or isinstance(value, (types.ModuleType, type))
            ):
                continue
            _expand(name, value, found, depth=0, notes=notes)
            if len(found) >= MAX_NAMES:
                notes.append(
                    f"more than {MAX_NAMES} tensors are in scope; only the first {MAX_NAMES} are recorded"
                )
                break
        for note in notes:
            if note not in self.notices:
                self.notices.append(note)
        named = found[:MAX_NAMES]
        return probe_named(named, self.registry, values=self.values, memo=self.memo)

    def _graphs(self, tensors: Sequence[TensorState], objects: Dict[str, Any]) -> Tuple[Graph, ...]:
        """Graphs of the names asked for, at the steps where they are (re)bound to a tensor with a grad_fn."""
        if not self.graph:
            return ()
        from .record.graph import walk_graph

        names_by_id: Dict[int, str] = {}
        for name, obj in objects.items():
            names_by_id.setdefault(id(obj), name)
        result = []
        for state in tensors:
            if state.grad_fn is None or not any(covers(w, state.name) for w in self.graph):
                continue
            obj = objects[state.name]
            if self.graphed.get(state.name) == id(obj.grad_fn):
                continue
            self.graphed[state.name] = id(obj.grad_fn)
            result.append(walk_graph(state.name, obj.grad_fn, names_by_id))
        return tuple(result)


def error_info(exc: BaseException, line: Optional[int]) -> ErrorInfo:
    """The record of an exception the user's code raised at ``line``."""
    from .record.explain import explain

    cls = type(exc)
    message = bounded(_exception_text(exc), MAX_MESSAGE)
    return ErrorInfo(
        type=cls.__name__,
        qualname=f"{cls.__module__}.{cls.__qualname__}",
        message=message,
        line=line,
        explanation=explain(cls.__name__, message),
    )


def _first_line(exc: BaseException) -> str:
    text = _exception_text(exc).strip()
    return text.splitlines()[0] if text else ""


# --- statements of a code object ---------------------------------------------------


class Statements:
    """Which lines of a file start a statement, and that statement's text.

    A statement spread over several lines is one step, shown whole; a
    compound statement (``for``, ``if``, ``with``) is shown by its header.
    Without source, every line is its own statement.
    """

    def __init__(self, filename: str, first: int, last: int) -> None:
        self.filename = filename
        self.text: Dict[int, str] = {}
        lines = linecache.getlines(filename)
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt) and first <= node.lineno <= last:
                end = node.end_lineno or node.lineno
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    end = max(node.lineno, body[0].lineno - 1)
                self.text[node.lineno] = "\n".join(_dedent(lines[node.lineno - 1 : end])).rstrip()

    def starts(self, line: int) -> bool:
        return not self.text or line in self.text

    def code(self, line: int) -> str:
        return self.text.get(line) or linecache.getline(self.filename, line).strip()


def _dedent(lines: Sequence[str]) -> List[str]:
    import textwrap

    return textwrap.dedent("".join(lines)).splitlines()


# --- the backends -----------------------------------------------------------------


class _Session:
    """One traced run of one frame: the pending line, and the recorder it feeds."""

    def __init__(self, recorder: LineRecorder, statements: Statements) -> None:
        self.recorder = recorder
        self.statements = statements
        self.frame: Optional[types.FrameType] = None
        self.pending: Optional[int] = None
        self.continued = False  # the pending statement has gone on to its next lines

    def line(self, frame: types.FrameType, lineno: int) -> None:
        """``lineno`` of ``frame`` is about to run: the pending statement is done."""
        if not self.statements.starts(lineno):
            self.continued = True  # the next line of a statement spread over several lines
            return
        if lineno == self.pending and self.continued:
            return  # back on the first line of the same statement (Python reports the call there)
        self.finish(frame)
        self.pending, self.continued = lineno, False

    def finish(
        self, frame: Optional[types.FrameType], error: Optional[BaseException] = None
    ) -> None:
        if self.pending is not None and frame is not None:
            line, self.pending = self.pending, None
            if not self.recorder.skip(
                line, error
            ):  # past max_iterations: counted, the locals not even read
                self.recorder.record(
                    self.statements.code(line), line, in_reach(frame), error, counted=True
                )


def in_reach(frame: types.FrameType) -> Dict[str, Any]:
    """What the frame's code can see: its locals, then the module-level tensors and modules its code names."""
    names = dict(frame.f_locals)
    if frame.f_locals is not frame.f_globals:  # a function's frame, not a module's
        for name in frame.f_code.co_names:
            value = frame.f_globals.get(name)
            if name not in names and isinstance(value, (torch.Tensor, torch.nn.Module)):
                names[name] = value
    return names


class _SettraceBackend:
    """Python before 3.12: a trace function on the one traced frame."""

    def __init__(self, session: _Session, code: types.CodeType) -> None:
        self.session, self.code = session, code
        self.previous: Any = None

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame is self.session.frame:
            self.session.line(frame, frame.f_lineno)
        return self._local

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is self.code and self.session.frame is None:
            self.session.frame = frame
            return self._local
        return None

    def start(self, frame: Optional[types.FrameType] = None) -> None:
        self.previous = sys.gettrace()
        if frame is not None:  # a running frame (the with block): trace it from its next line
            self.session.frame = frame
            frame.f_trace = self._local
        sys.settrace(self._global)

    def stop(self) -> None:
        sys.settrace(self.previous)
        if self.session.frame is not None:
            self.session.frame.f_trace = None


class _MonitoringBackend:
    """Python 3.12+: LINE events of the one traced code object, under a free tool id."""

    def __init__(self, session: _Session, code: types.CodeType) -> None:
        self.session, self.code = session, code
        self.tool: Optional[int] = None

    def _line(self, code: types.CodeType, lineno: int) -> Any:
        frame = sys._getframe(1)
        if self.session.frame is None:
            self.session.frame = frame
        if frame is self.session.frame:
            self.session.line(frame, lineno)
        return None

    def start(self, frame: Optional[types.FrameType] = None) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        free = [i for i in (3, 4, 0, 1, 2, 5) if mon.get_tool(i) is None]
        if not free:
            raise UsageError(
                "snoop() needs a sys.monitoring tool id, and all six are taken by other tools (debuggers, coverage)"
            )
        self.tool = free[0]
        mon.use_tool_id(self.tool, "tensortrace")
        self.session.frame = frame
        mon.register_callback(self.tool, mon.events.LINE, self._line)
        mon.set_local_events(self.tool, self.code, mon.events.LINE)

    def stop(self) -> None:
        if self.tool is None:
            return
        mon = sys.monitoring  # type: ignore[attr-defined]
        mon.set_local_events(self.tool, self.code, 0)
        mon.register_callback(self.tool, mon.events.LINE, None)
        mon.free_tool_id(self.tool)
        self.tool = None


def backend_for(session: _Session, code: types.CodeType, *, monitoring: Optional[bool] = None):
    """``sys.monitoring`` where Python has it, ``sys.settrace`` before."""
    if monitoring is None:
        monitoring = hasattr(sys, "monitoring")
    return (_MonitoringBackend if monitoring else _SettraceBackend)(session, code)


# --- the public decorator and context manager --------------------------------------


class snoop:
    """Trace a function (as a decorator) or a block (as a context manager), line by line.

    ``output``: a file to write the trace to (atomically; its format from the
    suffix, as ``tensortrace run -o`` does, or ``fmt``); by default the trace
    goes to stderr in the console format. ``show``: names to show (``model``
    shows ``model.weight`` and ``model.bias``). ``graph``: names whose autograd
    graph is drawn when they are bound. ``max_iterations``: how many times one
    line is recorded; later runs are counted, not recorded. The last trace is
    kept as ``.trace``.
    """

    def __init__(
        self,
        output: Optional[str] = None,
        *,
        fmt: Optional[str] = None,
        show: Optional[Iterable[str]] = None,
        graph: Optional[Iterable[str]] = None,
        values: bool = True,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        width: Optional[int] = None,
    ) -> None:
        from .output import format_for
        from .render import FORMATS

        if isinstance(show, str) or isinstance(graph, str):
            raise UsageError("show= and graph= take a list of names, e.g. show=['model', 'loss']")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise UsageError(
                f"max_iterations={max_iterations!r} must be a whole number of at least 1"
            )
        if callable(output):
            raise UsageError(
                "write @tensortrace.snoop(), with parentheses: snoop takes options, then the function"
            )
        self.output = None if output is None else _writable(os.fspath(output))
        if fmt is not None and fmt.lower() not in FORMATS:
            raise UsageError(f"fmt={fmt!r} is not one of {', '.join(FORMATS)}")
        self.fmt = format_for(fmt.lower() if fmt else None, self.output)
        self.show = tuple(show) if show is not None else None
        self.graph = tuple(graph or ())
        self.values = values
        self.max_iterations = max_iterations
        self.width = width
        self.trace: Optional[Trace] = None
        self._active: List[Tuple[_Session, Any, Optional[int]]] = []

    def _recorder(self, title: str, source: Optional[str]) -> LineRecorder:
        return LineRecorder(
            title,
            source,
            show=self.show,
            graph=self.graph,
            values=self.values,
            max_iterations=self.max_iterations,
        )

    # decorator ----------------------------------------------------------------
    def __call__(self, func: Callable) -> Callable:
        if (
            inspect.isgeneratorfunction(func)
            or inspect.iscoroutinefunction(func)
            or inspect.isasyncgenfunction(func)
        ):
            raise UsageError(
                f"snoop() traces plain functions; {func.__qualname__} is a generator or async function"
            )
        code = getattr(inspect.unwrap(func), "__code__", None)
        if code is None:
            raise UsageError(
                f"snoop() traces Python functions; {func!r} has no Python code to trace"
            )
        last = max(
            (line for _, _, line in code.co_lines() if line is not None),
            default=code.co_firstlineno,
        )

        statements: List[Statements] = []  # read from the source at the first call, once

        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if not statements:
                statements.append(Statements(code.co_filename, code.co_firstlineno + 1, last))
            session = _Session(
                self._recorder(func.__qualname__, f"{code.co_filename}:{code.co_firstlineno}"),
                statements[0],
            )
            backend = backend_for(session, code)
            backend.start()
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                backend.stop()
                session.finish(session.frame, exc)
                session.frame = None
                self._emit(session.recorder, failing=True)
                raise
            backend.stop()
            session.finish(session.frame)
            session.frame = None
            self._emit(session.recorder)
            return result

        return traced

    # context manager ----------------------------------------------------------
    def __enter__(self) -> "snoop":
        frame = sys._getframe(1)
        code = frame.f_code
        where = frame.f_lineno
        title = (
            f"{code.co_name} (line {where})"
            if code.co_name != "<module>"
            else f"{os.path.basename(code.co_filename)}, line {where}"
        )
        session = _Session(
            self._recorder(title, f"{code.co_filename}:{where}"),
            Statements(code.co_filename, where + 1, 1 << 30),
        )
        backend = backend_for(session, code)
        backend.start(frame)
        self._active.append((session, backend, where))
        return self

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        session, backend, where = self._active.pop()
        backend.stop()
        if session.pending == where:  # Python reports the with line again as the block closes
            session.pending = None
        session.finish(session.frame, exc)
        session.frame = None
        self._emit(session.recorder, failing=exc is not None)
        return False  # an exception goes on unchanged

    # writing ------------------------------------------------------------------
    def _emit(self, recorder: LineRecorder, failing: bool = False) -> None:
        """Write the trace; while the user's exception is on its way, a failure to write only warns."""
        from .api import speak_python

        self.trace = recorder.trace()
        try:
            write_trace([self.trace], self.output, self.fmt, width=self.width)
        except TensorTraceError as exc:
            if not failing:
                raise speak_python(exc) from None
            warnings.warn(
                f"tensortrace: the trace could not be written: {speak_python(exc)}",
                RuntimeWarning,
                stacklevel=3,
            )
        except OSError as exc:
            error = UsageError(f"cannot write {self.output}: {exc.strerror or exc}")
            if not failing:
                raise error from None
            warnings.warn(f"tensortrace: {error}", RuntimeWarning, stacklevel=3)


def _writable(path: str) -> str:
    """``path``, once it is sure a file can be made there; else a ``UsageError`` that says why."""
    where = Path(path)
    if where.is_dir():
        raise UsageError(f"output={path!r} is a directory; give a file name")
    if not where.parent.is_dir():
        raise UsageError(f"output={path!r}: the folder {str(where.parent)!r} does not exist")
    return path


def write_trace(
    traces: List[Trace], path: Optional[str], fmt: str, *, width: Optional[int] = None
) -> None:
    """Render to ``path`` (atomically), or to stderr when there is none."""
    from .output import Output
    from .render import RenderOptions, render

    if path is None:
        stream = sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        if width is None and tty:
            width = shutil.get_terminal_size().columns
        color = tty and not os.environ.get("NO_COLOR") and fmt == "console"
        stream.write(render(traces, fmt, RenderOptions(width=width, color=color)))
        stream.flush()
        return
    out = Output(path)
    try:
        out.write(render(traces, fmt, RenderOptions(width=width)))
        out.commit()
    except BaseException:
        out.discard()
        raise


__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "LineRecorder",
    "Statements",
    "backend_for",
    "error_info",
    "snoop",
    "write_trace",
]
