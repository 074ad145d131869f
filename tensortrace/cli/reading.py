"""The commands that read: ``render`` and ``explore`` (saved traces), ``schema``, ``list``,
``show`` and ``new`` (the bundled library), and ``convert`` (a scenario back to YAML).

The annotations here are objects, not strings: typer reads them at every start.
"""

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .options import (  # one definition for every command
    ALL_ROWS,
    CHANGES,
    COLOR,
    DEVICE,
    FORMAT,
    MEMORY,
    ITERATIONS,
    NO_VALUES,
    OPS,
    VALUES,
    OUTPUT,
    REQUIRE,
    SCENARIO_TIMEOUT,
    SHOW,
    STEP,
    STEPS,
    TIMEOUT,
    TRUST,
    WIDTH,
)
from ..errors import Interrupted, UsageError
from ..output import format_for
from ..render import check_format, render_to
from .tracefile import is_saved_trace, load_traces
from .selection import check_steps_exist, parse_steps
from .common import (
    progress_on_stderr,
    EXIT_FAILED,
    EXIT_OK,
    LIST_WIDTH,
    check_device,
    check_ops,
    guarded,
    load_all,
    noting_show,
    output_to,
    render_options,
    run_all,
    terminal_width,
)


def render_cmd(
    trace_file: str = typer.Argument(
        ...,
        metavar="TRACE.json",
        help="A JSON trace written by 'tensortrace run --format json' ('-' for stdin).",
        show_default=False,
    ),
    fmt: Optional[str] = FORMAT,
    output: Optional[str] = OUTPUT,
    step: Optional[int] = STEP,
    steps: Optional[str] = STEPS,
    changes_only: bool = CHANGES,
    all_rows: bool = ALL_ROWS,
    show: Optional[str] = SHOW,
    no_values: bool = NO_VALUES,
    values: str = VALUES,
    iterations: str = ITERATIONS,
    width: Optional[int] = WIDTH,
    ops: str = OPS,
    color: str = COLOR,
) -> None:
    """Render a saved JSON trace again, without running anything."""

    def body() -> int:
        form = check_format(format_for(fmt, output))
        check_ops(ops)
        traces = noting_show(load_traces(trace_file), show)
        check_steps_exist(
            parse_steps(step, steps),
            [len(t.steps) for t in traces],
            any(t.setup is not None for t in traces),
        )
        with output_to(output) as out:
            options = render_options(
                form,
                out,
                step=step,
                steps=steps,
                changes_only=changes_only,
                all_rows=all_rows,
                show=show,
                no_values=no_values,
                values=values,
                iterations=iterations,
                width=width,
                ops=ops,
                color=color,
            )
            render_to(traces, form, out.write, options)
        return EXIT_OK if all(t.passed for t in traces) else EXIT_FAILED

    guarded(body)


def explore(
    target: str = typer.Argument(
        ...,
        metavar="FILE|NAME",
        show_default=False,
        help=(
            "A scenario file, a bundled scenario's name, "
            "or a JSON trace saved with 'run -o trace.json'."
        ),
    ),
    device: Optional[str] = DEVICE,
    trust: bool = TRUST,
    timeout: float = TIMEOUT,
    memory_limit: int = MEMORY,
    scenario_timeout: float = SCENARIO_TIMEOUT,
    require_confinement: bool = REQUIRE,
) -> None:
    """Step through a trace in the terminal.

    Steps, changed cells, who shares memory, errors, graphs.
    """

    def body() -> int:
        from ..tui import explore as explore_traces, require_textual

        require_textual()
        check_device(device)
        saved = is_saved_trace(target)
        traces = load_traces(target) if saved else None
        scenarios = None if saved else load_all([target])
        if not _interactive():
            raise UsageError(
                "explore needs a terminal; use 'tensortrace run' to print the trace instead"
            )
        if traces is None:
            progress = progress_on_stderr(scenarios, streamed_to_terminal=False)
            try:
                traces = run_all(
                    scenarios,
                    trust=trust,
                    device=device,
                    timeout=timeout,
                    memory_limit=memory_limit,
                    scenario_timeout=scenario_timeout,
                    require_confinement=require_confinement,
                    on_start=progress.on_start,
                    on_step=progress.on_step,
                    progress=progress,
                )
            except Interrupted:
                raise KeyboardInterrupt from None
        return explore_traces(traces)

    guarded(body)


def _interactive() -> bool:
    """Whether a person is at a terminal: keys come from stdin and the screen is stdout."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def schema(
    trace_format: bool = typer.Option(
        False, "--trace", help="Print the JSON Schema of the trace format instead."
    ),
    doctor_format: bool = typer.Option(
        False, "--doctor", help="Print the JSON Schema of doctor reports instead."
    ),
) -> None:
    """Print the JSON Schema of scenario files (or, with --trace, of JSON traces)."""
    from ..scenario.schemas import scenario_schema, trace_schema

    if doctor_format:
        from ..trace.doctor import report_schema

        return typer.echo(json.dumps(report_schema(), indent=2))
    typer.echo(json.dumps(trace_schema() if trace_format else scenario_schema(), indent=2))


def list_cmd(
    tag: Optional[List[str]] = typer.Option(
        None,
        "--tag",
        metavar="TAG",
        help="Only scenarios with this tag (repeat for several: any of them).",
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="Print the list as a markdown page (docs/scenarios.md)."
    ),
) -> None:
    """List the bundled scenarios with their titles and tags."""

    def body() -> int:
        from ..scenario.library import bundled_scenarios, scenarios_markdown

        entries = bundled_scenarios()
        if tag:
            wanted = {t.lower() for t in tag}
            entries = [e for e in entries if wanted & {t.lower() for t in e.tags}]
            if not entries:
                raise UsageError(
                    f"no bundled scenario has the tag {', '.join(sorted(wanted))}; "
                    "run 'tensortrace list' to see the tags"
                )
        if markdown:
            typer.echo(scenarios_markdown(entries), nl=False)
            return EXIT_OK
        from .listing import render_scenario_list

        tty = sys.stdout.isatty()
        color = tty and not os.environ.get("NO_COLOR")
        typer.echo(
            render_scenario_list(
                entries, width=terminal_width() if tty else LIST_WIDTH, color=color
            ),
            nl=False,
        )
        return EXIT_OK

    guarded(body)


def show(
    name: str = typer.Argument(
        ..., metavar="NAME", help="A bundled scenario's name.", show_default=False
    ),
) -> None:
    """Print a bundled scenario's YAML, to read it or to start your own from it."""

    def body() -> int:
        from ..scenario.library import resolve_target
        from .listing import render_scenario_source

        path = resolve_target(name)
        try:
            typer.echo(render_scenario_source(path.read_text(encoding="utf-8")), nl=False)
        except OSError as exc:
            from ..errors import ScenarioError

            raise ScenarioError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
        return EXIT_OK

    guarded(body)


def new(
    file: str = typer.Argument(
        ...,
        metavar="FILE",
        help="The scenario file to create, e.g. my-scenario.yaml.",
        show_default=False,
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite the file if it exists."),
) -> None:
    """Write a commented scenario template that runs as it is."""

    def body() -> int:
        from ..scenario.library import TEMPLATE

        path = Path(file)
        if path.exists() and not force:
            raise UsageError(
                f"{file} exists already; choose another name, or add --force to overwrite it"
            )
        with output_to(file) as out:
            out.write(TEMPLATE.format(name=file))
        typer.echo(f"wrote {file}; run it with: tensortrace run {file}", err=True)
        return EXIT_OK

    guarded(body)


def convert(
    source: str = typer.Argument(
        ...,
        metavar="FILE",
        help="A Python file (.py) or notebook (.ipynb) to write as a YAML scenario.",
        show_default=False,
    ),
    output: Optional[str] = typer.Option(
        None,
        "--output",
        "-o",
        metavar="FILE",
        help="Write the YAML to this file (atomically) instead of stdout.",
    ),
) -> None:
    """Write a Python file or notebook as the equivalent YAML scenario."""

    def body() -> int:
        from .convert import scenario_yaml
        from ..scenario import load_scenario

        if Path(source).suffix.lower() not in (".py", ".ipynb"):
            raise UsageError(
                f"{source} is not a .py or .ipynb file; "
                "convert writes Python files and notebooks as YAML scenarios"
            )
        text = scenario_yaml(load_scenario(source))
        with output_to(output) as out:
            out.write(text)
        return EXIT_OK

    guarded(body)
