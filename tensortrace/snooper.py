"""Trace the user's own code, line by line, in this process: ``@tensortrace.snoop()``.

This module decides what a step is and what it can see; the recording is the
scenario tracer's own. Two small backends say when a line of the traced code
object starts: ``sys.monitoring`` (Python 3.12+, LINE events for that one
code object, under a free tool id that is released afterwards) and
``sys.settrace`` before that. ``Statements`` turns lines into statements (a
statement over several lines is one step), and ``in_reach`` says which names
a frame's code can see (its locals, and the module-level tensors and modules
it names). Each finished statement goes to a ``record.lines.LineRecorder``,
which records it with ``record.steps.StepRecorder``, as the tracer records a
scenario's step: every tensor in reach (a module's parameters and buffers
named as scenarios name them: ``model.0.weight``), the calls and ATen
operations the line ran, the gradient flow of a ``backward()``, the graphs
asked for, what autograd saved and which backward will fail. It only reads:
values, grads and the random number generator are as they would be without it.

Unlike a scenario, this is the user's own code in the user's own process:
no fork, no safe mode, nothing captured (stdout and warnings go where they
always go). An exception leaving the traced code is recorded as the error of
the line it came from, the trace is still written, and the exception goes on
unchanged.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import shutil
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from .errors import TensorTraceError, UsageError
from .record.lines import DEFAULT_MAX_ITERATIONS, LineRecorder
from .record.steps import OPS_LEVELS
from .trace import Trace

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
        self.source = "".join(lines[max(first - 1, 0) : last])  # what recordability reads
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


class LineSession:
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
        self.recorder.begin(lineno)

    def finish(
        self, frame: Optional[types.FrameType], error: Optional[BaseException] = None
    ) -> None:
        """The pending statement of ``frame`` is done (or raised ``error``): record it."""
        if self.pending is not None and frame is not None:
            line, self.pending = self.pending, None
            if self.recorder.skip(line, error):  # past max_iterations: counted, locals not read
                return
            code = self.statements.code(line)
            self.recorder.record(code, line, in_reach(frame), error, counted=True)


def in_reach(frame: types.FrameType) -> Dict[str, Any]:
    """What the frame's code can see: its locals, then the module-level tensors and modules
    its code names."""
    names = dict(frame.f_locals)
    if frame.f_locals is not frame.f_globals:  # a function's frame, not a module's
        for name in frame.f_code.co_names:
            value = frame.f_globals.get(name)
            if name not in names and isinstance(value, (torch.Tensor, torch.nn.Module)):
                names[name] = value
    return names


class _SettraceBackend:
    """Python before 3.12: a trace function on the one traced frame."""

    def __init__(self, session: LineSession, code: types.CodeType) -> None:
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

    def __init__(self, session: LineSession, code: types.CodeType) -> None:
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
                "snoop() needs a sys.monitoring tool id, and all six are taken by other tools "
                "(debuggers, coverage)"
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


def backend_for(session: LineSession, code: types.CodeType, *, monitoring: Optional[bool] = None):
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
    graph is drawn when they are bound. ``ops``: what each line ran, as
    ``tensortrace run --ops`` takes it: ``calls`` (the default: the calls the
    line made are shown; the ATen operations under them and the gradient flow
    of a ``backward()`` are recorded too), ``aten`` (shown as well) or ``none``
    (not recorded: the line runs without PyTorch's recording modes).
    ``max_iterations``: how many times one line is recorded; later runs are
    counted, not recorded. ``iterations``: how a loop's passes are shown:
    ``first`` (the first in full, and any that differs in kind; the others
    summed up in one line) or ``all``. ``values=False`` leaves values and grads
    out; ``values="full"`` shows every recorded element where a tensor past a
    few is otherwise one line. The last trace is kept as ``.trace``.
    """

    def __init__(
        self,
        output: Optional[str] = None,
        *,
        fmt: Optional[str] = None,
        show: Optional[Iterable[str]] = None,
        graph: Optional[Iterable[str]] = None,
        values: Union[bool, str] = True,
        ops: str = "calls",
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        width: Optional[int] = None,
        iterations: str = "first",
    ) -> None:
        from .output import format_for
        from .render import FORMATS
        from .render.options import MIN_WIDTH

        if isinstance(show, str) or isinstance(graph, str):
            raise UsageError("show= and graph= take a list of names, e.g. show=['model', 'loss']")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise UsageError(
                f"max_iterations={max_iterations!r} must be a whole number of at least 1"
            )
        if callable(output):
            raise UsageError(
                "write @tensortrace.snoop(), with parentheses: "
                "snoop takes options, then the function"
            )
        if ops not in OPS_LEVELS:
            raise UsageError(f"ops={ops!r} is not one of {', '.join(OPS_LEVELS)}")
        if iterations not in ("first", "all"):
            raise UsageError(f"iterations={iterations!r} is not one of first, all")
        if values not in (True, False, "full"):
            raise UsageError(f"values={values!r} is not one of True, False, 'full'")
        if width is not None and (not isinstance(width, int) or width < MIN_WIDTH):
            raise UsageError(f"width={width!r} is too narrow: give at least {MIN_WIDTH} columns")
        self.output = None if output is None else _writable(os.fspath(output))
        if fmt is not None and fmt.lower() not in FORMATS:
            raise UsageError(f"fmt={fmt!r} is not one of {', '.join(FORMATS)}")
        self.fmt = format_for(fmt.lower() if fmt else None, self.output)
        self.show = tuple(show) if show is not None else None
        self.graph = tuple(graph or ())
        self.values = bool(values)
        self.full = values == "full"
        self.iterations = iterations
        self.ops = ops
        self.max_iterations = max_iterations
        self.width = width
        self.trace: Optional[Trace] = None
        self._active: List[Tuple[LineSession, Any, Optional[int], Any]] = []

    def _session(
        self, title: str, source: str, statements: Statements, code: types.CodeType
    ) -> LineSession:
        recorder = LineRecorder(
            title,
            source,
            code=statements.source,
            show=self.show,
            graph=self.graph,
            values=self.values,
            ops=self.ops != "none",
            max_iterations=self.max_iterations,
            user_file=statements.filename,
            user_code=code,
        )
        return LineSession(recorder, statements)

    @staticmethod
    def _close(session: LineSession, span: Any, error: Optional[BaseException] = None) -> None:
        """Record the last statement, then leave the recording of operations."""
        try:
            session.finish(session.frame, error)
        finally:
            session.frame = None
            span.__exit__(None, None, None)

    # decorator ----------------------------------------------------------------
    def __call__(self, func: Callable) -> Callable:
        if (
            inspect.isgeneratorfunction(func)
            or inspect.iscoroutinefunction(func)
            or inspect.isasyncgenfunction(func)
        ):
            raise UsageError(
                f"snoop() traces plain functions; "
                f"{func.__qualname__} is a generator or async function"
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
            where = f"{code.co_filename}:{code.co_firstlineno}"
            session = self._session(func.__qualname__, where, statements[0], code)
            backend = backend_for(session, code)
            span = session.recorder.span()
            span.__enter__()
            backend.start()
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                backend.stop()
                self._close(session, span, exc)
                self._emit(session.recorder, failing=True)
                raise
            backend.stop()
            self._close(session, span)
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
        statements = Statements(code.co_filename, where + 1, 1 << 30)
        session = self._session(title, f"{code.co_filename}:{where}", statements, code)
        backend = backend_for(session, code)
        span = session.recorder.span()
        span.__enter__()
        try:
            backend.start(frame)
        except BaseException:
            span.__exit__(None, None, None)
            raise
        self._active.append((session, backend, where, span))
        return self

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        session, backend, where, span = self._active.pop()
        backend.stop()
        if session.pending == where:  # Python reports the with line again as the block closes
            session.pending = None
        self._close(session, span, exc)
        self._emit(session.recorder, failing=exc is not None)
        return False  # an exception goes on unchanged

    # writing ------------------------------------------------------------------
    def _emit(self, recorder: LineRecorder, failing: bool = False) -> None:
        """Write the trace; while the user's exception is on its way, a failure to write
        only warns."""
        from .api import speak_python

        self.trace = recorder.trace()
        try:
            write_trace(
                [self.trace],
                self.output,
                self.fmt,
                width=self.width,
                ops=self.ops,
                iterations=self.iterations,
                full=self.full,
            )
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
    traces: List[Trace],
    path: Optional[str],
    fmt: str,
    *,
    width: Optional[int] = None,
    ops: str = "calls",
    iterations: str = "first",
    full: bool = False,
) -> None:
    """Render to ``path`` (atomically), or to stderr when there is none; ``ops`` is the level
    of operations a console or markdown rendering shows, as ``tensortrace run --ops``, and
    ``iterations`` and ``full`` are ``--iterations`` and ``--values full``."""
    from .output import Output
    from .render import RenderOptions, render

    if path is None:
        stream = sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        if width is None and tty:
            width = shutil.get_terminal_size().columns
        color = tty and not os.environ.get("NO_COLOR") and fmt == "console"
        options = RenderOptions(
            width=width, color=color, ops=ops, iterations=iterations, full_values=full
        )
        stream.write(render(traces, fmt, options))
        stream.flush()
        return
    out = Output(path)
    try:
        options = RenderOptions(width=width, ops=ops, iterations=iterations, full_values=full)
        out.write(render(traces, fmt, options))
        out.commit()
    except BaseException:
        out.discard()
        raise


__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "LineRecorder",
    "Statements",
    "LineSession",
    "backend_for",
    "in_reach",
    "snoop",
    "write_trace",
]
