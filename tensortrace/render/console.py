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

from .prose import note_text
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
from .console_lines import BLANK, TextLine, TreeLine
from .console_page import page_text
from .console_params import parameter_table
from .console_table import Kept, state_table
from .console_variants import variant_parts
from .loops import (
    Fold,
    Part,
    drawn_flows,
    folded_line,
    iteration_heading,
    line_folds,
    loop_parts,
    loop_title,
)
from .ops import ops_lines
from .facts import aliasing_notes, with_previous
from .layout import (
    has_tensor_tables,
    legend_marks,
    new_predictions,
    QUIET_ROWS,
    alias_groups,
    parameter_rows,
    quiet_rows,
    run_columns,
    unchanged_table,
    shared_storages,
    step_wanted,
    table_rows,
)
from .options import DEFAULT_OPTIONS, DEFAULT_WIDTH, RenderOptions, resolve_width
from .text import plural
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
    folds, folded = _line_folds(trace, view.options)
    for prev, step in with_previous(trace):
        if not step_wanted(step, view.options.steps):
            continue
        if id(step) in folded:
            fold = folds.get(id(step))
            if fold is not None:
                yield BLANK
                yield say(fold.line, style="dim")
            continue
        yield from _step_parts(prev, None if first else prev, step, view, columns, drawn)
        first = False
    yield from trace_footer(trace)


def _line_folds(trace: Trace, options: RenderOptions) -> Tuple[Dict[int, Fold], set]:
    """A line-by-line trace's folded loop passes: the fold said in place of its first step
    (by the step's id), and the ids of every step folded."""
    steps = trace.steps
    folds = line_folds(steps, options.iterations) if options.steps is None else {}
    said = {id(steps[position]): fold for position, fold in folds.items()}
    folded = {id(steps[j]) for fold in folds.values() for j in fold.steps}
    return said, folded


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
    yield step_title(step, loop_title(step))
    if step.code.strip():
        yield code_syntax(step.code, step.line, view.color)
    if step.note:
        yield Padding(note_text(step.note.strip()), (0, 0, 0, 2))
    yield from _state_parts(prev, shown_prev, step, view, columns, drawn)
    yield from ops_parts(step, view.options.ops, view.options.iterations)
    yield from outcome_parts(step)
    for message in new_predictions(prev, step):
        yield say("⚠ predicted: " + message, style="bold yellow")
    for graph in step.graphs:
        yield from graph_parts(graph, view, step)


def ops_parts(step: Step, level: str, iterations: str = "first") -> Iterable[RenderableType]:
    """What the step ran (``--ops``) and, for each backward call, where its gradients went;
    a loop's first pass in full and the others folded (``loops.loop_parts``)."""
    if level == "none":
        return
    parts = loop_parts(step, iterations)
    if parts is None:
        yield from _ran_lines(step, level, "ran:", 0, None, 4)
        yield from _flow_lines(step, 0, len(step.flow), 2)
        return
    for part in parts:
        if part.kind == "folded":
            yield say(folded_line(part), style="dim")
            continue
        if part.kind == "pass":
            yield say(iteration_heading(part, step.loop), style="bold")
            yield from _ran_lines(step, level, "", *part.ops, 4)
            yield from _flow_lines(step, *part.flows, 4, part)
            continue
        head = "ran:" if part.kind == "before" else "after the loop:"
        yield from _ran_lines(step, level, head, *part.ops, 4)
        yield from _flow_lines(step, *part.flows, 2)


def _ran_lines(
    step: Step, level: str, head: str, start: int, stop: Optional[int], indent: int
) -> Iterable[RenderableType]:
    lines = ops_lines(step, level, start, stop)
    if lines and head:
        yield say(head, style="dim")
    for line in lines:
        yield TextLine(line, "dim" if line.startswith("  ") else "", indent)


def _flow_lines(
    step: Step, start: int, stop: int, indent: int, part: Optional[Part] = None
) -> Iterable[RenderableType]:
    """The step's flows ``start:stop``; a tree drawn before in the loop, or just before,
    said in one line."""
    for drawn in drawn_flows(step, start, stop, part):
        if drawn.again is not None:
            yield TextLine(drawn.again, "bold", indent)
            continue
        yield TextLine(drawn.head, "bold", indent)
        for line in drawn.tree:
            yield TreeLine(line, "", indent)


def unchanged_line(names: Sequence[str], width: int, every: bool = False) -> str:
    """ "… 37 unchanged: a, b, c …": the names of the rows left out, as many as fit ``width``;
    ``every`` row: "no tensor changed: a, b, c …" (``--all-rows`` draws the table)."""
    words = "no tensor changed: " if every else f"… {len(names)} unchanged: "
    for position, name in enumerate(names):
        piece = name if position == 0 else ", " + name
        rest = len(names) - position - 1
        if len(words) + len(piece) + (2 if rest else 0) > width and position:
            return words + " …"
        words += piece
    return words


# Lines the shared-memory line may take before the storages left are counted.
SHARED_LINES = 2


def shared_memory_line(shared: Sequence[Tuple[str, Sequence[str]]], view: View) -> Padding:
    """ "shared memory: S1 holds a, b; S3 holds c, d", each label in its storage's colour;
    past ``SHARED_LINES`` lines, the storages left are counted."""
    text = Text("shared memory: ", style="dim")
    room = SHARED_LINES * (view.width - 2) - 40
    for position, (label, group) in enumerate(shared):
        piece = label + " holds " + ", ".join(group)
        if position and len(text) + len(piece) + 2 > room:
            text.append(f"; and {plural(len(shared) - position, 'more storage')}", style="dim")
            break
        if position:
            text.append("; ", style="dim")
        text.append(label, style=storage_colour(label, view))
        text.append(piece[len(label) :], style="dim")
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
    if unchanged_table(rows, view.options, first=shown_prev is None):
        yield say(unchanged_line([r.state.name for r in rows], view.width - TABLE_INDENT, True))
        return
    many = len(rows) > QUIET_ROWS
    rows, unchanged = quiet_rows(rows, view.options, first=shown_prev is None)
    if not rows and not unchanged:
        yield say("no changes", style="dim")
        return
    params, rows = parameter_rows(rows, view.options, many=many)
    params, aliases = alias_groups(params)
    if rows:
        yield state_table(rows, columns, view, drawn)
    if params:
        yield parameter_table(params, view)
    for name, other, count in aliases:
        yield say(f"{name}: the same objects as {other} ({plural(count, 'tensor')})", style="dim")
    if unchanged:
        yield say(unchanged_line(unchanged, view.width - TABLE_INDENT), style="dim")
    for note in aliasing_notes(prev, step):
        if note.name in names:
            yield say("↳ " + note.describe(), style="cyan")
    shared = shared_storages(step, names)
    # Said when it is new to the reader: at the first step drawn, or when it changed.
    if shared and (shown_prev is None or shared_storages(shown_prev, names) != shared):
        yield shared_memory_line(shared, view)
