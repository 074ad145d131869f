"""Variants of one scenario in the terminal, side by side.

One table per step with a column per variant, the facts that differ between
variants highlighted (marked ``≠`` without colour), and at the end what
differs between them in words. The choices of what to show come from
``layout.py`` and ``compare.py``; the pieces are ``console_parts.py``'s.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, List, Optional, Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from .prose import note_text
from ..trace import Step, TensorState, Trace
from .compare import (
    differing_fields,
    merged_expectations,
    step_indexes,
    steps_by_index,
    variant_differences,
    variant_name,
)
from .console_parts import (
    DIFFERS_MARK,
    DIFFERS_STYLE,
    View,
    code_syntax,
    expectation_lines,
    facts_text,
    graph_parts,
    header_panel,
    legend as legend_line,
    mark_cell,
    outcome_parts,
    say,
    step_title,
    trace_footer,
)
from .facts import aliasing_notes, changed_fields, tensors_by_name
from .layout import (
    any_step_wanted,
    new_predictions,
    run_columns,
    variant_codes,
    variant_notes,
    variant_row_names,
)
from .text import outcome, storage_with_partners


# Facts a variant cell adds in every step of a run where the run's columns have them.
RUN_EXTRAS = ("stride", "contiguous", "retains_grad")
# The room a column of a table takes besides its text: the divider and the padding.
COLUMN_GAP = 3
# Variants narrower than this are stacked rather than squeezed side by side.
LEAST_VARIANT_COLUMN = 20


def variant_parts(
    traces: List[Trace], view: View, *, legend: Optional[FrozenSet[str]]
) -> Iterable[RenderableType]:
    """The variants of one scenario (``traces``), drawn as one page.

    ``legend`` is the set of extra marks the legend explains; None: no legend.
    """
    names = [variant_name(t, i) for i, t in enumerate(traces)]
    title = Text(traces[0].scenario.title, style="bold")
    title.append("  (variants: " + ", ".join(names) + ", side by side)", style="cyan")
    yield header_panel(traces[0], title, safe=all(t.environment.safe for t in traces))
    if legend is not None:
        yield legend_line(view, variants=True, marks=legend)
    columns = run_columns(traces, view.options)
    extras = tuple(f for f in RUN_EXTRAS if f in columns)
    per_trace = [steps_by_index(t) for t in traces]
    previous: List[Optional[Step]] = [None] * len(traces)
    first = True
    for index in step_indexes(traces):
        steps = [s.get(index) for s in per_trace]
        prevs = previous
        previous = [s if s is not None else p for s, p in zip(steps, prevs)]
        shown = next(s for s in steps if s is not None)
        if not any_step_wanted(steps, view.options.steps):
            continue
        yield from _variant_step(shown, steps, prevs, names, view, first, extras)
        first = False
    differences = variant_differences(traces)
    yield Text("")
    yield Text("What differs between " + " and ".join(names) + ":", style="bold")
    if not differences:
        yield say("nothing: every step and every tensor ended the same", style="dim")
    for line in differences:
        yield say("≠ " + line, style="yellow")
    for name, trace in zip(names, traces):
        yield from trace_footer(trace, label=name)


def _variant_step(
    shown: Step,
    steps: Sequence[Optional[Step]],
    prevs: Sequence[Optional[Step]],
    names: Sequence[str],
    view: View,
    first: bool,
    extras: Sequence[str],
) -> Iterable[RenderableType]:
    yield Text("")
    yield step_title(shown)
    common, codes = variant_codes(steps)
    if common is not None:
        if common.strip():
            yield code_syntax(common, shown.line, view.color)
    else:
        yield _variant_codes(codes, names, view)
    for name, note in variant_notes(steps, names):
        drawn = note_text(note.strip(), lead=f"{name}:") if name else note_text(note.strip())
        yield Padding(drawn, (0, 0, 0, 2))
    yield _variant_table(steps, prevs, names, view, first, extras)
    for name, step, prev in zip(names, steps, prevs):
        if step is None:
            continue
        for note in aliasing_notes(prev, step):
            yield say(f"↳ {name}: " + note.describe(), style="cyan")
    for name, step in zip(names, steps):
        if step is not None:
            yield from outcome_parts(step, label=name, expectations=False)
    for name, result in merged_expectations(steps, names):
        yield from expectation_lines(result, f"{name}: " if name else "")
    for name, step, prev in zip(names, steps, prevs):
        for message in new_predictions(prev, step) if step is not None else ():
            yield say(f"⚠ {name}: predicted: " + message, style="bold yellow")
    for name, step in zip(names, steps):
        for graph in step.graphs if step is not None else ():
            yield from graph_parts(graph, view, step, label=name)


def _variant_codes(
    codes: Sequence[Optional[str]], names: Sequence[str], view: View
) -> RenderableType:
    """Each variant's code: side by side when every line fits its column, else one after another.

    Code is the thing being compared, so it is wrapped, never cut short.
    """
    column = _column_width(view.width - 2, 0, len(names))
    lines = [line for code in codes if code is not None for line in code.rstrip("\n").split("\n")]
    if all(len(line) <= column for line in list(lines) + list(names)):
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
        for name in names:
            table.add_column(name, header_style="bold cyan", ratio=1)
        table.add_row(
            *[
                code_syntax(c, None, view.color)
                if c is not None
                else Text("(not run)", style="dim")
                for c in codes
            ]
        )
        return Padding(table, (0, 0, 0, 2))
    blocks: List[RenderableType] = []
    for name, code in zip(names, codes):
        blocks.append(Padding(Text(name + ":", style="bold cyan"), (0, 0, 0, 2)))
        body = (
            code_syntax(code, None, view.color)
            if code is not None
            else Text("(not run)", style="dim")
        )
        blocks.append(Padding(body, (0, 0, 0, 4)))
    return Group(*blocks)


def _column_width(available: int, name_width: int, count: int) -> int:
    """The text width each of ``count`` equal columns gets beside a name column."""
    gaps = COLUMN_GAP * (count - 1) + (COLUMN_GAP if name_width else 0)
    return max(1, (available - name_width - gaps) // count)


def _variant_table(
    steps: Sequence[Optional[Step]],
    prevs: Sequence[Optional[Step]],
    names: Sequence[str],
    view: View,
    first: bool,
    extras: Sequence[str],
) -> RenderableType:
    """One row per tensor, one column per variant.

    A tensor that is the same in every variant and did not change in this step
    is one quiet line, except at the first step drawn, so that the eye goes to
    what moved and what differs. When a column would be narrower than its
    longest word, the variants of each tensor are stacked instead.
    """
    rows: List[List[Text]] = []
    outcomes = [outcome(s) for s in steps]
    row = [Text("outcome", style="dim")]
    for text in outcomes:
        cell = Text(text, style="red" if text.startswith("raised") else "")
        if len(set(outcomes)) > 1:
            mark_cell(cell, view, DIFFERS_STYLE, DIFFERS_MARK)
        row.append(cell)
    rows.append(row)
    changes_only = view.options.changes_only
    for tensor_name in variant_row_names(steps, view.show):
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
            cells.append(_variant_cell(step, state, differs, view, extras))
        if not changed_any and (changes_only or first is False and not differs):
            if changes_only:
                continue
            cells = [cells[0]] + [Text("unchanged", style="dim") for _ in names]
        rows.append(cells)
    name_width = max(len(word) for row in rows for word in row[0].plain.split())
    column = _column_width(view.width - 2, name_width, len(names))
    longest = max(len(word) for row in rows for cell in row[1:] for word in cell.plain.split())
    if column < max(LEAST_VARIANT_COLUMN, longest, *(len(name) for name in names)):
        return _stacked_variants(rows, names)
    # Widths are set here rather than left to the table, which would crop the
    # last column away when a long name takes the room.
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="bold",
        show_lines=True,
    )
    table.add_column("name", no_wrap=False, width=name_width)
    for name in names:
        table.add_column(name, header_style="bold cyan", width=column, overflow="fold")
    for cells in rows:
        table.add_row(*cells)
    return Padding(table, (0, 0, 0, 2))


def _stacked_variants(rows: Sequence[Sequence[Text]], names: Sequence[str]) -> Group:
    """The narrow layout: each tensor's name on its own line, then each variant's facts below."""
    label_width = max(len(name) for name in names)
    blocks: List[RenderableType] = []
    for position, cells in enumerate(rows):
        if position:
            blocks.append(Text(""))
        head = cells[0].copy()
        head.overflow = "ellipsis"
        blocks.append(Padding(head, (0, 0, 0, 2)))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(width=label_width, style="bold cyan", no_wrap=True, overflow="ellipsis")
        grid.add_column(overflow="fold")
        for name, cell in zip(names, cells[1:]):
            grid.add_row(name, cell)
        blocks.append(Padding(grid, (0, 0, 0, 4)))
    return Group(*blocks)


def _variant_cell(
    step: Step, state: TensorState, differs: frozenset, view: View, extras: Sequence[str]
) -> Text:
    """Facts of one tensor in one variant; the facts that differ between variants marked."""
    extra = [f for f in ("shape", "dtype", "device") if f in differs] + list(extras)
    return facts_text(
        state,
        view,
        marked=differs,
        style=DIFFERS_STYLE,
        mark=DIFFERS_MARK,
        storage=storage_with_partners(step, state),
        extra=extra,
    )
