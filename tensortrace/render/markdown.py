"""A trace as a tutorial page in GitHub-flavoured Markdown.

The page reads top to bottom like the console output: the scenario's title
and description, then each step with its code, note, a table of tensors
(changed cells in bold), errors as quotes with their explanation,
expectations as a checklist, and graphs as Mermaid diagrams (a nested list
when a graph is too large for a diagram to help).

What is shown comes from ``layout.py``, as in the console. Text from the
scenario is made ``visible`` first; prose that is Markdown on purpose (titles,
descriptions, notes) has its ``<``, its entities (``&#x202e;``) and its
brackets escaped outside code spans (``prose``), so a note can never emit raw
HTML, a character ``visible`` would have spelled, a link or an image into a
page. What the tool writes around words it quotes from a trace (an error's
explanation, notices, predictions) keeps only its code spans and escapes the
rest (``quoting``): an exception message can hold anything. Every other value
from the trace is a code span, a fenced block, or text escaped by ``escaped``
or ``no_html``; those ways are ``markdown_text.py``'s, this module lays out
the page.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

from ..trace import ErrorInfo, ExpectationResult, Graph, Step, TensorState, Trace
from .compare import (
    differing_fields,
    merged_expectations,
    group_traces,
    step_indexes,
    steps_by_index,
    variant_differences,
    variant_name,
)
from .diagram import mermaid_for_graph
from .facts import aliasing_notes, tensors_by_name, with_previous
from .layout import (
    QUIET_ROWS,
    alias_groups,
    any_step_wanted,
    has_tensor_tables,
    legend_marks,
    new_predictions,
    parameter_rows,
    run_columns,
    step_wanted,
    summary_parts,
    table_rows,
    unchanged_table,
    unshown_failures,
    variant_codes,
    variant_notes,
    variant_row_names,
)
from .markdown_text import (
    cell,
    code_block,
    code_span,
    code_cell,
    escaped,
    no_html,
    note,
    plain_cell,
    prose,
    quoting,
    quote,
    values_cell,
)
from .loops import line_folds
from .markdown_fold import details, ops_blocks, parameter_table
from .options import DEFAULT_OPTIONS, RenderOptions
from .outline import NO_GRAD_FN, TRUNCATED, graph_outline, line_text
from .text import (
    declared_raise_met,
    declared_warn_met,
    fact_text,
    format_dtype,
    format_flag,
    format_grad_fn,
    format_shape,
    format_values,
    format_version,
    one_line,
    outcome,
    step_place,
    storage_with_partners,
)
from .visible import visible_traces

# Graphs up to this many nodes become a Mermaid diagram; larger ones a nested list.
MERMAID_MAX_NODES = 40
OUTLINE_MAX_DEPTH = 40
OUTLINE_MAX_LINES = 300

HEADERS = {"requires_grad": "requires_grad", "is_leaf": "is_leaf", "version": "version"}


def render_markdown(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """Every trace as one Markdown page; variants of a scenario side by side."""
    blocks: List[str] = []
    for group in group_traces(visible_traces(traces)):
        if len(group) == 1:
            blocks.extend(_trace_blocks(group[0], options))
        else:
            blocks.extend(_variant_blocks(group, options))
    return "\n\n".join(b.rstrip("\n") for b in blocks if b) + "\n"


def _environment(trace: Trace) -> str:
    env = trace.environment
    parts = [
        escaped(f"torch {env.torch}"),
        escaped(f"device {env.device}"),
        escaped(f"python {env.python}"),
        escaped(f"tensortrace {env.tensortrace}"),
    ]
    if trace.scenario.source:
        parts.append(code_span(trace.scenario.source))
    return "<sub>" + " · ".join(parts) + "</sub>"


LEGEND = (
    "Cells in **bold** changed in that step; *(new)* marks a name first bound in it. "
    "Tensors with the same storage label (`S1`) share memory; `S1+1` is a view "
    "starting one element in."
)
SAFE_OFF = "> **Safe mode was off:** the code ran without restrictions."


# --- one trace -------------------------------------------------------------------------


def _trace_blocks(trace: Trace, options: RenderOptions) -> Iterable[str]:
    title = trace.scenario.title
    if trace.scenario.variant is not None:
        title += f" ({trace.scenario.variant})"
    yield f"# {prose(title)}"
    if trace.scenario.description:
        yield prose(trace.scenario.description.strip())
    yield _environment(trace)
    if not trace.environment.safe:
        yield SAFE_OFF
    if has_tensor_tables([trace]):
        yield _legend(legend_marks([trace], options))
    columns = run_columns([trace], options)
    steps = trace.steps
    folds = line_folds(steps, options.iterations) if options.steps is None else {}
    said = {id(steps[position]): fold for position, fold in folds.items()}
    folded = {id(steps[j]) for fold in folds.values() for j in fold.steps}
    first = True
    for prev, step in with_previous(trace):
        if not step_wanted(step, options.steps):
            continue
        if id(step) in folded:
            if id(step) in said:
                yield no_html(said[id(step)].line)
            continue
        yield from _step_blocks(prev, step, options, columns, first)
        first = False
    yield from _footer(trace)


def _step_heading(step: Step) -> str:
    if step.index == 0:
        return "### Setup"
    cell = f" · {step_place(step)}" if step.cell is not None else ""  # a notebook's step: its cell
    return f"### Step {escaped(str(step.index))}{escaped(cell)}"


def _legend(marks) -> str:
    """The legend, with what ``—`` means when the page shows it."""
    return (
        LEGEND
        + (" — means the fact is not available." if "dash" in marks else "")
        + (
            " ? means PyTorch refused to give it (the JSON keeps why)."
            if "refused" in marks
            else ""
        )
        + (
            " Label numbers the tables skip (`S3`, then `S6`) went to unnamed temporaries."
            if "temporaries" in marks
            else ""
        )
    )


def _step_blocks(
    prev: Optional[Step], step: Step, options, columns, first: bool = False
) -> Iterable[str]:
    yield _step_heading(step)
    if step.code.strip():
        yield code_block(step.code)
    if step.note:
        yield note(step.note.strip())
    yield from _table_blocks(prev, step, options, columns, first)
    yield from ops_blocks(step, options.ops, options.iterations)
    yield from _outcome_blocks(step)
    for message in new_predictions(prev, step):
        yield f"> ⚠ **Predicted:** {quoting(message)}"
    for graph in step.graphs:
        yield from _graph_blocks(graph)


def _table_blocks(
    prev: Optional[Step], step: Step, options, columns, first: bool = False
) -> Iterable[str]:
    names, rows = table_rows(prev, step, options)
    if not names:
        return
    if not rows:
        yield "*No changes.*"
        return
    if unchanged_table(rows, options, first=first):
        said = "No tensor changed: " + ", ".join(r.state.name for r in rows)
        yield details(one_line(said, 200), _table(rows, columns, options))
        return
    params, rows = parameter_rows(rows, options, many=len(rows) > QUIET_ROWS)
    params, aliases = alias_groups(params)
    if rows:
        yield _table(rows, columns, options)
    if params:
        yield parameter_table(params)
    for name, other, count in aliases:
        yield f"{code_span(name)}: the same objects as {code_span(other)} ({count:,} tensors)."
    notes = [n for n in aliasing_notes(prev, step) if n.name in names]
    if notes:
        yield "\n".join(
            f"↳ *{escaped(n.describe())}*" + ("  " if i < len(notes) - 1 else "")
            for i, n in enumerate(notes)
        )


def _table(rows, columns, options) -> str:
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("--:" if c == "version" else "---" for c in columns) + "|",
    ]
    for state, changed, new in rows:
        cells = []
        for column in columns:
            bold = column in changed and not new
            if column == "name":
                same = f" (same object as {code_span(state.same_as)})" if state.same_as else ""
                cells.append(cell(code_span(state.name) + (" *(new)*" if new else "") + same))
            elif column in ("values", "grad"):
                values = state.values if column == "values" else state.grad
                cells.append(values_cell(values, state.shape, bold, options.full_values))
            else:
                cells.append(plain_cell(fact_text(state, column), bold))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _error_block(error: ErrorInfo, declared: bool, label: str = "") -> str:
    kind = quoting(error.type)
    head = f"**{label}: {kind}**" if label else f"**{kind}**"
    if declared:
        head += " (as declared)"
    lines = [f"{head}: {escaped(error.message)}" if error.message else head]
    if error.explanation is not None:
        ex = error.explanation
        lines += ["", f"**{escaped(ex.title)}.** {quoting(ex.what.strip())}"]
        if ex.fix:
            lines += ["", f"**Fix:** {quoting(ex.fix.strip())}"]
    return quote("\n".join(lines))


def _expectation_item(result: ExpectationResult, label: str = "") -> str:
    prefix = f"{label}: " if label else ""
    if result.passed:
        return f"- ✓ {prefix}{code_span(result.expr)}"
    item = f"- ✗ {prefix}{code_span(result.expr)}"
    if result.error is not None:
        item += f" — raised {code_span(result.error)}"
    elif result.op is not None:
        item += f" — {code_span(f'{result.left} {result.op} {result.right}')} is not true"
    elif result.value is not None:
        item += f" — it evaluated to {code_span(result.value)}"
    return item


def _outcome_blocks(step: Step, label: str = "", expectations: bool = True) -> Iterable[str]:
    prefix = f"{label}: " if label else ""
    if step.status in ("timeout", "killed"):
        words = "ran out of time" if step.status == "timeout" else "was killed"
        message = step.error.message if step.error is not None else ""
        detail = f": {escaped(message)}" if message else ""
        yield f"**✗ {prefix}the step {words}**{detail}"
    elif step.error is not None:
        yield _error_block(step.error, declared_raise_met(step), label)
    items = []
    if step.error is not None and declared_raise_met(step):
        items.append(f"- ✓ {prefix}raised {quoting(step.error.type)}, as declared")
    for warning in step.warnings:
        items.append(f"- ⚠ {prefix}{quoting(warning.category)}: {escaped(warning.message)}")
    if declared_warn_met(step):
        items.append(f"- ✓ {prefix}warned {quoting(step.warns.type)}, as declared")
    if expectations:
        items += [_expectation_item(r, label) for r in step.expectations]
    for failure in unshown_failures(step):
        items.append(f"- ✗ {prefix}**{escaped(failure)}**")
    if items:
        yield "\n".join(items)
    if step.stdout:
        yield f"{prefix}Printed:\n\n" + code_block(step.stdout, "text")


def _graph_blocks(graph: Graph, label: str = "") -> Iterable[str]:
    prefix = f"{label}: " if label else ""
    if graph.root is None:
        yield f"{prefix}Graph of {code_span(graph.tensor)}: {NO_GRAD_FN}."
        return
    yield f"{prefix}Graph of {code_span(graph.tensor)}, from its `grad_fn` back to the leaves:"
    if len(graph.nodes) <= MERMAID_MAX_NODES:
        yield code_block(mermaid_for_graph(graph), "mermaid")
    else:
        outline = graph_outline(graph, max_depth=OUTLINE_MAX_DEPTH, max_lines=OUTLINE_MAX_LINES)
        yield "\n".join(
            "  " * line.depth + "- " + escaped(line_text(line)) for line in outline.lines
        )
    if graph.truncated:
        yield f"*{TRUNCATED}.*"


def _footer(trace: Trace, label: str = "") -> Iterable[str]:
    prefix = f"{label}: " if label else ""
    for notice in trace.notices:
        yield f"> {prefix}**Note:** {quoting(notice)}"
    if trace.aborted is not None:
        yield f"> {prefix}**The run stopped early:** {escaped(trace.aborted)}"
    head = f"Result ({label})" if label else "Result"
    yield f"**{head}:** {_summary(trace)}"


def _summary(trace: Trace) -> str:
    verdict = "**PASSED**" if trace.passed else "**FAILED**"
    return " · ".join(summary_parts(trace) + [verdict])


# --- variants ---------------------------------------------------------------------------


def _variant_blocks(traces: List[Trace], options: RenderOptions) -> Iterable[str]:
    raw = [variant_name(t, i) for i, t in enumerate(traces)]
    names = [escaped(n) for n in raw]  # as labels in the page's own Markdown
    first = traces[0]
    yield f"# {prose(first.scenario.title)}"
    if first.scenario.description:
        yield prose(first.scenario.description.strip())
    yield _environment(first)
    if any(not t.environment.safe for t in traces):
        yield SAFE_OFF
    marks = legend_marks(traces, options)
    yield (
        "Variants side by side: " + ", ".join(code_span(n) for n in raw) + ". "
        "Facts in **bold** differ between the variants; the storage column names "
        "the other tensors that share the memory."
        + (" `S1+1` is a view starting one element in." if "offset" in marks else "")
        + (" — means not available, or not bound in that variant." if "dash" in marks else "")
        + (
            " ? means PyTorch refused to give it (the JSON keeps why)."
            if "refused" in marks
            else ""
        )
    )
    extras = tuple(
        f for f in ("stride", "contiguous", "retains_grad") if f in run_columns(traces, options)
    )
    per_trace = [steps_by_index(t) for t in traces]
    previous = None
    for index in step_indexes(traces):
        steps = [s.get(index) for s in per_trace]
        prevs = [s.get(previous) if previous is not None else None for s in per_trace]
        previous = index
        if not any_step_wanted(steps, options.steps):
            continue
        shown = next(s for s in steps if s is not None)
        yield _step_heading(shown)
        common, codes = variant_codes(steps)
        if common is not None:
            if common.strip():
                yield code_block(common)
        else:
            for name, code in zip(names, codes):
                if code is not None:
                    yield f"*{name}:*\n\n" + code_block(code)
        for name, said in variant_notes(steps, names):
            yield f"*{name}:* {note(said.strip())}" if name else note(said.strip())
        yield _variant_table(steps, names, options, extras)
        for name, step in zip(names, steps):
            if step is not None:
                yield from _outcome_blocks(step, name, expectations=False)
        merged = merged_expectations(steps, names)
        if merged:
            yield "\n".join(_expectation_item(result, name) for name, result in merged)
        for name, step, prev in zip(names, steps, prevs):
            for message in new_predictions(prev, step) if step is not None else ():
                yield f"> ⚠ **{name}: predicted:** {quoting(message)}"
        for name, step in zip(names, steps):
            for graph in step.graphs if step is not None else ():
                yield from _graph_blocks(graph, name)
    yield "## What differs"
    differences = variant_differences(traces)
    if differences:
        # The lines quote code between backticks; only what would break the list is escaped.
        yield "\n".join("- " + no_html(line) for line in differences)
    else:
        yield "Nothing: every step and every tensor ended the same."
    for name, trace in zip(names, traces):
        yield from _footer(trace, name)


def _variant_table(
    steps: Sequence[Optional[Step]],
    names: Sequence[str],
    options: RenderOptions,
    extras: Sequence[str],
) -> str:
    lines = [
        "| name | " + " | ".join(names) + " |",  # the names: already escaped
        "|---|" + "---|" * len(names),
    ]
    outcomes = [outcome(s) for s in steps]
    differ = len(set(outcomes)) > 1
    lines.append("| *outcome* | " + " | ".join(plain_cell(o, differ) for o in outcomes) + " |")
    for name in variant_row_names(steps, options.show):
        differs = differing_fields(steps, name)
        cells = []
        for step in steps:
            state = tensors_by_name(step).get(name) if step is not None else None
            cells.append(
                "—" if state is None else _variant_cell(step, state, differs, options, extras)
            )
        lines.append(f"| {cell(code_span(name))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _variant_cell(
    step: Step,
    state: TensorState,
    differs: frozenset,
    options: RenderOptions,
    extras: Sequence[str] = (),
) -> str:
    storage = storage_with_partners(step, state)
    parts = []
    if options.values:
        full = options.full_values
        parts.append(("values", code_cell(format_values(state.values, state.shape, full=full))))
    for field, text in (
        ("shape", format_shape(state.shape)),
        ("dtype", format_dtype(state.dtype)),
        ("device", state.device),
    ):
        if field in differs:
            parts.append((field, plain_cell(f"{field} {text}")))
    lines = [[p] for p in parts]
    layout = [
        (f, plain_cell(f"{f} {fact_text(state, f)}"))
        for f in ("stride", "contiguous")
        if f in extras
    ]
    kept = [(f, plain_cell(f"{f} {fact_text(state, f)}")) for f in ("retains_grad",) if f in extras]
    lines += [
        [("storage", plain_cell(storage))]
        + layout
        + [("version", plain_cell(f"version {format_version(state.version)}"))],
        [
            ("requires_grad", f"requires_grad {format_flag(state.requires_grad)}"),
            ("is_leaf", f"is_leaf {format_flag(state.is_leaf)}"),
        ]
        + kept,
        [("grad_fn", plain_cell(f"grad_fn {format_grad_fn(state.grad_fn)}"))],
    ]
    if options.values:
        lines.append([("grad", "grad " + values_cell(state.grad, state.shape, full=full))])
    return "<br>".join(
        " · ".join(f"**{text}**" if field in differs else text for field, text in line)
        for line in lines
    )
