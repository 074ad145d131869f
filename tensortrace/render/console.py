"""The terminal rendering of traces: step-by-step tables, outcomes and autograd trees.

``render_console`` draws every trace into a string; ``console_renderables``
gives the same drawing as rich renderables, which HTML and SVG record (see
``export.py``), so what a reader sees in a browser is what the terminal shows.
This module draws one trace; ``console_variants.py`` draws variants side by
side; both draw the choices ``layout.py`` makes with the pieces in
``console_parts.py``.

Reading guide for the output:

- one table per step, one row per shown tensor; a cell that changed in the
  step is highlighted (marked ``*`` without colour), a name bound in the step
  is marked ``(new)``;
- the storage column is a stable label (``S1``); tensors on one storage show
  the same label in the same colour, a view adds its offset (``S1+1``);
- the columns are chosen once per run (``layout.run_columns``), so they line
  up from step to step; stride, contiguity and ``retains_grad`` join them in
  runs where they tell something;
- no number and no name is ever cut in two: a table wraps between elements,
  and when its columns cannot fit, each tensor becomes a block of lines;
- a change that arrived through shared memory is said under the table;
- variants of one scenario share one table, one column per variant, and the
  facts that differ between them are highlighted (marked ``≠``).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from rich.console import RenderableType
from rich.padding import Padding
from rich.text import Text

from .prose import prose
from ..trace import Step, TensorState, Trace
from .compare import group_traces
from .console_parts import (
    View,
    code_syntax,
    graph_parts,
    header_panel,
    legend as legend_text,
    make_console,
    outcome_parts,
    TABLE_INDENT,
    say,
    step_title,
    storage_colour,
    trace_footer,
)
from .console_lines import BLANK, TextLine
from .console_page import page_text
from .console_table import Kept, state_table
from .console_variants import variant_parts
from .ops import flow_lines, ops_lines
from .facts import aliasing_notes, with_previous
from .layout import (
    has_tensor_tables,
    legend_marks,
    new_predictions,
    quiet_rows,
    run_columns,
    shared_storages,
    step_wanted,
    table_rows,
)
from .options import DEFAULT_OPTIONS, DEFAULT_WIDTH, RenderOptions, resolve_width
from .visible import visible_traces

__all__ = ["DEFAULT_WIDTH", "console_renderables", "render_console", "resolve_width"]


def render_console(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """Every trace as the terminal shows it, at ``options.width`` columns (default 100)."""
    width = resolve_width(options.width)
    console = make_console(width, options.color)
    # One print of the whole page: each print costs a pass over its lines and a
    # write of its own, which on a long trace cost more than drawing the steps.
    # No crop: every part is drawn within the width already (test_console_width
    # holds it to that), and cropping was a second pass over every segment.
    text = page_text(
        console, console_renderables(traces, options, width=width, color=options.color)
    )
    if not options.color:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def console_renderables(
    traces: Sequence[Trace], options: RenderOptions, *, width: int, color: bool
) -> List[RenderableType]:
    """Every trace as renderables: scenarios one after another, variants side by side.

    Scenario text is made ``visible`` here, so no caller can draw it raw.
    """
    traces = visible_traces(traces)
    view = View(options, width, color)
    parts: List[RenderableType] = []
    marks = legend_marks(traces, options) if has_tensor_tables(traces) else None
    for position, group in enumerate(group_traces(traces)):
        if position:
            parts.append(Text(""))
        shown = marks if position == 0 else None
        if len(group) == 1:
            parts.extend(_trace_parts(group[0], view, legend=shown))
        else:
            parts.extend(variant_parts(group, view, legend=shown))
    return parts


# --- one trace -----------------------------------------------------------------


def _trace_parts(
    trace: Trace, view: View, *, legend: Optional[FrozenSet[str]]
) -> Iterable[RenderableType]:
    """One trace; ``legend`` is the set of extra marks to explain, None for no legend."""
    title = Text(trace.scenario.title, style="bold")
    if trace.scenario.variant is not None:
        title.append(f"  (variant: {trace.scenario.variant})", style="cyan")
    yield header_panel(trace, title, safe=trace.environment.safe)
    if legend is not None:
        yield legend_text(view, variants=False, marks=legend)
    columns = run_columns([trace], view.options)
    drawn: Dict[TensorState, Kept] = {}  # cells of unchanged tensors (state_table)
    first = True
    for prev, step in with_previous(trace):
        if not step_wanted(step, view.options.steps):
            continue
        yield from _step_parts(prev, None if first else prev, step, view, columns, drawn)
        first = False
    yield from trace_footer(trace)


def _step_parts(
    prev: Optional[Step],
    shown_prev: Optional[Step],
    step: Step,
    view: View,
    columns: Sequence[str],
    drawn: Dict[TensorState, Kept],
) -> Iterable[RenderableType]:
    """One step; ``shown_prev`` is the step drawn just before it (None: the first drawn)."""
    yield BLANK
    yield step_title(step)
    if step.code.strip():
        yield code_syntax(step.code, step.line, view.color)
    if step.note:
        yield Padding(prose(step.note.strip()), (0, 0, 0, 2))
    yield from _state_parts(prev, shown_prev, step, view, columns, drawn)
    yield from ops_parts(step, view.options.ops)
    yield from outcome_parts(step)
    for message in new_predictions(prev, step):
        yield say("⚠ predicted: " + message, style="bold yellow")
    for graph in step.graphs:
        yield from graph_parts(graph, view, step)


def ops_parts(step: Step, level: str) -> Iterable[RenderableType]:
    """What the step ran (``--ops``) and, for each backward call, where its gradients went."""
    if level == "none":
        return
    lines = ops_lines(step, level)
    if lines:
        yield say("ran:", style="dim")
        for line in lines:
            yield TextLine(line, "dim" if line.startswith("  ") else "", 4)
    for flow in step.flow:
        for i, line in enumerate(flow_lines(flow)):
            yield TextLine(line, "bold" if i == 0 else "", 2)


def unchanged_line(names: Sequence[str], width: int) -> str:
    """ "… 37 unchanged: a, b, c …": the names of the rows left out, as many as fit ``width``."""
    words = f"… {len(names)} unchanged: "
    for position, name in enumerate(names):
        piece = name if position == 0 else ", " + name
        rest = len(names) - position - 1
        if len(words) + len(piece) + (2 if rest else 0) > width and position:
            return words + " …"
        words += piece
    return words


def shared_memory_line(shared: Sequence[Tuple[str, Sequence[str]]], view: View) -> Padding:
    """ "shared memory: S1 holds a, b; S3 holds c, d", each label in its storage's colour."""
    text = Text("shared memory: ", style="dim")
    for position, (label, group) in enumerate(shared):
        if position:
            text.append("; ", style="dim")
        text.append(label, style=storage_colour(label, view))
        text.append(" holds " + ", ".join(group), style="dim")
    return Padding(text, (0, 0, 0, 2))


def _state_parts(
    prev: Optional[Step],
    shown_prev: Optional[Step],
    step: Step,
    view: View,
    columns: Sequence[str],
    drawn: Dict[TensorState, Kept],
) -> Iterable[RenderableType]:
    names, rows = table_rows(prev, step, view.options)
    if not names:
        return
    rows, unchanged = quiet_rows(rows, view.options, first=shown_prev is None)
    if not rows and not unchanged:
        yield say("no changes", style="dim")
        return
    if rows:
        yield state_table(rows, columns, view, drawn)
    if unchanged:
        yield say(unchanged_line(unchanged, view.width - TABLE_INDENT), style="dim")
    for note in aliasing_notes(prev, step):
        if note.name in names:
            yield say("↳ " + note.describe(), style="cyan")
    shared = shared_storages(step, names)
    # Said when it is new to the reader: at the first step drawn, or when it changed.
    if shared and (shown_prev is None or shared_storages(shown_prev, names) != shared):
        yield shared_memory_line(shared, view)
