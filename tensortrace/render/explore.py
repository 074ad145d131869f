"""The pieces ``tensortrace explore`` draws, as rich renderables.

The explorer (``tensortrace/tui/``) lays these out in its panes; they are the
console renderer's own pieces (``console_parts.py``), cut per pane, so what a
step says in the explorer is what ``run`` prints for it: the same change
marks, storage colours, error explanations and autograd trees. Nothing here
knows about the terminal or the keys.

The tensor table is given as rows of cells, not as one table, because the
explorer lets the reader select a row (to follow its storage).
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from .prose import note_text
from ..trace import Step, Trace
from .console import ops_parts, shared_memory_line
from .console_table import HEADERS
from .console_parts import (
    CHANGED_MARK,
    CHANGED_STYLE,
    View,
    code_syntax,
    facts_text,
    graph_parts,
    mark_cell,
    outcome_parts,
    say,
    step_title,
    storage_colour,
)
from .facts import aliasing_notes, changed_fields, tensors_by_name
from .layout import Row, shared_storages
from .options import RenderOptions
from .text import fact_text, format_storage, one_line

# A values or grad cell is squeezed onto one line of at most this many characters.
CELL_ROOM = 24
# The mark beside a tensor on the storage being followed (also without colour).
FOLLOW_MARK = "●"
FOLLOW_STYLE = "bold underline"


def explorer_view(width: int, color: bool) -> View:
    """The view the explorer draws with: every fact, at the pane's width."""
    return View(RenderOptions(), width, color)


def step_head(step: Step, view: View) -> RenderableType:
    """The step's title, its code with line numbers, and its note."""
    parts: List[RenderableType] = [step_title(step)]
    if step.code.strip():
        parts.append(code_syntax(step.code, step.line))
    if step.note:
        parts.append(Padding(note_text(step.note.strip()), (0, 0, 0, 2)))
    return Group(*parts)


def column_headers(columns: Sequence[str]) -> List[str]:
    """The table's headers, spelled as the console table spells them."""
    return [HEADERS.get(c, c) for c in columns]


def tensor_cells(
    rows: Sequence[Row], columns: Sequence[str], view: View, follow: Optional[str] = None
) -> List[List[Text]]:
    """One list of cells per row: a changed cell marked, a followed storage's rows marked ``●``."""
    table = []
    for state, changed, new in rows:
        followed = follow is not None and state.storage == follow
        cells = []
        for column in columns:
            if column == "name":
                cells.append(_name_cell(state, new, followed, view))
                continue
            text = fact_text(state, column)
            if column in ("values", "grad"):
                text = one_line(text, CELL_ROOM)
            style = storage_colour(state.storage, view) if column == "storage" else ""
            if text == "None" and column in ("grad", "grad_fn"):
                style = "dim"
            cell = Text(text, style=style, no_wrap=True, overflow="ellipsis")
            if column == "storage" and followed:
                cell.stylize(FOLLOW_STYLE)
            if column in changed and not new:
                mark_cell(cell, view, CHANGED_STYLE, CHANGED_MARK)
            cells.append(cell)
        table.append(cells)
    return table


def _name_cell(state, new: bool, followed: bool, view: View) -> Text:
    name = Text(FOLLOW_MARK + " " if followed else "  ", style="bold")
    name.append(state.name, style="bold")
    if new:
        name.append(" (new)", style="green" if view.color else "")
    if state.same_as is not None:
        name.append(f" (= {state.same_as})", style="cyan" if view.color else "")
    return name


# The facts a tensor's card adds to values, storage, version, flags and grad.
CARD_EXTRA = ("shape", "dtype", "device", "stride", "contiguous", "retains_grad")


def tensor_card(
    prev: Optional[Step], step: Step, name: Optional[str], view: View
) -> RenderableType:
    """Every fact of the selected tensor in full (values not cut).

    Changes are marked as in the table.
    """
    state = tensors_by_name(step).get(name) if name is not None else None
    if state is None:
        return Text("")
    before = tensors_by_name(prev).get(name)
    marked = frozenset() if before is None else changed_fields(before, state)
    head = Text("selected: ", style="dim")
    head.append(state.name, style="bold")
    head.append(f"  {state.kind}" if state.kind != "tensor" else "", style="dim")
    facts = facts_text(
        state,
        view,
        marked=marked,
        style=CHANGED_STYLE,
        mark=CHANGED_MARK,
        storage="storage " + format_storage(state),
        extra=CARD_EXTRA,
    )
    return Padding(Group(head, Padding(facts, (0, 0, 0, 2))), (0, 0, 0, 2))


def under_table(
    prev: Optional[Step], step: Step, names: Sequence[str], view: View
) -> RenderableType:
    """What the console says under a step's table: changes through shared memory, who shares."""
    parts: List[RenderableType] = []
    for note in aliasing_notes(prev, step):
        if note.name in names:
            parts.append(say("↳ " + note.describe(), style="cyan"))
    shared = shared_storages(step, names)
    if shared:
        parts.append(shared_memory_line(shared, view))
    return Group(*parts)


def follow_line(
    label: str,
    names: Sequence[str],
    touched: Sequence[Tuple[int, Sequence[str]]],
    current: int,
    view: View,
) -> Text:
    """Which storage is followed, who lives on it now, and the steps that touched it."""
    text = Text(f"{FOLLOW_MARK} following ", style="bold")
    text.append(label, style=storage_colour(label, view) or "bold")
    text.append(": " + (", ".join(names) if names else "nothing bound on it at this step"))
    text.append(" · touched at ")
    if not touched:
        text.append("no step")
    for position, (index, _) in enumerate(touched):
        if position:
            text.append(", ")
        word = "setup" if index == 0 else str(index)
        text.append(word, style="reverse" if index == current else "")
    return text


def outcome(step: Step, iterations: str = "first") -> RenderableType:
    """The step's errors (with their explanations), warnings, printed output and expectations,
    then what it ran, where its gradients flowed, and the backwards predicted to fail; a loop's
    passes folded as ``run`` folds them (``iterations="all"``: each in full)."""
    parts: List[RenderableType] = list(outcome_parts(step))
    parts.extend(_extra_facts(step, iterations))
    return Group(*parts)


def _extra_facts(step: Step, iterations: str) -> Iterable[RenderableType]:
    yield from ops_parts(step, "calls", iterations)
    for prediction in step.predictions:
        yield say("⚠ predicted: " + prediction.message, style="bold yellow")


def graphs(step: Step, view: View) -> RenderableType:
    """The autograd trees the step drew, as the console draws them (with what each node saved)."""
    parts: List[RenderableType] = []
    for graph in step.graphs:
        parts.extend(graph_parts(graph, view, step))
    if not parts:
        parts.append(
            say("no graph drawn at this step (a scenario asks with 'graph:')", style="dim")
        )
    return Group(*parts)


def no_match(text: str) -> Text:
    """Said in place of the table when the filter lets no tensor through."""
    return Text(f"  no tensor at this step has {text!r} in its name", style="dim")


def say_nothing() -> Text:
    """Said when the trace recorded no step at all."""
    return Text("This trace recorded no step.", style="bold")


def trace_title(trace: Trace, position: int, count: int) -> Text:
    """The scenario's title, and which of the file's traces this is when there are several."""
    text = Text(one_line(trace.scenario.title, 200), style="bold")
    if count > 1:
        what = f"variant {trace.scenario.variant}" if trace.scenario.variant else "trace"
        text.append(f"  ({what}, {position + 1} of {count})", style="cyan")
    if not trace.environment.safe:
        text.append("  safe mode was off", style="yellow")
    return text


__all__ = [
    "CELL_ROOM",
    "FOLLOW_MARK",
    "column_headers",
    "explorer_view",
    "follow_line",
    "graphs",
    "tensor_card",
    "no_match",
    "outcome",
    "say_nothing",
    "step_head",
    "tensor_cells",
    "trace_title",
    "under_table",
]
