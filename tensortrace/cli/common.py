"""What the command line's commands share: options turned into render options, loading and
running scenarios, the one way a library error becomes an exit status, and output files.

The annotations here are objects, not strings (no ``from __future__ import annotations``):
typer reads every command's signature at every start.
"""

import os
import shutil
import sys
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, List, Optional, Sequence

import typer

from ..scenario.devices import DEVICE_CHOICES, is_device_name
from .options import (  # one definition for every command
    wants_color,
)
from ..errors import Interrupted, TensorTraceError, UsageError
from ..trace import Trace
from ..output import Output
from ..render import FORMATS, RenderOptions
from ..render.options import MIN_WIDTH
from ..render.visible import visible
from .selection import names_of, parse_steps

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE, EXIT_INTERRUPTED = 0, 1, 2, 130
OPS_LEVELS = ("none", "calls", "all", "aten")
VALUES_CHOICES = ("summary", "full")
ITERATIONS_CHOICES = ("first", "all")

OUTPUT_FORMATS = FORMATS  # one list of formats, for run and render alike
# Width of the list table when it is not shown on a terminal.
LIST_WIDTH = 120


# --- shared option handling ----------------------------------------------------------


def render_options(
    form: str,
    out: Output,
    *,
    step: Optional[int],
    steps: Optional[str],
    changes_only: bool,
    all_rows: bool,
    show: Optional[str],
    no_values: bool,
    values: str,
    iterations: str,
    width: Optional[int],
    ops: str,
    color: str,
) -> RenderOptions:
    """The view flags that ``run`` and ``render`` share, checked, as the renderers take them."""
    if width is not None and width < MIN_WIDTH:
        raise UsageError(
            f"--width {width} is too narrow: the console needs at least {MIN_WIDTH} columns"
        )
    if values not in VALUES_CHOICES:
        raise UsageError(f"--values {values!r} is not one of {', '.join(VALUES_CHOICES)}")
    if iterations not in ITERATIONS_CHOICES:
        raise UsageError(
            f"--iterations {iterations!r} is not one of {', '.join(ITERATIONS_CHOICES)}"
        )
    return RenderOptions(
        steps=parse_steps(step, steps),
        changes_only=changes_only,
        all_rows=all_rows,
        ops=ops,
        show=names_of(show, "--show") or None,
        values=not no_values,
        width=width if width is not None or form != "console" else terminal_width(),
        color=_use_color(out, color),
        full_values=values == "full",
        iterations=iterations,
    )


def noting_show(traces: List[Trace], show: Optional[str]) -> List[Trace]:
    """The traces, each with a notice for every --show name it never bound."""
    from ..render.facts import with_show_notices

    names = names_of(show)
    return [with_show_notices(t, names) for t in traces] if names else traces


def terminal_width() -> Optional[int]:
    """The terminal's width when stdout is one; None lets the renderer use its default."""
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def _use_color(out: Output, color: str = "auto") -> bool:
    return wants_color(color, out.is_terminal)


def _fail(exc: TensorTraceError) -> None:
    # Messages quote scenario files and arguments: shown with control characters visible.
    typer.echo(visible(f"tensortrace: {exc}"), err=True)
    raise typer.Exit(EXIT_UNUSABLE)


def check_ops(ops: str) -> None:
    if ops not in OPS_LEVELS:
        raise UsageError(f"--ops {ops!r} is not one of {', '.join(OPS_LEVELS)}")


def check_device(device: Optional[str]) -> None:
    if device is not None and not is_device_name(device):
        raise UsageError(f"--device {device!r} is not one of {DEVICE_CHOICES}")


def load_all(targets: Sequence[str], script_args: Optional[Sequence[str]] = None) -> list:
    """The scenarios ``targets`` name; ``script_args`` (what followed ``--``) go to the one
    Python file as its ``sys.argv[1:]``."""
    import dataclasses

    from ..scenario.library import resolve_target
    from ..scenario import load_scenario

    scenarios = [load_scenario(resolve_target(t)) for t in targets]
    if script_args is None:
        return scenarios
    if len(scenarios) != 1 or not scenarios[0].script:
        raise UsageError(
            "the arguments after -- are a Python file's own (its sys.argv[1:]): give exactly one "
            ".py file before them, e.g. tensortrace run --trust train.py -- --epochs 3"
        )
    return [dataclasses.replace(scenarios[0], argv=tuple(script_args))]


def run_all(
    scenarios,
    *,
    trust: bool,
    device: Optional[str],
    timeout: float,
    memory_limit: int,
    scenario_timeout: float = 300.0,
    require_confinement: bool = False,
    ops: str = "calls",
    on_start=None,
    on_step=None,
    progress=None,
) -> List[Trace]:
    from ..run import runner
    from ..run.runner import Limits, run_all

    # this process runs no tensor operation: children keep PyTorch's threads (for this call
    # only: a program that calls the command line in its own process may use them after)
    unused_before = runner.threads_unused_before_fork
    runner.threads_unused_before_fork = True
    limits = Limits(
        timeout=timeout if timeout > 0 else None,
        memory_mb=memory_limit if memory_limit > 0 else None,
        scenario_timeout=scenario_timeout if scenario_timeout > 0 else None,
    )
    try:
        # the progress display is gone before anything else is said
        with progress if progress is not None else nullcontext():
            traces = run_all(
                scenarios,
                safe=not trust,
                device=device,
                limits=limits,
                on_start=on_start,
                on_step=on_step,
                require_confinement=require_confinement,
                ops=ops != "none",
            )
    except Interrupted as stop:
        _say_if_unconfined(stop.traces)
        raise
    finally:
        runner.threads_unused_before_fork = unused_before
    _say_if_unconfined(traces)
    return traces


_said_unconfined = False


def _say_if_unconfined(traces: Sequence[Trace]) -> None:
    """Once per command: safe mode ran without the kernel's wall, and what is missing."""
    global _said_unconfined
    for trace in traces:
        confinement = trace.environment.confinement
        if _said_unconfined or confinement is None or confinement.complete:
            continue
        _said_unconfined = True
        typer.echo(
            visible(
                "tensortrace: safe mode is not confined by the kernel here "
                f"({'; '.join(confinement.missing)}); "
                "only the Python-level checks and resource limits apply. "
                "Use --require-confinement to refuse instead."
            ),
            err=True,
        )


def guarded(body: Callable[[], int]) -> None:
    """Run a command body; map library errors, broken pipes and Ctrl-C to exit codes."""
    try:
        code = body()
    except TensorTraceError as exc:
        _fail(exc)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except KeyboardInterrupt:
        typer.echo("tensortrace: interrupted", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    else:
        raise typer.Exit(code)


def _quiet_broken_pipe() -> None:
    """The reader went away (``| head``): stop quietly, as Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    raise typer.Exit(EXIT_OK)


@contextmanager
def output_to(path: Optional[str]) -> Iterator[Output]:
    """Stdout, or a file that appears whole only when the block ends without an error."""
    out = Output(path)
    try:
        yield out
        out.commit()
    finally:
        out.discard()


def progress_on_stderr(scenarios: list, *, streamed_to_terminal: bool):
    """Progress on stderr when it is a terminal.

    Not when a streamed format already shows each step there.
    """
    from .progress import RunProgress, plans_of

    terminal = not streamed_to_terminal and sys.stderr.isatty()
    return RunProgress.on_stderr(plans_of(scenarios) if terminal else [], terminal)
