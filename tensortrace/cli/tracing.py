"""The commands that trace: ``run`` (scenarios to any format) and ``check`` (a verdict per file).

The annotations here are objects, not strings: typer reads them at every start.
"""

from typing import List, Optional, Sequence, Tuple

import typer

from .options import (  # one definition for every command
    ALL_ROWS,
    CHANGES,
    CHECK_TARGETS,
    COLOR,
    DEVICE,
    FORMAT,
    GRAPH,
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
    TARGETS,
    TIMEOUT,
    TRUST,
    WIDTH,
)
from ..errors import Interrupted, TensorTraceError
from ..trace import Trace
from ..output import Output, format_for
from ..render import RenderOptions, StreamRenderer, check_format, render_to, stream
from ..render.visible import visible
from .selection import check_steps_exist, names_of, parse_steps
from .common import (
    progress_on_stderr,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNUSABLE,
    check_device,
    check_ops,
    guarded,
    load_all,
    noting_show,
    output_to,
    render_options,
    run_all,
)


def run(
    ctx: typer.Context,
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
    values: str = VALUES,
    iterations: str = ITERATIONS,
    width: Optional[int] = WIDTH,
    graph: Optional[str] = GRAPH,
    ops: str = OPS,
    color: str = COLOR,
) -> None:
    """Run scenarios and show what happened at every step.

    After one Python file, -- ARGS are its own command line (its sys.argv[1:]).
    """

    def body() -> int:
        from ..scenario.overrides import with_graph

        form = check_format(format_for(fmt, output))
        check_device(device)
        check_ops(ops)
        script_args = ctx.meta.get("tensortrace.script_args")
        graphs = names_of(graph, "--graph")
        scenarios = [with_graph(sc, graphs) for sc in load_all(targets, script_args)]
        check_steps_exist(
            parse_steps(step, steps),
            [len(sc.steps) for sc in scenarios],
            any(sc.setup for sc in scenarios),
        )
        with output_to(output) as out:
            live = stream(form)
            progress = progress_on_stderr(
                scenarios, streamed_to_terminal=live is not None and out.is_terminal
            )
            traces, interrupted = _trace_into(
                out,
                live,
                scenarios,
                progress,
                trust=trust,
                device=device,
                timeout=timeout,
                memory_limit=memory_limit,
                scenario_timeout=scenario_timeout,
                require_confinement=require_confinement,
                ops=ops,
            )
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
            _write_rest(out, noting_show(traces, show), form, live, options)
        return _run_status(traces, interrupted)

    guarded(body)


def _trace_into(
    out: Output, live: Optional[StreamRenderer], scenarios: list, progress, **run_args
) -> Tuple[List[Trace], bool]:
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
        return run_all(
            scenarios, on_start=on_start, on_step=on_step, progress=progress, **run_args
        ), False
    except Interrupted as stop:
        return stop.traces, True


def _write_rest(
    out: Output,
    traces: List[Trace],
    form: str,
    live: Optional[StreamRenderer],
    options: RenderOptions,
) -> None:
    """Write what is still to come once the run is over: the closing events, or the whole
    document, a piece at a time where the format allows it."""
    if live is not None:
        out.write("".join(live.end(trace) for trace in traces))
    else:
        render_to(traces, form, out.write, options)


def _run_status(traces: List[Trace], interrupted: bool) -> int:
    if interrupted:
        typer.echo(
            "tensortrace: interrupted; the output above holds what was traced so far", err=True
        )
        return EXIT_INTERRUPTED
    return EXIT_OK if all(t.passed for t in traces) else EXIT_FAILED


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
        from ..scenario.library import expand_folders
        from .check import summary

        check_ops(ops)
        passed = failed = unusable = 0
        files = expand_folders(targets, skipped=_say_skipped)
        _prepare_check(files, confine=not trust)
        for target in files:
            verdicts = _check_one(
                target,
                trust=trust,
                device=device,
                timeout=timeout,
                memory_limit=memory_limit,
                scenario_timeout=scenario_timeout,
                require_confinement=require_confinement,
                ops=ops,
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

    guarded(body)


def _say_skipped(path: str, why: str) -> None:
    """A file of a folder given to ``check`` that is not read: one line on stderr."""
    typer.echo(visible(f"tensortrace: {path}: skipped: {why}"), err=True)


def _prepare_check(targets: Sequence[str], confine: bool) -> None:
    """Import once, up front, what some file's scenarios will need.

    A file that fails to load is reported later.
    """
    from ..scenario.library import resolve_target
    from ..run.runner import prepare
    from ..scenario import load_scenario

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
    from ..scenario.library import resolve_target
    from .check import check_line, error_line
    from ..scenario import load_scenario

    try:
        traces = run_all([load_scenario(resolve_target(target))], **run_args)
        lines = [check_line(trace, target) for trace in traces]
    except TensorTraceError as exc:
        typer.echo(error_line(target, str(exc)), err=True)
        return None
    except Interrupted:
        raise KeyboardInterrupt from None
    except Exception as exc:  # noqa: BLE001 - a broken file must not end the whole check
        typer.echo(
            error_line(target, f"{target}: could not be checked ({type(exc).__name__}: {exc})"),
            err=True,
        )
        return None
    for line in lines:
        typer.echo(line)
    return [trace.passed for trace in traces]
