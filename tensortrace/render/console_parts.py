"""Pieces of the terminal rendering that a single trace and variants side by side share.

A console that draws into a string, the styles and marks, the header panel,
step titles and code, what a step did (errors, warnings, printed output,
expectations), autograd trees, and the closing summary. ``console.py`` and
``console_variants.py`` arrange these pieces; neither draws them differently.
"""

from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Optional

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree

from .console_lines import TextLine, TitleLine
from .plaincode import TAB_SIZE, plain_code
from .prose import prose
from ..trace import ErrorInfo, ExpectationResult, Graph, Step, TensorState, Trace
from .structs import record
from .layout import QUIET_ROWS, summary_parts, unshown_failures
from .options import RenderOptions
from .outline import NO_GRAD_FN, TRUNCATED, OutlineLine, graph_outline, line_text
from .text import (
    as_int,
    declared_raise_met,
    declared_warn_met,
    format_dtype,
    format_flag,
    format_grad_fn,
    format_shape,
    format_stride,
    format_values,
    format_version,
    saved_text,
    step_place,
)
from .facts import is_contiguous

if TYPE_CHECKING:
    from rich.syntax import Syntax

STORAGE_COLOURS = (
    "cyan",
    "magenta",
    "green",
    "yellow",
    "blue",
    "bright_red",
    "bright_green",
    "bright_magenta",
    "bright_cyan",
    "bright_yellow",
)
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


@record
class View:
    """What the renderer was asked for, with the width and colour resolved once."""

    options: RenderOptions
    width: int
    color: bool

    @property
    def show(self) -> Optional[tuple]:
        return self.options.show

    @property
    def values(self) -> bool:
        return self.options.values

    @property
    def full(self) -> bool:
        """Values element by element, not in one line past a few (``--values full``)."""
        return self.options.full_values

    @property
    def tree_depth(self) -> int:
        return max(4, min(40, (self.width - TREE_LABEL_ROOM) // TREE_COLUMNS_PER_LEVEL))


def header_panel(trace: Trace, title: Text, *, safe: bool = True) -> Panel:
    """The scenario's title (as the caller styled it), description and environment, framed."""
    body: List[RenderableType] = [title]
    if trace.scenario.description:
        body.append(prose(trace.scenario.description.strip()))
    body.append(Text(environment_line(trace), style="dim"))
    if not safe:
        body.append(Text("safe mode was off: the code ran without restrictions", style="yellow"))
    return Panel(Group(*body), box=box.HEAVY, border_style="bright_blue", expand=True)


def environment_line(trace: Trace) -> str:
    env = trace.environment
    parts = [
        f"torch {env.torch}",
        f"device {env.device}",
        f"python {env.python}",
        f"tensortrace {env.tensortrace}",
    ]
    if trace.scenario.source:
        parts.append(trace.scenario.source)
    return " · ".join(parts)


def legend(view: View, *, variants: bool, marks: FrozenSet[str] = frozenset()) -> Text:
    """The marks the page uses, each explained; ``marks`` adds ``offset`` and ``dash`` when used."""
    text = Text("", style="dim")
    if variants:
        if view.color:
            text.append("fact", style=DIFFERS_STYLE)
            text.append(" differs between the variants · ", style="dim")
        else:
            text.append("≠ differs between the variants · ", style="dim")
    else:
        if view.color:
            text.append("cell", style=CHANGED_STYLE)
            text.append(" changed in this step · ", style="dim")
        else:
            text.append("* changed in this step · ", style="dim")
        text.append("(new) first bound · ", style="dim")
    text.append("same storage label = same memory", style="dim")
    if "offset" in marks:
        text.append(" · S1+2 = a view 2 elements into S1", style="dim")
    if "dash" in marks:
        unbound = " or not bound in that variant" if variants else ""
        text.append(f" · — = not available{unbound}", style="dim")
    if "refused" in marks:
        text.append(" · ? = PyTorch refused to give it (the JSON keeps why)", style="dim")
    if "temporaries" in marks:
        text.append(
            " · label numbers the tables skip (S3, then S6) went to unnamed temporaries",
            style="dim",
        )
    if "quiet" in marks:
        text.append(
            f" · past {QUIET_ROWS} tensors, a step draws only the rows that changed"
            " and names the rest (--all-rows draws them all)",
            style="dim",
        )
    return text


def step_title(step: Step, extra: str = "") -> RenderableType:
    """ "Step 2 · line 19 ────": a rule with the step's number and line (``TitleLine``)."""
    title = "setup" if step.index == 0 else f"Step {step.index}"
    place = step_place(step)
    if place:  # "line 19", or "cell 3, line 1" for a notebook's step
        title += f" · {place}"
    return TitleLine(title + extra)


def code_syntax(code: str, line: Optional[int], color: bool = True) -> RenderableType:
    """The step's code, highlighted as Python where colour is shown; drawn by ``plaincode``, or,
    where only rich draws it right, by ``Syntax`` itself (with the plain-text lexer without colour).
    """
    code = code.rstrip("\n")
    line = as_int(line) if line is not None else None  # a line that is not a number: none shown
    drawn = plain_code(code, line, highlighted if color else None)
    if drawn is not None:
        return drawn
    from rich.syntax import Syntax  # pygments: imported only where it is drawn

    return Syntax(
        code,
        _python_syntax().lexer if color else "text",
        theme=SYNTAX_THEME,
        line_numbers=line is not None,
        start_line=line or 1,
        word_wrap=True,
        background_color="default",
    )


@functools.lru_cache(maxsize=None)
def _python_syntax() -> "Syntax":
    """A ``Syntax`` whose Python lexer and theme are made once, for its ``highlight``: given their
    names, ``Syntax`` looks the lexer up each time it is asked for it, and builds the theme again
    for every step's code."""
    from pygments.lexers import get_lexer_by_name
    from rich.syntax import Syntax

    lexer = get_lexer_by_name("python", stripnl=False, ensurenl=True, tabsize=TAB_SIZE)
    return Syntax(
        "",
        lexer,
        theme=Syntax.get_theme(SYNTAX_THEME),
        word_wrap=True,
        background_color="default",
    )


def highlighted(source: str) -> Text:
    """``source`` highlighted as Python, by the one ``Syntax``: a copy of the ``Text`` kept for
    each recent source, since a loop's lines come back at every pass (snoop) and pygments'
    lexer tries its patterns one by one at every token."""
    return _highlighted(source).copy()


@functools.lru_cache(maxsize=512)
def _highlighted(source: str) -> Text:
    return _python_syntax().highlight(source)


def storage_colour(label: Optional[str], view: View) -> str:
    if not view.color or not label:
        return ""
    # decimal digits only: "²" is a digit to str.isdigit, but int() refuses it
    digits = "".join(ch for ch in label if ch.isdecimal())
    index = int(digits) - 1 if digits else abs(hash(label))
    return STORAGE_COLOURS[index % len(STORAGE_COLOURS)]


def say(words: str, style: str = "", indent: int = 2) -> RenderableType:
    """A line of prose under a step, indented so that it wraps inside its margin."""
    return TextLine(words, style, indent)


def mark_cell(cell: Text, view: View, style: str, mark: str) -> None:
    """Highlight a cell in colour; without colour, append the mark that stands for it."""
    if view.color:
        cell.stylize(style)
    else:
        cell.append(mark)


def outcome_parts(
    step: Step, label: str = "", expectations: bool = True
) -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    if step.status in ("timeout", "killed"):
        words = "ran out of time" if step.status == "timeout" else "was killed"
        detail = f": {step.error.message}" if step.error is not None and step.error.message else ""
        yield say(f"✗ {prefix}the step {words}{detail}", style="bold red")
    elif step.error is not None:
        yield error_panel(step.error, declared=declared_raise_met(step), label=label)
        if declared_raise_met(step):
            yield say(f"✓ {prefix}raised {step.error.type}, as declared", style="green")
    for warning in step.warnings:
        where = f" (line {warning.line})" if warning.line is not None else ""
        yield say(f"⚠ {prefix}{warning.category}: {warning.message}{where}", style="yellow")
    if declared_warn_met(step):
        yield say(f"✓ {prefix}warned {step.warns.type}, as declared", style="green")
    if step.stdout:
        yield stdout_block(step.stdout, prefix)
    for result in step.expectations if expectations else ():
        yield from expectation_lines(result, prefix)
    for failure in unshown_failures(step):
        yield say(f"✗ {prefix}{failure}", style="bold red")


def error_panel(error: ErrorInfo, *, declared: bool, label: str = "") -> Padding:
    body: List[RenderableType] = [Text(error.message or "(no message)")]
    if error.explanation is not None:
        ex = error.explanation
        body.append(Text(""))
        body.append(Text(ex.title, style="bold"))
        if ex.what:
            body.append(prose(ex.what.strip()))
        if ex.fix:
            body.append(prose(ex.fix.strip(), lead="Fix:"))
    title = error.type
    if label:
        title = f"{label}: {title}"
    if error.line is not None:
        title += f" (line {error.line})"
    if declared:
        title += " — as declared"
    panel = Panel(
        Group(*body),
        title=Text(title, style="bold red"),
        title_align="left",
        border_style="red",
        padding=(0, 1),
    )
    return Padding(panel, (0, 0, 0, 2))


def stdout_block(stdout: str, prefix: str) -> Padding:
    text = Text(f"{prefix}printed:\n", style="dim")
    lines = stdout.rstrip("\n").split("\n")
    for position, line in enumerate(lines):
        text.append("│ " + line + ("\n" if position < len(lines) - 1 else ""), style="dim")
    return Padding(text, (0, 0, 0, 2))


def expectation_lines(result: ExpectationResult, prefix: str) -> Iterable[RenderableType]:
    if result.passed:
        yield say(f"✓ {prefix}{result.expr}", style="green")
        return
    yield say(f"✗ {prefix}{result.expr}", style="bold red")
    if result.error is not None:
        yield say(f"raised {result.error}", style="red", indent=6)
    elif result.op is not None:
        yield say(f"{result.left} {result.op} {result.right} is not true", style="red", indent=6)
    elif result.value is not None:
        yield say(f"it evaluated to {result.value}", style="red", indent=6)


# --- graphs ----------------------------------------------------------------------


def graph_parts(
    graph: Graph, view: View, step: Optional[Step] = None, label: str = ""
) -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    if graph.root is None:
        head = Text(f"{prefix}graph of {graph.tensor}", style="bold")
        head.append(": " + NO_GRAD_FN, style="dim")
        yield Padding(head, (0, 0, 0, 2))
        return
    yield Padding(
        graph_tree(graph, view, step, title=f"{prefix}graph of {graph.tensor}"), (0, 0, 0, 2)
    )
    if graph.truncated:
        yield say(TRUNCATED, style="yellow")


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
        del parents[line.depth + 1 :]
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
        if line.saved:
            broken = any(s.stale or s.freed for s in line.saved)
            text.append(" · " + saved_text(line.saved), style="bold red" if broken else "dim")
        return text
    if line.kind == "chain":
        return Text(line_text(line), style="bold")
    if line.kind == "missing":
        return Text(line_text(line), style="red")
    return Text(line_text(line), style="dim")


def facts_text(
    state: TensorState, view: View, *, marked, style: str, mark: str, storage: str, extra
) -> Text:
    """A tensor's facts as a few short lines (for variant cells and narrow terminals).

    ``extra`` names the optional facts to add: shape, dtype and device on a
    line of their own, stride and contiguity beside the storage, and
    ``retains_grad`` beside the other flags.
    """
    texts = {
        "shape": format_shape(state.shape),
        "dtype": format_dtype(state.dtype),
        "device": state.device,
        "stride": "stride " + format_stride(state),
        "contiguous": "contiguous " + format_flag(is_contiguous(state)),
        "retains_grad": "retains_grad " + format_flag(state.retains_grad),
    }
    lines = []
    if view.values:
        lines.append([("values", format_values(state.values, state.shape, full=view.full))])
    kinds = [f for f in ("shape", "dtype", "device") if f in extra]
    if kinds:
        lines.append([(f, texts[f]) for f in kinds])
    lines.append(
        [("storage", storage)]
        + [(f, texts[f]) for f in ("stride", "contiguous") if f in extra]
        + [("version", "version " + format_version(state.version))]
    )
    lines.append(
        [
            ("requires_grad", "requires_grad " + format_flag(state.requires_grad)),
            ("is_leaf", "leaf " + format_flag(state.is_leaf)),
        ]
        + [(f, texts[f]) for f in ("retains_grad",) if f in extra]
    )
    lines.append([("grad_fn", "grad_fn " + format_grad_fn(state.grad_fn))])
    if view.values:
        lines.append([("grad", "grad " + format_values(state.grad, state.shape, full=view.full))])
    text = Text(overflow="fold")
    for number, parts in enumerate(lines):
        if number:
            text.append("\n")
        for position, (field, words) in enumerate(parts):
            if position:
                text.append(" · ", style="dim")
            colour = storage_colour(state.storage, view) if field == "storage" else ""
            piece = Text(words, style=colour)
            if field in marked:
                mark_cell(piece, view, style, mark)
            text.append_text(piece)
    return text


# --- ends ---------------------------------------------------------------------------


def trace_footer(trace: Trace, label: str = "") -> Iterable[RenderableType]:
    prefix = f"{label}: " if label else ""
    for notice in trace.notices:
        yield Text(f"{prefix}note: {notice}", style="yellow")
    if trace.aborted is not None:
        yield Text(f"{prefix}the run stopped early: {trace.aborted}", style="bold red")
    yield summary_line(trace, prefix)


def summary_line(trace: Trace, prefix: str) -> Text:
    text = Text(prefix + " · ".join(summary_parts(trace)) + " · ", style="bold")
    if trace.passed:
        text.append("PASSED", style="bold green")
    else:
        text.append("FAILED", style="bold red")
    return text
