"""Jupyter: ``%load_ext tensortrace`` adds ``%%tensortrace`` and ``%tensortrace``.

``%%tensortrace [--show a,b] [--graph loss] [--max-iterations N]`` runs the
cell in the notebook's own namespace, one top-level statement at a time (a loop
is one statement, shown whole), and records the facts after each (the recorder of ``snooper.py``): the cell's
names end up bound exactly as a plain run binds them, its output and its
last expression's value appear as usual, and the trace is shown inline. An
exception in the cell is recorded, the trace is shown, and the exception
then reaches the notebook as it would have.

``%tensortrace TARGET [--trust] [--device D] [--variant V]`` traces a scenario
file or a bundled scenario the way ``tensortrace run`` does: in a forked
child, confined in safe mode.

IPython is needed only here, and imported only when the extension loads.
"""

from __future__ import annotations

import argparse
import ast
import shlex
import sys
from typing import Any, List, Optional, Sequence

from .errors import TensorTraceError, UsageError


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting the kernel."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%tensortrace", add_help=False)
    p.add_argument("--show", default=None, help="names to show, separated by commas")
    p.add_argument(
        "--graph", default=None, help="names whose autograd graph is drawn, separated by commas"
    )
    p.add_argument("--max-iterations", type=int, default=None)
    p.add_argument("--no-values", action="store_true")
    return p


def _line_parser() -> _Parser:
    p = _Parser(prog="%tensortrace", add_help=False)
    p.add_argument("target")
    p.add_argument("--trust", action="store_true")
    p.add_argument("--device", default=None)
    p.add_argument("--variant", default=None)
    return p


def _names(text: Optional[str]) -> Optional[List[str]]:
    if text is None:
        return None
    return [n.strip() for n in text.split(",") if n.strip()]


def show_traces(traces: Sequence[Any]) -> None:
    """Display traces inline: HTML for the notebook, the plain console rendering for text front ends."""
    from IPython.display import display

    from .render.notebook import NOTEBOOK_WIDTH, html, render_traces

    traces = list(traces)
    bundle = {
        "text/html": html(traces),
        "text/plain": render_traces(traces, "console", width=NOTEBOOK_WIDTH),
    }
    display(bundle, raw=True)


def _say(exc: TensorTraceError) -> None:
    print(f"tensortrace: {exc}", file=sys.stderr)


def _this_cell(shell: Any) -> int:
    """The number of the cell now running: IPython counts it before running it, so its
    ``execution_count`` is already the next cell's (one higher) while the cell runs."""
    count = int(getattr(shell, "execution_count", 1) or 1)
    return count - 1 if count > 1 else count


def run_cell(shell: Any, line: str, cell: str) -> None:
    """``%%tensortrace``: run the cell statement by statement, record each, show the trace."""
    from .snooper import DEFAULT_MAX_ITERATIONS, LineRecorder

    try:
        opts = _cell_parser().parse_args(shlex.split(line))
        if opts.max_iterations is not None and opts.max_iterations < 1:
            raise UsageError("%%tensortrace: --max-iterations must be at least 1")
    except TensorTraceError as exc:
        _say(exc)
        return
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        shell.showsyntaxerror(filename=filename)
        return
    recorder = LineRecorder(
        f"cell [{_this_cell(shell)}]",
        None,
        show=_names(opts.show),
        graph=_names(opts.graph),
        values=not opts.no_values,
        max_iterations=opts.max_iterations or DEFAULT_MAX_ITERATIONS,
    )
    error: Optional[BaseException] = None
    for i, stmt in enumerate(tree.body):
        last = i == len(tree.body) - 1
        if last and isinstance(stmt, ast.Expr):  # its value is shown, as in a plain cell
            code = shell.compile(ast.Interactive(body=[stmt]), filename, "single")
        else:
            code = shell.compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec")
        text = ast.get_source_segment(source, stmt) or ""
        try:
            exec(code, shell.user_global_ns, shell.user_ns)
        except BaseException as exc:
            recorder.record(text, stmt.lineno, shell.user_ns, exc)
            error = exc
            break
        recorder.record(text, stmt.lineno, shell.user_ns)
    show_traces([recorder.trace()])
    if error is not None:
        raise error


def run_line(shell: Any, line: str) -> None:
    """``%tensortrace TARGET``: trace a scenario in a confined child, as ``tensortrace run`` does."""
    from . import api

    try:
        opts = _line_parser().parse_args(shlex.split(line))
        result = api._trace(
            opts.target,
            opts.variant,
            safe=not opts.trust,
            device=opts.device,
            timeout=None,
            memory_limit=None,
            isolate=True,
        )
    except TensorTraceError as exc:
        _say(exc)  # worded for a command line, which is what a line magic is
        return
    show_traces(list(result) if isinstance(result, api.Traces) else [result])


def load_ipython_extension(ipython: Any) -> None:
    """Register both magics on ``ipython`` (what ``%load_ext tensortrace`` calls)."""

    def tensortrace_cell(line: str, cell: str) -> None:
        return run_cell(ipython, line, cell)

    def tensortrace_line(line: str) -> None:
        return run_line(ipython, line)

    tensortrace_cell.__doc__ = run_cell.__doc__
    tensortrace_line.__doc__ = run_line.__doc__
    ipython.register_magic_function(tensortrace_cell, magic_kind="cell", magic_name="tensortrace")
    ipython.register_magic_function(tensortrace_line, magic_kind="line", magic_name="tensortrace")


__all__ = ["load_ipython_extension", "run_cell", "run_line", "show_traces"]
