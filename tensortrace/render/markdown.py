"""A trace as a tutorial page in GitHub-flavoured Markdown.

The page reads top to bottom like the console output: the scenario's title
and description, then each step with its code, note, a table of tensors
(changed cells in bold), errors as quotes with their explanation,
expectations as a checklist, and graphs as Mermaid diagrams (a nested list
when a graph is too large for a diagram to help).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence

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
from .diagram import mermaid_for_graph
from .facts import (
    VALUE_FIELDS,
    aliasing_notes,
    changed_fields,
    shown_names,
    storage_groups,
    tensors_by_name,
    with_previous,
)
from .outline import NO_GRAD_FN, TRUNCATED, graph_outline, line_text
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

# Graphs up to this many nodes become a Mermaid diagram; larger ones a nested list.
MERMAID_MAX_NODES = 40
OUTLINE_MAX_DEPTH = 40
OUTLINE_MAX_LINES = 300

HEADERS = {"requires_grad": "requires_grad", "is_leaf": "is_leaf", "version": "version"}


def render_markdown(traces: Sequence[Trace], options) -> str:
    blocks: List[str] = []
    for group in group_traces(traces):
        if len(group) == 1:
            blocks.extend(_trace_blocks(group[0], options))
        else:
            blocks.extend(_variant_blocks(group, options))
    return "\n\n".join(b.rstrip("\n") for b in blocks if b) + "\n"


# --- small pieces ---------------------------------------------------------------------


def code_span(text: str) -> str:
    """Inline code that survives backticks in the text."""
    if "`" not in text:
        return f"`{text}`"
    fence = "``" if "``" not in text else "```"
    return f"{fence} {text} {fence}"


def code_block(code: str, language: str = "python") -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"


def _cell(text: str) -> str:
    """A table cell: pipes escaped, lines joined with <br>."""
    return text.replace("|", "\\|")


def _code_cell(text: str, bold: bool = False) -> str:
    spans = "<br>".join(code_span(line) if line.strip() else "" for line in text.split("\n"))
    spans = _cell(spans)
    return f"**{spans}**" if bold else spans


def _values_cell(values, shape, bold: bool = False) -> str:
    """Values in code spans; a missing grad is the plain word None, like grad_fn's."""
    if values is None:
        return _plain_cell("None", bold)
    return _code_cell(format_values(values, shape), bold)


def _plain_cell(text: str, bold: bool = False) -> str:
    text = _cell(text)
    return f"**{text}**" if bold else text


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.rstrip("\n").split("\n"))


def _environment(trace: Trace) -> str:
    env = trace.environment
    parts = [f"torch {env.torch}", f"device {env.device}", f"python {env.python}",
             f"tensortrace {env.tensortrace}"]
    if trace.scenario.source:
        parts.append(code_span(trace.scenario.source))
    return "<sub>" + " · ".join(parts) + "</sub>"


LEGEND = ("Cells in **bold** changed in that step; *(new)* marks a name first bound in it. "
          "Tensors with the same storage label (`S1`) share memory; `S1+1` is a view "
          "starting one element in.")
SAFE_OFF = "> **Safe mode was off:** the scenario's code ran without restrictions."


# --- one trace -------------------------------------------------------------------------


def _trace_blocks(trace: Trace, options) -> Iterable[str]:
    title = trace.scenario.title
    if trace.scenario.variant is not None:
        title += f" ({trace.scenario.variant})"
    yield f"# {title}"
    if trace.scenario.description:
        yield trace.scenario.description.strip()
    yield _environment(trace)
    if not trace.environment.safe:
        yield SAFE_OFF
    if any(step.tensors for step in trace.steps):
        yield LEGEND
    for prev, step in with_previous(trace):
        if not _wanted(step, options):
            continue
        yield from _step_blocks(prev, step, options)
    yield from _footer(trace)


def _wanted(step: Step, options) -> bool:
    if step.index == 0:
        failed = step.error is not None or not step.behaved
        worth = failed or bool(step.stdout) or bool(step.warnings)
        return worth and (options.steps is None or 0 in options.steps or failed)
    return options.steps is None or step.index in options.steps


def _step_heading(step: Step) -> str:
    return "### Setup" if step.index == 0 else f"### Step {step.index}"


def _step_blocks(prev: Optional[Step], step: Step, options) -> Iterable[str]:
    yield _step_heading(step)
    if step.code.strip():
        yield code_block(step.code)
    if step.note:
        yield step.note.strip()
    yield from _table_blocks(prev, step, options)
    yield from _outcome_blocks(step)
    for graph in step.graphs:
        yield from _graph_blocks(graph)


def _columns(states: Sequence[TensorState], options) -> List[str]:
    columns = ["name"]
    if options.values:
        columns.append("values")
    if not options.values and len({s.shape for s in states}) > 1:
        columns.append("shape")
    if any(format_dtype(s.dtype) != "float32" for s in states):
        columns.append("dtype")
    if len({s.device for s in states}) > 1:
        columns.append("device")
    columns += ["storage", "version", "requires_grad", "is_leaf", "grad_fn"]
    if options.values:
        columns.append("grad")
    return columns


def _table_blocks(prev: Optional[Step], step: Step, options) -> Iterable[str]:
    names = shown_names(step, options.show)
    if not names:
        return
    before = tensors_by_name(prev)
    now = tensors_by_name(step)
    rows = []
    for name in names:
        changed = changed_fields(before.get(name), now[name])
        if not options.values:
            changed -= VALUE_FIELDS  # not shown, so not a change the reader could see
        if options.changes_only and not changed:
            continue
        rows.append((now[name], changed, name not in before))
    if not rows:
        yield "*No changes.*"
        return
    columns = _columns([r[0] for r in rows], options)
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
                cells.append(_cell(code_span(state.name) + (" *(new)*" if new else "") + same))
            elif column in ("values", "grad"):
                values = state.values if column == "values" else state.grad
                cells.append(_values_cell(values, state.shape, bold))
            else:
                cells.append(_plain_cell(_fact_text(state, column), bold))
        lines.append("| " + " | ".join(cells) + " |")
    yield "\n".join(lines)
    notes = [n for n in aliasing_notes(prev, step) if n.name in names]
    if notes:
        yield "\n".join(f"↳ *{_escape(n.describe())}*" + ("  " if i < len(notes) - 1 else "")
                        for i, n in enumerate(notes))


def _escape(text: str) -> str:
    for ch in ("\\", "*", "_", "`", "[", "]", "<", ">", "|"):
        text = text.replace(ch, "\\" + ch)
    return text


def _fact_text(state: TensorState, column: str) -> str:
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


def _error_block(error: ErrorInfo, declared: bool, label: str = "") -> str:
    head = f"**{label}: {error.type}**" if label else f"**{error.type}**"
    if declared:
        head += " (as declared)"
    lines = [f"{head}: {_escape(error.message)}" if error.message else head]
    if error.explanation is not None:
        ex = error.explanation
        lines += ["", f"**{_escape(ex.title)}.** {ex.what.strip()}"]
        if ex.fix:
            lines += ["", f"**Fix:** {ex.fix.strip()}"]
    return _quote("\n".join(lines))


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
        detail = f": {_escape(message)}" if message else ""
        yield f"**✗ {prefix}the step {words}**{detail}"
    elif step.error is not None:
        yield _error_block(step.error, declared_raise_met(step), label)
    items = []
    if step.error is not None and declared_raise_met(step):
        items.append(f"- ✓ {prefix}raised {step.error.type}, as declared")
    for warning in step.warnings:
        items.append(f"- ⚠ {prefix}{warning.category}: {_escape(warning.message)}")
    if declared_warn_met(step):
        items.append(f"- ✓ {prefix}warned {step.warns.type}, as declared")
    if expectations:
        items += [_expectation_item(r, label) for r in step.expectations]
    failed_exprs = [r.expr for r in step.expectations if not r.passed]
    said = step.error.message if step.error is not None and step.status != "raised" else None
    for failure in step.failures:
        if failure != said and not any(expr in failure for expr in failed_exprs):
            items.append(f"- ✗ {prefix}**{_escape(failure)}**")
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
        yield "\n".join("  " * line.depth + "- " + _escape(line_text(line))
                        for line in outline.lines)
    if graph.truncated:
        yield f"*{TRUNCATED}.*"


def _footer(trace: Trace, label: str = "") -> Iterable[str]:
    prefix = f"{label}: " if label else ""
    for notice in trace.notices:
        yield f"> {prefix}**Note:** {notice}"
    if trace.aborted is not None:
        yield f"> {prefix}**The run stopped early:** {_escape(trace.aborted)}"
    head = f"Result ({label})" if label else "Result"
    yield f"**{head}:** {_summary(trace)}"


def _summary(trace: Trace) -> str:
    steps = trace.steps
    raised = [s for s in steps if s.error is not None]
    declared = [s for s in raised if declared_raise_met(s)]
    results = [r for s in ((trace.setup,) if trace.setup else ()) + tuple(steps)
               for r in s.expectations]
    passed = sum(1 for r in results if r.passed)
    parts = [plural(len(steps), "step")]
    if raised:
        words = f"{len(raised)} raised"
        if declared:
            words += f" ({len(declared)} as declared)"
        parts.append(words)
    if results:
        parts.append(f"expectations: {passed} passed, {len(results) - passed} failed")
    parts.append("**PASSED**" if trace.passed else "**FAILED**")
    return " · ".join(parts)


# --- variants ---------------------------------------------------------------------------


def _variant_blocks(traces: List[Trace], options) -> Iterable[str]:
    names = [variant_name(t, i) for i, t in enumerate(traces)]
    first = traces[0]
    yield f"# {first.scenario.title}"
    if first.scenario.description:
        yield first.scenario.description.strip()
    yield _environment(first)
    if any(not t.environment.safe for t in traces):
        yield SAFE_OFF
    yield ("Variants side by side: " + ", ".join(code_span(n) for n in names) + ". "
           "Facts in **bold** differ between the variants; the storage column names "
           "the other tensors that share the memory.")
    per_trace = [steps_by_index(t) for t in traces]
    for index in step_indexes(traces):
        steps = [s.get(index) for s in per_trace]
        if not any(s is not None and _wanted(s, options) for s in steps):
            continue
        shown = next(s for s in steps if s is not None)
        yield _step_heading(shown)
        codes = [s.code if s is not None else None for s in steps]
        if len({c for c in codes if c is not None}) == 1:
            if shown.code.strip():
                yield code_block(shown.code)
        else:
            for name, code in zip(names, codes):
                if code is not None:
                    yield f"*{name}:*\n\n" + code_block(code)
        notes = [s.note for s in steps if s is not None and s.note]
        if notes and len(set(notes)) == 1:
            yield notes[0].strip()
        else:
            for name, step in zip(names, steps):
                if step is not None and step.note:
                    yield f"*{name}:* {step.note.strip()}"
        yield _variant_table(steps, names, options)
        for name, step in zip(names, steps):
            if step is not None:
                yield from _outcome_blocks(step, name, expectations=False)
        merged = merged_expectations(steps, names)
        if merged:
            yield "\n".join(_expectation_item(result, name) for name, result in merged)
        for name, step in zip(names, steps):
            for graph in step.graphs if step is not None else ():
                yield from _graph_blocks(graph, name)
    yield "## What differs"
    differences = variant_differences(traces)
    if differences:
        # The lines quote code between backticks; only what would break the list is escaped.
        yield "\n".join("- " + line.replace("<", "&lt;") for line in differences)
    else:
        yield "Nothing: every step and every tensor ended the same."
    for name, trace in zip(names, traces):
        yield from _footer(trace, name)


def _variant_table(steps: Sequence[Optional[Step]], names: Sequence[str], options) -> str:
    lines = ["| name | " + " | ".join(_cell(n) for n in names) + " |",
             "|---|" + "---|" * len(names)]
    outcomes = [outcome(s) for s in steps]
    differ = len(set(outcomes)) > 1
    lines.append("| *outcome* | " + " | ".join(_plain_cell(o, differ) for o in outcomes) + " |")
    order: Dict[str, None] = {}
    for step in steps:
        if step is not None:
            for name in shown_names(step, options.show):
                order.setdefault(name, None)
    for name in order:
        differs = differing_fields(steps, name)
        cells = []
        for step in steps:
            state = tensors_by_name(step).get(name) if step is not None else None
            cells.append("—" if state is None else _variant_cell(step, state, differs, options))
        lines.append(f"| {_cell(code_span(name))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _variant_cell(step: Step, state: TensorState, differs, options) -> str:
    partners = [n for n in storage_groups(step).get(state.storage, ()) if n != state.name]
    storage = format_storage(state) + (f" (with {', '.join(partners)})" if partners else "")
    parts = []
    if options.values:
        parts.append(("values", _code_cell(format_values(state.values, state.shape))))
    for field, text in (("shape", format_shape(state.shape)), ("dtype", format_dtype(state.dtype)),
                        ("device", state.device)):
        if field in differs:
            parts.append((field, _cell(f"{field} {text}")))
    lines = [[p] for p in parts]
    lines += [
        [("storage", _cell(storage)), ("version", f"version {format_version(state.version)}")],
        [("requires_grad", f"requires_grad {format_flag(state.requires_grad)}"),
         ("is_leaf", f"is_leaf {format_flag(state.is_leaf)}")],
        [("grad_fn", f"grad_fn {format_grad_fn(state.grad_fn)}")],
    ]
    if options.values:
        lines.append([("grad", "grad " + _values_cell(state.grad, state.shape))])
    return "<br>".join(
        " · ".join(f"**{text}**" if field in differs else text for field, text in line)
        for line in lines
    )
