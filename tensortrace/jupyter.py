"""Jupyter: ``%load_ext tensortrace`` adds ``%%tensortrace`` and ``%tensortrace``.

``%%tensortrace [--show a,b] [--graph loss] [--ops LEVEL] [--no-values]
[--max-iterations N]`` runs the cell in the notebook's own namespace, one
top-level statement at a time (a loop is one statement, shown whole), and
records the facts after each with the recorder ``snoop()`` and scenarios use
(``record.lines.LineRecorder`` over ``record.steps.StepRecorder``): tensors,
the calls and ATen operations each statement ran, the gradient flow of a
``backward()``, graphs, saved tensors and the backwards that will fail. The
cell's names end up bound exactly as a plain run binds them, its output and
its last expression's value appear as usual, and the trace is shown inline. An
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
    p.add_argument("--ops", default="calls", help="none, calls or aten, as tensortrace run --ops")
    return p


def _line_parser() -> _Parser:
    p = _Parser(prog="%tensortrace", add_help=False)
    p.add_argument("target")
    p.add_argument("--trust", action="store_true")
    p.add_argument("--device", default=None)
    p.add_argument("--variant", default=None)
    p.add_argument("--ops", default="calls")
    return p


def _names(text: Optional[str]) -> Optional[List[str]]:
    if text is None:
        return None
    return [n.strip() for n in text.split(",") if n.strip()]


def show_traces(traces: Sequence[Any], *, ops: str = "calls") -> None:
    """Display traces inline: HTML for the notebook, the plain console rendering for text
    front ends; ``ops`` is the level of operations shown, as ``tensortrace run --ops``."""
    from IPython.display import display

    from .render import RenderOptions, render
    from .render.export import render_html_fragment
    from .render.notebook import NOTEBOOK_WIDTH

    traces = list(traces)
    options = RenderOptions(width=NOTEBOOK_WIDTH, ops=ops)
    bundle = {
        "text/html": render_html_fragment(traces, options),
        "text/plain": render(traces, "console", options),
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
    from .record.lines import DEFAULT_MAX_ITERATIONS, LineRecorder
    from .record.steps import OPS_LEVELS

    try:
        opts = _cell_parser().parse_args(shlex.split(line))
        if opts.max_iterations is not None and opts.max_iterations < 1:
            raise UsageError("%%tensortrace: --max-iterations must be at least 1")
        if opts.ops not in OPS_LEVELS:
            raise UsageError(
                f"%%tensortrace: --ops {opts.ops!r} is not one of {', '.join(OPS_LEVELS)}"
            )
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
        code=source,
        ops=opts.ops != "none",
        show=_names(opts.show),
        graph=_names(opts.graph),
        values=not opts.no_values,
        max_iterations=opts.max_iterations or DEFAULT_MAX_ITERATIONS,
        user_file=filename,
    )
    error: Optional[BaseException] = None
    for i, stmt in enumerate(tree.body):
        shown = i == len(tree.body) - 1 and isinstance(stmt, ast.Expr)
        if shown:  # its value is shown, as in a plain cell, once it is computed
            expr = ast.Expression(body=stmt.value)  # type: ignore[attr-defined]
            code = shell.compile(expr, filename, "eval")
        else:
            code = shell.compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec")
        text = ast.get_source_segment(source, stmt) or ""
        try:
            with recorder.running():
                value = eval(code, shell.user_global_ns, shell.user_ns)
            if shown:  # outside the recording: drawing the value is not what the line ran
                sys.displayhook(value)
        except BaseException as exc:
            recorder.record(text, stmt.lineno, shell.user_ns, exc)
            error = exc
            break
        recorder.record(text, stmt.lineno, shell.user_ns)
    show_traces([recorder.trace()], ops=opts.ops)
    if error is not None:
        raise error


def run_line(shell: Any, line: str) -> None:
    """``%tensortrace TARGET``: trace a scenario in a confined child, as ``tensortrace run``."""
    try:
        opts = _line_parser().parse_args(shlex.split(line))
        traces = scenario_traces(opts.target, opts.variant, opts.trust, opts.device, opts.ops)
    except TensorTraceError as exc:
        _say(exc)  # worded for a command line, which is what a line magic is
        return
    show_traces(traces, ops=opts.ops)


def scenario_traces(
    target: str, variant: Optional[str], trust: bool, device: Optional[str], ops: str
) -> List[Any]:
    """The traces ``tensortrace run TARGET`` makes, with the run's default limits; errors
    worded for a command line (``--trust``, ``--device``), which is what a line magic is."""
    from .record.steps import OPS_LEVELS
    from .run.runner import Limits, run_all
    from .scenario import load_scenario
    from .scenario.devices import DEVICE_CHOICES, is_device_name
    from .scenario.library import resolve_target

    if device is not None and not is_device_name(device):
        raise UsageError(f"--device {device!r} is not one of {DEVICE_CHOICES}")
    if ops not in OPS_LEVELS:
        raise UsageError(f"--ops {ops!r} is not one of {', '.join(OPS_LEVELS)}")
    scenario = load_scenario(resolve_target(target))
    if variant is None:
        scenarios = scenario.resolved()
    elif variant in scenario.variant_names:
        scenarios = [scenario.for_variant(variant)]
    elif not scenario.variants and variant == scenario.variant:
        scenarios = [scenario]  # already the variant asked for
    else:
        known = ", ".join(scenario.variant_names) or "none"
        raise UsageError(
            f"--variant {variant!r} is not a variant of {scenario.title!r} (its variants: {known})"
        )
    return run_all(scenarios, safe=not trust, device=device, limits=Limits(), ops=ops != "none")


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


__all__ = ["load_ipython_extension", "run_cell", "run_line", "scenario_traces", "show_traces"]
