"""The terminal rendering: step-by-step tables, outcomes and autograd trees.

Everything here builds rich renderables from the model; ``render_console``
draws them into a string. HTML and SVG are the same renderables, recorded
(see ``export.py``), so what a reader sees in a browser is what the terminal
shows.

Reading guide for the output:

- one table per step, one row per shown tensor; a cell that changed in the
  step is highlighted (marked ``*`` without colour), a name bound in the step
  is marked ``(new)``;
- the storage column is a stable label (``S1``); tensors on one storage show
  the same label in the same colour, a view adds its offset (``S1+1``);
- a change that arrived through shared memory is said under the table;
- variants of one scenario share one table, one column per variant, and the
  facts that differ between them are highlighted (marked ``≠``).
"""

from __future__ import annotations

import io
import shutil
import sys
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.markdown import Markdown
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..model import ErrorInfo, ExpectationResult, Graph, Step, TensorState, Trace
from .compare import (
    differing_fields,
    merged_expectations,
    group_traces,
    step_indexes,
    steps_by_index,
    variant_differences,
    variant_name,
)
from .facts import (
    VALUE_FIELDS,
    aliasing_notes,
    changed_fields,
    shown_names,
    storage_groups,
    tensors_by_name,
    with_previous,
)
from .outline import NO_GRAD_FN, TRUNCATED, OutlineLine, graph_outline, line_text
from .text import (
    declared_raise_met,
    declared_warn_met,
    format_dtype,
    format_flag,
    format_grad_fn,
    format_shape,
    format_storage,
    format_values,
    format_version,
    outcome,
    plural,
)

DEFAULT_WIDTH = 100
STORAGE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_green",
                   "bright_magenta", "bright_cyan", "bright_yellow")
CHANGED_STYLE = "bold reverse"
DIFFERS_STYLE = "bold reverse"
CHANGED_MARK = "*"
DIFFERS_MARK = " ≠"
SYNTAX_THEME = "monokai"
# Each tree level takes four columns; a tree never gets deeper than the width allows.
TREE_COLUMNS_PER_LEVEL = 4
TREE_LABEL_ROOM = 36
# A leaf's grad is shown next to its AccumulateGrad when it is at most this long.
GRAD_IN_TREE_MAX = 30
# Columns that wrap when the table is too wide, and the width they keep at least.
WRAPPING_COLUMNS = {"name": 6, "values": 12, "grad": 8}
TABLE_INDENT = 2


def resolve_width(width: Optional[int]) -> int:
    """The width asked for, else the terminal's, else 100 when output is not a terminal."""
    if width is not None:
        return max(20, width)
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT_WIDTH


def make_console(width: int, color: bool, *, record: bool = False) -> Console:
    """A console that writes to a string, unaffected by the environment's settings."""
    return Console(
        file=io.StringIO(),
        width=width,
        color_system="truecolor" if color else None,
        force_terminal=color,
        force_jupyter=False,
        force_interactive=False,
        record=record,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
        soft_wrap=False,
        _environ={},
    )


@dataclass(frozen=True)
class View:
    """What the renderer was asked for, resolved once (``options`` is a RenderOptions)."""

    options: object
    width: int
    color: bool

    @property
    def steps(self):
        return self.options.steps

    @property
    def changes_only(self) -> bool:
        return self.options.changes_only

    @property
    def show(self):
        return self.options.show

    @property
    def values(self) -> bool:
        return self.options.values

    @property
    def tree_depth(self) -> int:
        return max(4, min(40, (self.width - TREE_LABEL_ROOM) // TREE_COLUMNS_PER_LEVEL))


def render_console(traces: Sequence[Trace], options, *, color: Optional[bool] = None) -> str:
    width = resolve_width(options.width)
    use_color = options.color if color is None else color
    console = make_console(width, use_color)
    for renderable in console_renderables(traces, options, width=width, color=use_color):
        console.print(renderable)
    text = console.file.getvalue()
    if not use_color:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def console_renderables(
    traces: Sequence[Trace], options, *, width: int, color: bool
) -> List[RenderableType]:
    """Every trace as renderables: scenarios one after another, variants side by side."""
    view = View(options, width, color)
    parts: List[RenderableType] = []
    legend = any(step.tensors for trace in traces for step in trace.steps)
    for position, group in enumerate(group_traces(traces)):
        if position:
            parts.append(Text(""))
        if len(group) == 1:
            parts.extend(_trace_parts(group[0], view, legend=legend and position == 0))
        else:
            parts.extend(_variant_parts(group, view, legend=legend and position == 0))
    return parts


# --- one trace -----------------------------------------------------------------


def _trace_parts(trace: Trace, view: View, *, legend: bool) -> Iterable[RenderableType]:
    yield from _header(trace, view)
    if legend:
        yield _legend(view, variants=False)
    first = True
    for prev, step in with_previous(trace):
        if not _wanted(step, view):
            continue
        yield from _step_parts(prev, None if first else prev, step, view)
        first = False
    yield from _trace_footer(trace)


def _wanted(step: Step, view: View) -> bool:
    if step.index == 0:
        failed = step.error is not None or not step.behaved
        worth = failed or bool(step.stdout) or bool(step.warnings)
        return worth and (view.steps is None or 0 in view.steps or failed)
    return view.steps is None or step.index in view.steps


def _header(trace: Trace, view: View) -> Iterable[RenderableType]:
    title = Text(trace.scenario.title, style="bold")
    if trace.scenario.variant is not None:
        title.append(f"  (variant: {trace.scenario.variant})", style="cyan")
    body: List[RenderableType] = [title]
    if trace.scenario.description:
        body.append(Markdown(trace.scenario.description.strip()))
    body.append(Text(_environment_line(trace), style="dim"))
    if not trace.environment.safe:
        body.append(Text("safe mode was off: the scenario's code ran without restrictions",
                         style="yellow"))
    yield Panel(Group(*body), box=box.HEAVY, border_style="bright_blue", expand=True)


def _environment_line(trace: Trace) -> str:
    env = trace.environment
    parts = [f"torch {env.torch}", f"device {env.device}", f"python {env.python}",
             f"tensortrace {env.tensortrace}"]
    if trace.scenario.source:
        parts.append(trace.scenario.source)
    return " · ".join(parts)


def _legend(view: View, *, variants: bool) -> Text:
    text = Text("", style="dim")
    if variants:
        if view.color:
            text.append("fact", style=DIFFERS_STYLE)
            text.append(" differs between the variants · same storage label = same memory",
                        style="dim")
        else:
            text.append("≠ differs between the variants · same storage label = same memory",
                        style="dim")
        return text
    if view.color:
        text.append("cell", style=CHANGED_STYLE)
        text.append(" changed in this step · ", style="dim")
    else:
        text.append("* changed in this step · ", style="dim")
    text.append("(new) first bound · same storage label = same memory", style="dim")
    return text


def _step_title(step: Step, extra: str = "") -> Rule:
    title = "setup" if step.index == 0 else f"Step {step.index}"
    if step.line is not None:
        title += f" · line {step.line}"
    return Rule(Text(title + extra, style="bold"), align="left", style="bright_blue")


def _code(code: str, line: Optional[int]) -> Syntax:
    return Syntax(
        code.rstrip("\n"),
        "python",
        theme=SYNTAX_THEME,
        line_numbers=line is not None,
        start_line=line or 1,
        word_wrap=True,
        background_color="default",
    )


def _step_parts(
    prev: Optional[Step], shown_prev: Optional[Step], step: Step, view: View
) -> Iterable[RenderableType]:
    """One step; ``shown_prev`` is the step drawn just before it (None: the first drawn)."""
    yield Text("")
    yield _step_title(step)
    if step.code.strip():
        yield _code(step.code, step.line)
    if step.note:
        yield Padding(Markdown(step.note.strip()), (0, 0, 0, 2))
    yield from _state_parts(prev, shown_prev, step, view)
    yield from _outcome_parts(step)
    for graph in step.graphs:
        yield from _graph_parts(graph, view, step)


def _state_parts(
    prev: Optional[Step], shown_prev: Optional[Step], step: Step, view: View
) -> Iterable[RenderableType]:
    names = shown_names(step, view.show)
    if not names:
        return
    before = tensors_by_name(prev)
    now = tensors_by_name(step)
    rows = []
    for name in names:
        changed = changed_fields(before.get(name), now[name])
        if not view.values:
            changed -= VALUE_FIELDS  # not shown, so not a change the reader could see
        if view.changes_only and not changed:
            continue
        rows.append((now[name], changed, name not in before))
    if not rows:
        yield _say("no changes", style="dim")
        return
    yield _state_table(rows, step, view)
    for note in aliasing_notes(prev, step):
        if note.name in names:
            yield _say("↳ " + note.describe(), style="cyan")
    shared = _shared(step, names)
    # Said when it is new to the reader: at the first step drawn, or when it changed.
    if shared and (shown_prev is None or _shared(shown_prev, names) != shared):
        text = Text("shared memory: ", style="dim")
        for position, (label, group) in enumerate(shared):
            if position:
                text.append("; ", style="dim")
            text.append(label, style=_storage_colour(label, view))
            text.append(" holds " + ", ".join(group), style="dim")
        yield Padding(text, (0, 0, 0, 2))


def _shared(step: Step, names: Sequence[str]) -> list:
    return [(label, group) for label, group in storage_groups(step).items()
            if len(group) > 1 and any(n in names for n in group)]


def _storage_colour(label: Optional[str], view: View) -> str:
    if not view.color or not label:
        return ""
    digits = "".join(ch for ch in label if ch.isdigit())
    index = int(digits) - 1 if digits else abs(hash(label))
    return STORAGE_COLOURS[index % len(STORAGE_COLOURS)]


def _columns(states: Sequence[TensorState], view: View) -> List[str]:
    """Columns in order; shape, dtype and device only where they tell something."""
    columns = ["name"]
    if view.values:
        columns.append("values")
    # Values show their shape (a summary says it in words); without values, say it here.
    if not view.values and len({s.shape for s in states}) > 1:
        columns.append("shape")
    if any(format_dtype(s.dtype) != "float32" for s in states):
        columns.append("dtype")
    if len({s.device for s in states}) > 1:
        columns.append("device")
    columns += ["storage", "version", "requires_grad", "is_leaf", "grad_fn"]
    if view.values:
        columns.append("grad")
    return columns


HEADERS = {"version": "ver", "requires_grad": "req_grad", "is_leaf": "leaf"}


def _cell_text(state: TensorState, column: str) -> str:
    if column == "values":
        return format_values(state.values, state.shape)
    if column == "grad":
        return format_values(state.grad, state.shape)
    if column == "shape":
        return format_shape(state.shape)
    if column == "dtype":
        return format_dtype(state.dtype)
    if column == "device":
        return state.device
    if column == "storage":
        return format_storage(state)
    if column == "version":
        return format_version(state.version)
    if column == "grad_fn":
        return format_grad_fn(state.grad_fn)
    return format_flag(getattr(state, column))


def _state_table(rows, step: Step, view: View) -> Padding:
    """One row per tensor; when the columns cannot fit the width, one block per tensor."""
    columns = _columns([r[0] for r in rows], view)
    widths = _column_widths(rows, columns, view)
    if widths is None:
        return _state_cards(rows, columns, view)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  header_style="bold", expand=False)
    for column in columns:
        table.add_column(HEADERS.get(column, column), width=widths[column],
                         no_wrap=column not in WRAPPING_COLUMNS, overflow="fold",
                         justify="right" if column == "version" else "left")
    for state, changed, new in rows:
        cells = []
        for column in columns:
            if column == "name":
                cells.append(_name_cell(state, new, view))
                continue
            text = _cell_text(state, column)
            style = _storage_colour(state.storage, view) if column == "storage" else ""
            if text == "None" and column in ("grad", "grad_fn"):
                style = "dim"
            cell = Text(text, style=style)
            if column in changed and not new:
                _mark(cell, view, CHANGED_STYLE, CHANGED_MARK)
            cells.append(cell)
        table.add_row(*cells)
    return Padding(table, (0, 0, 0, 2))


def _name_cell(state: TensorState, new: bool, view: View) -> Text:
    name = Text(state.name, style="bold")
    if new:
        name.append(" (new)", style="green" if view.color else "")
    if state.same_as is not None:
        name.append(f" (same object as {state.same_as})", style="cyan" if view.color else "")
    if state.kind == "ndarray":
        name.append(" ndarray", style="dim")
    return name


def _column_widths(rows, columns: Sequence[str], view: View) -> Optional[Dict[str, int]]:
    """Width of each column's text, or None when even the narrowest layout is too wide.

    Short columns (labels, flags, names of functions) always get their full
    width; the long ones (names, values, grads) share what is left, each
    wrapping no narrower than its minimum. Deciding this here, rather than
    leaving it to the table, means no column is ever cropped away.
    """
    available = view.width - TABLE_INDENT - 2 * (len(columns) - 1)
    needed: Dict[str, int] = {}
    least: Dict[str, int] = {}
    for column in columns:
        header = len(HEADERS.get(column, column))
        marked = any(column in changed and not new for _, changed, new in rows)
        if column == "name":
            widest = max(_widest_line(_name_cell(s, new, view).plain) for s, _, new in rows)
        else:
            widest = max(_widest_line(_cell_text(r[0], column)) for r in rows) + int(marked)
        needed[column] = max(header, widest)
        floor = WRAPPING_COLUMNS.get(column)
        least[column] = max(header, min(widest, floor)) if floor else needed[column]
    if sum(least.values()) > available:
        return None
    if sum(needed.values()) <= available:
        return needed
    # Fill the wrapping columns like water: the one that needs least is served
    # first, so a short name or grad is never wrapped to make room for a long summary.
    widths = dict(least)
    spare = available - sum(least.values())
    wanting = sorted((c for c in columns if needed[c] > least[c]), key=lambda c: needed[c])
    for position, column in enumerate(wanting):
        fair = spare // (len(wanting) - position)
        grant = min(needed[column] - least[column], fair)
        widths[column] += grant
        spare -= grant
    return widths


def _state_cards(rows, columns: Sequence[str], view: View) -> Padding:
    """The narrow layout: a name, then that tensor's facts on a few short lines."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  header_style="bold", show_header=False, show_lines=True)
    table.add_column("name", no_wrap=False, max_width=max(8, view.width // 4))
    table.add_column("facts", overflow="fold")
    extra = [c for c in ("shape", "dtype", "device") if c in columns]
    for state, changed, new in rows:
        facts = _facts_text(state, view, marked=frozenset() if new else changed,
                            style=CHANGED_STYLE, mark=CHANGED_MARK,
                            storage="storage " + format_storage(state), extra=extra)
        table.add_row(_name_cell(state, new, view), facts)
    return Padding(table, (0, 0, 0, 2))


def _widest_line(text: str) -> int:
    return max((len(line) for line in text.split("\n")), default=0)


def _say(words: str, style: str = "", indent: int = 2) -> Padding:
    """A line of prose under a step, indented so that it wraps inside its margin."""
    return Padding(Text(words, style=style), (0, 0, 0, indent))


def _mark(cell: Text, view: View, style: str, mark: str) -> None:
    if view.color:
        cell.stylize(style)
    else:
        cell.append(mark)


def _outcome_parts(step: Step, label: str = "", expectations: bool = True
                   ) -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    if step.status in ("timeout", "killed"):
        words = "ran out of time" if step.status == "timeout" else "was killed"
        detail = f": {step.error.message}" if step.error is not None and step.error.message else ""
        yield _say(f"✗ {prefix}the step {words}{detail}", style="bold red")
    elif step.error is not None:
        yield _error_panel(step.error, declared=declared_raise_met(step), label=label)
        if declared_raise_met(step):
            yield _say(f"✓ {prefix}raised {step.error.type}, as declared", style="green")
    for warning in step.warnings:
        where = f" (line {warning.line})" if warning.line is not None else ""
        yield _say(f"⚠ {prefix}{warning.category}: {warning.message}{where}", style="yellow")
    if declared_warn_met(step):
        yield _say(f"✓ {prefix}warned {step.warns.type}, as declared", style="green")
    if step.stdout:
        yield _stdout_block(step.stdout, prefix)
    for result in step.expectations if expectations else ():
        yield from _expectation_lines(result, prefix)
    for failure in _unshown_failures(step):
        yield _say(f"✗ {prefix}{failure}", style="bold red")


def _unshown_failures(step: Step) -> List[str]:
    """Failures not already said above (a failed expectation, a timeout's own message)."""
    failed_exprs = [r.expr for r in step.expectations if not r.passed]
    said = step.error.message if step.error is not None and step.status != "raised" else None
    return [f for f in step.failures
            if f != said and not any(expr in f for expr in failed_exprs)]


def _error_panel(error: ErrorInfo, *, declared: bool, label: str = "") -> Padding:
    body: List[RenderableType] = [Text(error.message or "(no message)")]
    if error.explanation is not None:
        ex = error.explanation
        body.append(Text(""))
        body.append(Text(ex.title, style="bold"))
        if ex.what:
            body.append(Markdown(ex.what.strip()))
        if ex.fix:
            body.append(Markdown("**Fix:** " + ex.fix.strip()))
    title = error.type
    if label:
        title = f"{label}: {title}"
    if error.line is not None:
        title += f" (line {error.line})"
    if declared:
        title += " — as declared"
    panel = Panel(Group(*body), title=Text(title, style="bold red"), title_align="left",
                  border_style="red", padding=(0, 1))
    return Padding(panel, (0, 0, 0, 2))


def _stdout_block(stdout: str, prefix: str) -> Padding:
    text = Text(f"{prefix}printed:\n", style="dim")
    lines = stdout.rstrip("\n").split("\n")
    for position, line in enumerate(lines):
        text.append("│ " + line + ("\n" if position < len(lines) - 1 else ""), style="dim")
    return Padding(text, (0, 0, 0, 2))


def _expectation_lines(result: ExpectationResult, prefix: str) -> Iterable[Padding]:
    if result.passed:
        yield _say(f"✓ {prefix}{result.expr}", style="green")
        return
    yield _say(f"✗ {prefix}{result.expr}", style="bold red")
    if result.error is not None:
        yield _say(f"raised {result.error}", style="red", indent=6)
    elif result.op is not None:
        yield _say(f"{result.left} {result.op} {result.right} is not true", style="red", indent=6)
    elif result.value is not None:
        yield _say(f"it evaluated to {result.value}", style="red", indent=6)


# --- graphs ----------------------------------------------------------------------


def _graph_parts(
    graph: Graph, view: View, step: Optional[Step] = None, label: str = ""
) -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    if graph.root is None:
        head = Text(f"{prefix}graph of {graph.tensor}", style="bold")
        head.append(": " + NO_GRAD_FN, style="dim")
        yield Padding(head, (0, 0, 0, 2))
        return
    yield Padding(graph_tree(graph, view, step, title=f"{prefix}graph of {graph.tensor}"),
                  (0, 0, 0, 2))
    if graph.truncated:
        yield _say(TRUNCATED, style="yellow")


def graph_tree(graph: Graph, view: View, step: Optional[Step] = None, *, title: str = "") -> Tree:
    """A rich Tree built from the outline, iteratively, never deeper than the width allows.

    The root is the tensor itself; below it, its grad_fn and on back to the
    leaves, where each ``AccumulateGrad`` says which ``.grad`` it fills (and,
    when short, what that grad now holds).
    """
    label = Text(title or graph.tensor, style="bold")
    label.append("  (backward: from the tensor to its leaves)", style="dim")
    root = Tree(label, guide_style="bright_black")
    grads = {t.name: t.grad for t in step.tensors} if step is not None else {}
    outline = graph_outline(graph, max_depth=view.tree_depth - 1)
    parents: List[Tree] = [root]
    for line in outline.lines:
        del parents[line.depth + 1:]
        node = parents[-1].add(_tree_label(line, grads))
        parents.append(node)
    return root


def _tree_label(line: OutlineLine, grads: Dict[str, object]) -> Text:
    if line.kind == "node":
        text = Text(line.name, style="bold green" if line.leaf is not None else "")
        if line.leaf is not None:
            text.append(" → ")
            text.append(f"{line.leaf}.grad", style="bold")
            grad = grads.get(line.leaf)
            if grad is not None:
                words = format_values(grad)
                if "\n" not in words and len(words) <= GRAD_IN_TREE_MAX:
                    text.append(f" = {words}", style="dim")
        if line.shared:
            text.append(f" ({line.id})", style="dim")
        return text
    if line.kind == "chain":
        return Text(line_text(line), style="bold")
    if line.kind == "missing":
        return Text(line_text(line), style="red")
    return Text(line_text(line), style="dim")


# --- variants, side by side ------------------------------------------------------------


def _variant_parts(traces: List[Trace], view: View, *, legend: bool) -> Iterable[RenderableType]:
    names = [variant_name(t, i) for i, t in enumerate(traces)]
    first = traces[0]
    title = Text(first.scenario.title, style="bold")
    title.append("  (variants: " + ", ".join(names) + ", side by side)", style="cyan")
    body: List[RenderableType] = [title]
    if first.scenario.description:
        body.append(Markdown(first.scenario.description.strip()))
    body.append(Text(_environment_line(first), style="dim"))
    if any(not t.environment.safe for t in traces):
        body.append(Text("safe mode was off: the scenario's code ran without restrictions",
                         style="yellow"))
    yield Panel(Group(*body), box=box.HEAVY, border_style="bright_blue", expand=True)
    if legend:
        yield _legend(view, variants=True)
    per_trace = [steps_by_index(t) for t in traces]
    previous: List[Optional[Step]] = [None] * len(traces)
    first = True
    for index in step_indexes(traces):
        steps = [s.get(index) for s in per_trace]
        prevs = previous
        previous = [s if s is not None else p for s, p in zip(steps, prevs)]
        shown = next(s for s in steps if s is not None)
        if not _wanted_variant(steps, view):
            continue
        yield from _variant_step(shown, steps, prevs, names, view, first)
        first = False
    differences = variant_differences(traces)
    yield Text("")
    yield Text("What differs between " + " and ".join(names) + ":", style="bold")
    if not differences:
        yield _say("nothing: every step and every tensor ended the same", style="dim")
    for line in differences:
        yield _say("≠ " + line, style="yellow")
    for name, trace in zip(names, traces):
        yield from _trace_footer(trace, label=name)


def _wanted_variant(steps: Sequence[Optional[Step]], view: View) -> bool:
    return any(s is not None and _wanted(s, view) for s in steps)


def _variant_step(shown: Step, steps, prevs, names, view: View, first: bool
                  ) -> Iterable[RenderableType]:
    yield Text("")
    yield _step_title(shown)
    codes = [s.code if s is not None else None for s in steps]
    if len({c for c in codes if c is not None}) == 1:
        if shown.code.strip():
            yield _code(shown.code, shown.line)
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
        for name in names:
            table.add_column(name, header_style="bold cyan", ratio=1)
        table.add_row(*[_code(c, None) if c is not None else Text("(not run)", style="dim")
                        for c in codes])
        yield Padding(table, (0, 0, 0, 2))
    notes = [s.note for s in steps if s is not None and s.note]
    if notes and len(set(notes)) == 1:
        yield Padding(Markdown(notes[0].strip()), (0, 0, 0, 2))
    else:
        for name, step in zip(names, steps):
            if step is not None and step.note:
                yield Padding(Markdown(f"*{name}:* " + step.note.strip()), (0, 0, 0, 2))
    yield _variant_table(steps, prevs, names, view, first)
    for name, step, prev in zip(names, steps, prevs):
        if step is None:
            continue
        for note in aliasing_notes(prev, step):
            yield _say(f"↳ {name}: " + note.describe(), style="cyan")
    for name, step in zip(names, steps):
        if step is not None:
            yield from _outcome_parts(step, label=name, expectations=False)
    for name, result in merged_expectations(steps, names):
        yield from _expectation_lines(result, f"{name}: " if name else "")
    for name, step in zip(names, steps):
        for graph in step.graphs if step is not None else ():
            yield from _graph_parts(graph, view, step, label=name)


def _variant_table(steps, prevs, names, view: View, first: bool) -> Padding:
    """One row per tensor, one column per variant.

    A tensor that is the same in every variant and did not change in this step
    is one quiet line, except at the first step drawn, so that the eye goes to
    what moved and what differs.
    """
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  header_style="bold", show_lines=True)
    table.add_column("name", no_wrap=False)
    for name in names:
        table.add_column(name, header_style="bold cyan", ratio=1, overflow="fold")
    outcomes = [outcome(s) for s in steps]
    row = [Text("outcome", style="dim")]
    for text in outcomes:
        cell = Text(text, style="red" if text.startswith("raised") else "")
        if len(set(outcomes)) > 1:
            _mark(cell, view, DIFFERS_STYLE, DIFFERS_MARK)
        row.append(cell)
    table.add_row(*row)
    present = [s for s in steps if s is not None]
    override = view.show
    names_in_order: Dict[str, None] = {}
    for step in present:
        for tensor_name in shown_names(step, override):
            names_in_order.setdefault(tensor_name, None)
    for tensor_name in names_in_order:
        differs = differing_fields(steps, tensor_name)
        changed_any = False
        cells = [Text(tensor_name, style="bold")]
        for step, prev in zip(steps, prevs):
            state = tensors_by_name(step).get(tensor_name) if step is not None else None
            if state is None:
                cells.append(Text("—", style="dim"))
                continue
            previous = tensors_by_name(prev).get(tensor_name)
            changed_any = changed_any or bool(changed_fields(previous, state))
            cells.append(_variant_cell(step, state, differs, view))
        if not changed_any and (view.changes_only or first is False and not differs):
            if view.changes_only:
                continue
            cells = [cells[0]] + [Text("unchanged", style="dim") for _ in names]
        table.add_row(*cells)
    return Padding(table, (0, 0, 0, 2))


def _variant_cell(step: Step, state: TensorState, differs, view: View) -> Text:
    """Facts of one tensor in one variant; the facts that differ between variants marked."""
    partners = [n for n in storage_groups(step).get(state.storage, ()) if n != state.name]
    storage = format_storage(state) + (f" (with {', '.join(partners)})" if partners else "")
    extra = [f for f in ("shape", "dtype", "device") if f in differs]
    return _facts_text(state, view, marked=differs, style=DIFFERS_STYLE, mark=DIFFERS_MARK,
                       storage=storage, extra=extra)


def _facts_text(
    state: TensorState, view: View, *, marked, style: str, mark: str, storage: str, extra
) -> Text:
    """A tensor's facts as a few short lines (for variant cells and narrow terminals)."""
    lines = []
    if view.values:
        lines.append([("values", format_values(state.values, state.shape))])
    texts = {"shape": format_shape(state.shape), "dtype": format_dtype(state.dtype),
             "device": state.device}
    if extra:
        lines.append([(f, texts[f]) for f in extra])
    lines.append([("storage", storage), ("version", "version " + format_version(state.version))])
    lines.append([("requires_grad", "requires_grad " + format_flag(state.requires_grad)),
                  ("is_leaf", "leaf " + format_flag(state.is_leaf))])
    lines.append([("grad_fn", "grad_fn " + format_grad_fn(state.grad_fn))])
    if view.values:
        lines.append([("grad", "grad " + format_values(state.grad, state.shape))])
    text = Text()
    for number, parts in enumerate(lines):
        if number:
            text.append("\n")
        for position, (field, words) in enumerate(parts):
            if position:
                text.append(" · ", style="dim")
            colour = _storage_colour(state.storage, view) if field == "storage" else ""
            piece = Text(words, style=colour)
            if field in marked:
                _mark(piece, view, style, mark)
            text.append_text(piece)
    return text


# --- ends ---------------------------------------------------------------------------


def _trace_footer(trace: Trace, label: str = "") -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    for notice in trace.notices:
        yield Text(f"{prefix}note: {notice}", style="yellow")
    if trace.aborted is not None:
        yield Text(f"{prefix}the run stopped early: {trace.aborted}", style="bold red")
    yield _summary_line(trace, prefix)


def _summary_line(trace: Trace, prefix: str) -> Text:
    steps = trace.steps
    raised = [s for s in steps if s.error is not None]
    declared = [s for s in raised if declared_raise_met(s)]
    results = [r for s in ((trace.setup,) if trace.setup else ()) + tuple(steps)
               for r in s.expectations]
    passed = sum(1 for r in results if r.passed)
    failed = len(results) - passed
    parts = [plural(len(steps), "step")]
    if raised:
        words = f"{len(raised)} raised"
        if declared:
            words += f" ({len(declared)} as declared)"
        parts.append(words)
    if results:
        parts.append(f"expectations: {passed} passed, {failed} failed")
    text = Text(prefix + " · ".join(parts) + " · ", style="bold")
    if trace.passed:
        text.append("PASSED", style="bold green")
    else:
        text.append("FAILED", style="bold red")
    return text
