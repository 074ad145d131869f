"""The command line: parse, call the library, write, choose the exit status.

Nothing here knows how tracing or rendering works. Library errors
(``TensorTraceError``) are printed as one line on stderr with exit status 2;
a scenario that did not behave as declared exits 1; Ctrl-C exits 130 after
printing what was traced so far.

The annotations here are objects, not strings (no ``from __future__ import
annotations``): typer reads every command's signature at every start, and
string annotations would be compiled and evaluated anew each time.
"""

import json
import os
import shutil
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import typer

from . import __version__
from .devices import DEVICE_CHOICES, is_device_name
from .cli_options import (  # one definition for every command
    ALL_ROWS, CHANGES, CHECK_TARGETS, COLOR, DEVICE, FORMAT, GRAPH, MEMORY, NO_VALUES, OPS,
    OUTPUT, REQUIRE, SCENARIO_TIMEOUT, SHOW, STEP, STEPS, TARGETS, TIMEOUT, TRUST, WIDTH,
    wants_color,
)
from .errors import Interrupted, TensorTraceError, UsageError
from .model import Trace
from .model import evolve as replace  # RenderOptions is a frozen record
from .output import Output, format_for
from .render import FORMATS, RenderOptions, StreamRenderer, check_format, render, stream
from .tracefile import is_saved_trace, load_traces
from .render.text import visible
from .selection import check_steps_exist, names_of, parse_steps

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE, EXIT_INTERRUPTED = 0, 1, 2, 130
OPS_LEVELS = ("none", "calls", "aten")

OUTPUT_FORMATS = FORMATS  # one list of formats, for run and render alike
# Width of the list table when it is not shown on a terminal.
LIST_WIDTH = 120

app = typer.Typer(
    name="tensortrace",
    help="See what PyTorch does to your tensors: run a scenario step by step and show storage, versions and autograd.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _Command(typer.core.TyperCommand):
    """A command whose help names each argument by its metavar alone (no ``<list[str]>``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


def version_text() -> str:
    import platform
    from importlib import metadata  # here: importing it costs every command about 20 ms

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"tensortrace {__version__}, torch {torch_version}, Python {platform.python_version()}"


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the versions of tensortrace, torch and Python."),
) -> None:
    """See what PyTorch does to your tensors."""


# --- shared option handling ----------------------------------------------------------


def _render_options(form: str, out: Output, step: Optional[int], steps: Optional[str], changes_only: bool, show: Optional[str], no_values: bool, width: Optional[int],
                    color: str = "auto") -> RenderOptions:
    return RenderOptions(
        steps=parse_steps(step, steps),
        changes_only=changes_only,
        show=names_of(show) or None,
        values=not no_values,
        width=width if width is not None or form != "console" else _terminal_width(),
        color=_use_color(out, color),
    )


def _noting_show(traces: List[Trace], show: Optional[str]) -> List[Trace]:
    """The traces, each with a notice for every --show name it never bound."""
    from .render.facts import with_show_notices

    names = names_of(show)
    return [with_show_notices(t, names) for t in traces] if names else traces


def _terminal_width() -> Optional[int]:
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


def _check_ops(ops: str) -> None:
    if ops not in OPS_LEVELS:
        raise UsageError(f"--ops {ops!r} is not one of {', '.join(OPS_LEVELS)}")


def _check_device(device: Optional[str]) -> None:
    if device is not None and not is_device_name(device):
        raise UsageError(f"--device {device!r} is not one of {DEVICE_CHOICES}")


def _load_all(targets: Sequence[str]) -> list:
    from .library import resolve_target
    from .scenario import load_scenario

    return [load_scenario(resolve_target(t)) for t in targets]


def _run_all(
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
    from . import runner
    from .runner import Limits, run_all

    runner.threads_unused_before_fork = True  # this process runs no tensor operation: children keep PyTorch's threads
    limits = Limits(
        timeout=timeout if timeout > 0 else None,
        memory_mb=memory_limit if memory_limit > 0 else None,
        scenario_timeout=scenario_timeout if scenario_timeout > 0 else None,
    )
    try:
        with progress if progress is not None else nullcontext():  # gone before anything else is said
            traces = run_all(
                scenarios, safe=not trust, device=device, limits=limits, on_start=on_start, on_step=on_step, require_confinement=require_confinement,
                ops=ops != "none",
            )
    except Interrupted as stop:
        _say_if_unconfined(stop.traces)
        raise
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
                f"tensortrace: safe mode is not confined by the kernel here ({'; '.join(confinement.missing)}); "
                "only the Python-level checks and resource limits apply. Use --require-confinement to refuse instead."
            ),
            err=True,
        )


def _guarded(body: Callable[[], int]) -> None:
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


# --- commands -------------------------------------------------------------------------


@app.command(cls=_Command)
def run(
    targets: List[str] = TARGETS,
    fmt: Optional[str] = FORMAT,
    output: Optional[str] = OUTPUT,
    device: Optional[str] = DEVICE,
    trust: bool = TRUST,
    timeout: float = TIMEOUT,
    memory_limit: int = MEMORY,
    scenario_timeout: float = SCENARIO_TIMEOUT,
    require_confinement: bool = REQUIRE,
    step: Optional[int] = STEP,
    steps: Optional[str] = STEPS,
    changes_only: bool = CHANGES,
    all_rows: bool = ALL_ROWS,
    show: Optional[str] = SHOW,
    no_values: bool = NO_VALUES,
    width: Optional[int] = WIDTH,
    graph: Optional[str] = GRAPH,
    ops: str = OPS,
    color: str = COLOR,
) -> None:
    """Run scenarios and show what happened at every step."""

    def body() -> int:
        from .overrides import with_graph

        form = check_format(format_for(fmt, output))
        _check_device(device)
        _check_ops(ops)
        scenarios = [with_graph(sc, names_of(graph)) for sc in _load_all(targets)]
        check_steps_exist(parse_steps(step, steps), [len(sc.steps) for sc in scenarios], any(sc.setup for sc in scenarios))
        with _output(output) as out:
            live = stream(form)
            progress = _progress(scenarios, streamed_to_terminal=live is not None and out.is_terminal)
            traces, interrupted = _trace_into(
                out, live, scenarios, progress, trust=trust, device=device, timeout=timeout, memory_limit=memory_limit,
                scenario_timeout=scenario_timeout, require_confinement=require_confinement, ops=ops,
            )
            options = replace(
                _render_options(form, out, step, steps, changes_only, show, no_values, width, color),
                ops=ops, all_rows=all_rows,
            )
            out.write(_rest_of_output(_noting_show(traces, show), form, live, options))
        return _run_status(traces, interrupted)

    _guarded(body)


def _progress(scenarios: list, *, streamed_to_terminal: bool):
    """Progress on stderr when it is a terminal, unless a streamed format already shows each step there."""
    from .render.progress import RunProgress, plans_of

    terminal = not streamed_to_terminal and sys.stderr.isatty()
    return RunProgress.on_stderr(plans_of(scenarios) if terminal else [], terminal)


def _trace_into(out: Output, live: Optional[StreamRenderer], scenarios: list, progress, **run_args) -> Tuple[List[Trace], bool]:
    """Run the scenarios, writing a live format's events as they come; (traces, interrupted)."""

    def on_start(trace: Trace) -> None:
        progress.on_start(trace)
        if live is not None:
            out.write(live.start(trace))

    def on_step(trace: Trace, st) -> None:
        progress.on_step(trace, st)
        if live is not None:
            out.write(live.step(trace, st))

    try:
        return _run_all(scenarios, on_start=on_start, on_step=on_step, progress=progress, **run_args), False
    except Interrupted as stop:
        return stop.traces, True


def _rest_of_output(traces: List[Trace], form: str, live: Optional[StreamRenderer], options: RenderOptions) -> str:
    """What is still to write once the run is over: the closing events, or the whole document."""
    if live is not None:
        return "".join(live.end(trace) for trace in traces)
    return render(traces, form, options)


def _run_status(traces: List[Trace], interrupted: bool) -> int:
    if interrupted:
        typer.echo("tensortrace: interrupted; the output above holds what was traced so far", err=True)
        return EXIT_INTERRUPTED
    return EXIT_OK if all(t.passed for t in traces) else EXIT_FAILED


@app.command(cls=_Command)
def check(
    targets: List[str] = CHECK_TARGETS,
    device: Optional[str] = DEVICE,
    trust: bool = TRUST,
    timeout: float = TIMEOUT,
    memory_limit: int = MEMORY,
    scenario_timeout: float = SCENARIO_TIMEOUT,
    require_confinement: bool = REQUIRE,
    ops: str = OPS,
) -> None:
    """Run scenarios and say, one line each, whether they behaved as declared."""

    def body() -> int:
        from .library import expand_folders
        from .render.check import summary

        _check_ops(ops)
        passed = failed = unusable = 0
        files = expand_folders(targets, skipped=_say_skipped)
        _prepare_check(files, confine=not trust)
        for target in files:
            verdicts = _check_one(
                target, trust=trust, device=device, timeout=timeout, memory_limit=memory_limit,
                scenario_timeout=scenario_timeout, require_confinement=require_confinement, ops=ops,
            )
            if verdicts is None:
                unusable += 1
                continue
            passed += verdicts.count(True)
            failed += verdicts.count(False)
        typer.echo(summary(passed, failed, unusable))
        if unusable:
            return EXIT_UNUSABLE
        return EXIT_FAILED if failed else EXIT_OK

    _guarded(body)


def _say_skipped(path: str, why: str) -> None:
    """A file of a folder given to ``check`` that is not read: one line on stderr."""
    typer.echo(visible(f"tensortrace: {path}: skipped: {why}"), err=True)


def _prepare_check(targets: Sequence[str], confine: bool) -> None:
    """Import once, up front, what some file's scenarios will need (a file that fails to load is reported later)."""
    from .library import resolve_target
    from .runner import prepare
    from .scenario import load_scenario

    scenarios = []
    for target in targets:
        try:
            scenarios.append(load_scenario(resolve_target(target)))
        except Exception:  # noqa: BLE001 - its own line says what is wrong, in order
            continue
    prepare(scenarios, confine=confine)


def _check_one(target: str, **run_args) -> Optional[List[bool]]:
    """Check one file and print its lines; its verdicts, or None when it could not be used.

    Whatever goes wrong with one file stays with that file's line: the
    files after it are still checked.
    """
    from .library import resolve_target
    from .render.check import check_line, error_line
    from .scenario import load_scenario

    try:
        traces = _run_all([load_scenario(resolve_target(target))], **run_args)
        lines = [check_line(trace, target) for trace in traces]
    except TensorTraceError as exc:
        typer.echo(error_line(target, str(exc)), err=True)
        return None
    except Interrupted:
        raise KeyboardInterrupt from None
    except Exception as exc:  # noqa: BLE001 - a broken file must not end the whole check
        typer.echo(error_line(target, f"{target}: could not be checked ({type(exc).__name__}: {exc})"), err=True)
        return None
    for line in lines:
        typer.echo(line)
    return [trace.passed for trace in traces]


@app.command("render", cls=_Command)
def render_cmd(
    trace_file: str = typer.Argument(..., metavar="TRACE.json", help="A JSON trace written by 'tensortrace run --format json' ('-' for stdin).", show_default=False),
    fmt: Optional[str] = FORMAT,
    output: Optional[str] = OUTPUT,
    step: Optional[int] = STEP,
    steps: Optional[str] = STEPS,
    changes_only: bool = CHANGES,
    all_rows: bool = ALL_ROWS,
    show: Optional[str] = SHOW,
    no_values: bool = NO_VALUES,
    width: Optional[int] = WIDTH,
    ops: str = OPS,
    color: str = COLOR,
) -> None:
    """Render a saved JSON trace again, without running anything."""

    def body() -> int:
        form = check_format(format_for(fmt, output))
        _check_ops(ops)
        traces = _noting_show(load_traces(trace_file), show)
        check_steps_exist(parse_steps(step, steps), [len(t.steps) for t in traces], any(t.setup is not None for t in traces))
        with _output(output) as out:
            options = replace(
                _render_options(form, out, step, steps, changes_only, show, no_values, width, color),
                ops=ops, all_rows=all_rows,
            )
            out.write(render(traces, form, options))
        return EXIT_OK if all(t.passed for t in traces) else EXIT_FAILED

    _guarded(body)


@app.command(cls=_Command)
def explore(
    target: str = typer.Argument(
        ..., metavar="FILE|NAME", show_default=False,
        help="A scenario file, a bundled scenario's name, or a JSON trace saved with 'run -o trace.json'.",
    ),
    device: Optional[str] = DEVICE,
    trust: bool = TRUST,
    timeout: float = TIMEOUT,
    memory_limit: int = MEMORY,
    scenario_timeout: float = SCENARIO_TIMEOUT,
    require_confinement: bool = REQUIRE,
) -> None:
    """Step through a trace in the terminal: steps, changed cells, who shares memory, errors, graphs."""

    def body() -> int:
        from .tui import explore as explore_traces, require_textual

        require_textual()
        _check_device(device)
        saved = is_saved_trace(target)
        traces = load_traces(target) if saved else None
        scenarios = None if saved else _load_all([target])
        if not _interactive():
            raise UsageError("explore needs a terminal; use 'tensortrace run' to print the trace instead")
        if traces is None:
            progress = _progress(scenarios, streamed_to_terminal=False)
            try:
                traces = _run_all(
                    scenarios, trust=trust, device=device, timeout=timeout, memory_limit=memory_limit,
                    scenario_timeout=scenario_timeout, require_confinement=require_confinement,
                    on_start=progress.on_start, on_step=progress.on_step, progress=progress,
                )
            except Interrupted:
                raise KeyboardInterrupt from None
        return explore_traces(traces)

    _guarded(body)


def _interactive() -> bool:
    """Whether a person is at a terminal: keys come from stdin and the screen is stdout."""
    return sys.stdin.isatty() and sys.stdout.isatty()


@app.command(cls=_Command)
def schema(
    trace_format: bool = typer.Option(False, "--trace", help="Print the JSON Schema of the trace format instead."),
    doctor_format: bool = typer.Option(False, "--doctor", help="Print the JSON Schema of doctor reports instead."),
) -> None:
    """Print the JSON Schema of scenario files (or, with --trace, of JSON traces)."""
    from .schemas import scenario_schema, trace_schema

    if doctor_format:
        from .doctor.records import report_schema
        return typer.echo(json.dumps(report_schema(), indent=2))
    typer.echo(json.dumps(trace_schema() if trace_format else scenario_schema(), indent=2))


@app.command("list", cls=_Command)
def list_cmd(
    tag: Optional[List[str]] = typer.Option(None, "--tag", metavar="TAG", help="Only scenarios with this tag (repeat for several: any of them)."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the list as a markdown page (docs/scenarios.md)."),
) -> None:
    """List the bundled scenarios with their titles and tags."""

    def body() -> int:
        from .library import bundled_scenarios, scenarios_markdown

        entries = bundled_scenarios()
        if tag:
            wanted = {t.lower() for t in tag}
            entries = [e for e in entries if wanted & {t.lower() for t in e.tags}]
            if not entries:
                raise UsageError(f"no bundled scenario has the tag {', '.join(sorted(wanted))}; run 'tensortrace list' to see the tags")
        if markdown:
            typer.echo(scenarios_markdown(entries), nl=False)
            return EXIT_OK
        from .render.listing import render_scenario_list

        tty = sys.stdout.isatty()
        color = tty and not os.environ.get("NO_COLOR")
        typer.echo(render_scenario_list(entries, width=_terminal_width() if tty else LIST_WIDTH, color=color), nl=False)
        return EXIT_OK

    _guarded(body)


@app.command(cls=_Command)
def show(name: str = typer.Argument(..., metavar="NAME", help="A bundled scenario's name.", show_default=False)) -> None:
    """Print a bundled scenario's YAML, to read it or to start your own from it."""

    def body() -> int:
        from .library import resolve_target
        from .render.listing import render_scenario_source

        path = resolve_target(name)
        try:
            typer.echo(render_scenario_source(path.read_text(encoding="utf-8")), nl=False)
        except OSError as exc:
            from .errors import ScenarioError

            raise ScenarioError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
        return EXIT_OK

    _guarded(body)


@app.command(cls=_Command)
def new(
    file: str = typer.Argument(..., metavar="FILE", help="The scenario file to create, e.g. my-scenario.yaml.", show_default=False),
    force: bool = typer.Option(False, "--force", help="Overwrite the file if it exists."),
) -> None:
    """Write a commented scenario template that runs as it is."""

    def body() -> int:
        from .library import TEMPLATE

        path = Path(file)
        if path.exists() and not force:
            raise UsageError(f"{file} exists already; choose another name, or add --force to overwrite it")
        with _output(file) as out:
            out.write(TEMPLATE.format(name=file))
        typer.echo(f"wrote {file}; run it with: tensortrace run {file}", err=True)
        return EXIT_OK

    _guarded(body)


@app.command(cls=_Command)
def convert(
    source: str = typer.Argument(..., metavar="FILE", help="A Python file (.py) or notebook (.ipynb) to write as a YAML scenario.", show_default=False),
    output: Optional[str] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the YAML to this file (atomically) instead of stdout."),
) -> None:
    """Write a Python file or notebook as the equivalent YAML scenario."""

    def body() -> int:
        from .convert import scenario_yaml
        from .scenario import load_scenario

        if Path(source).suffix.lower() not in (".py", ".ipynb"):
            raise UsageError(f"{source} is not a .py or .ipynb file; convert writes Python files and notebooks as YAML scenarios")
        text = scenario_yaml(load_scenario(source))
        with _output(output) as out:
            out.write(text)
        return EXIT_OK

    _guarded(body)


from .doctor.command import CONTEXT, doctor  # noqa: E402 (imports neither torch nor rich)
app.command("doctor", cls=_Command, context_settings=CONTEXT)(doctor)


@contextmanager
def _output(path: Optional[str]) -> Iterator[Output]:
    """Stdout, or a file that appears whole only when the block ends without an error."""
    out = Output(path)
    try:
        yield out
        out.commit()
    finally:
        out.discard()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP: unwind like an error, so temporary files go and the child is stopped."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Parse the command line and run the command (``tensortrace.__main__.main`` imports and calls this)."""
    import signal

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) == signal.SIG_DFL:
            signal.signal(getattr(signal, name), _terminated)
    try:
        app()
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        sys.stderr.write("tensortrace: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
