"""What the HTML page shows for one step of one variant.

Its outcome, error with explanation, warnings, printed output, expectations,
the tensor table (changed cells marked, as ``layout.py`` decides; past a dozen
rows, the unchanged ones are counted rather than drawn, as on the console), shared
memory, aliasing notes, the backwards predicted to fail, what the step ran,
its autograd graphs as SVG (``graph_svg.py``) with what each node saved, and
each backward call's gradient flow. The page around the steps (navigation,
headings, the embedded JSON) is ``html.py``; every value goes into markup
through ``html_markup.py``.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from markupsafe import Markup

from ..trace import Step
from .facts import aliasing_notes
from .graph_svg import graph_svg
from .html_markup import html, joined, prose, where, with_code
from .layout import quiet_rows, shared_storages, table_rows, unshown_failures
from .layout import PARAMETER_COLUMNS, QUIET_ROWS, parameter_rows, unchanged_table
from .loops import Part, drawn_flows, folded_line, iteration_heading, loop_parts
from .ops import ops_lines
from .options import RenderOptions
from .text import (
    count_text,
    fact_text,
    format_shape,
    format_version,
    grad_norm,
    one_line,
    outcome,
    saved_text,
)
from .visible import visible


def variant_body(
    step: Step,
    prev: Optional[Step],
    key: int,
    expectations,
    extra: Mapping,
    columns,
    options: RenderOptions,
    place: str,
    first: bool = False,
) -> Markup:
    """One step of one variant; ``first``: the first table a reader of the page meets."""
    misbehaved = (
        Markup(' · <span class="tt-fail">did not behave as declared</span>')
        if not step.behaved
        else ""
    )
    out = [html('<p class="tt-status">{}{}</p>', outcome(step), misbehaved)]
    if step.error is not None:
        out.append(_error(step))
    for warning in step.warnings:
        out.append(
            html(
                '<div class="tt-box tt-warn"><b>{}</b>{}: {}</div>',
                warning.category,
                where(warning.line),
                warning.message,
            )
        )
    if step.stdout:
        out.append(
            html('<p class="tt-status">printed:</p><pre class="tt-stdout">{}</pre>', step.stdout)
        )
    out.append(expectations_list(expectations))
    failures = unshown_failures(step)
    if failures:
        out.append(
            html(
                '<ul class="tt-list tt-fail">{}</ul>',
                joined(html("<li>{}</li>", f) for f in failures),
            )
        )
    _, rows = table_rows(prev, step, options)
    rows, quiet = quiet_rows(rows, options, first=first or prev is None)
    if rows:
        positions = {id(t): i for i, t in enumerate(step.tensors)}
        out.append(_tables(rows, columns, key, positions, options, first))
    if quiet:  # counted, not named: the page grows with what changed, not steps x tensors
        more = f"{len(quiet)} more tensor{'s' if len(quiet) > 1 else ''}"
        out.append(html('<p class="tt-status">{}, unchanged since the step before</p>', more))
    names = [row.state.name for row in rows]
    shared = shared_storages(step, names)
    if shared:
        out.append(
            html(
                '<p class="tt-storages">shared memory: {}</p>',
                joined(
                    (
                        html(
                            '<span class="tt-storage-label" tabindex="0" data-trace="{key}" '
                            'data-storage="{label}">{label}</span> holds {names}',
                            key=key,
                            label=label,
                            names=", ".join(map(str, group)),
                        )
                        for label, group in shared
                    ),
                    "; ",
                ),
            )
        )
    for note in aliasing_notes(prev, step):
        out.append(html('<div class="tt-box">{}</div>', note.describe()))
    out.append(_predictions(step))
    out.append(ops_html(step, options))
    out.append(_graphs(step, extra, key, place))
    if loop_parts(step, options.iterations) is None:
        out.append(_flows(step, 0, len(step.flow)))
    return joined(out)


def _tables(rows, columns, key, positions, options: RenderOptions, first: bool) -> Markup:
    """The tensor table; a step that changed no tensor, and a model's parameters, folded as
    the console folds them, a click away (``<details>``)."""
    full = options.full_values
    if unchanged_table(rows, options, first=first):
        said = "no tensor changed: " + ", ".join(r.state.name for r in rows)
        return html(
            '<details class="tt-unchanged"><summary>{}</summary>{}</details>',
            one_line(said, 200),
            _table(rows, columns, key, positions, full),
        )
    params, rows = parameter_rows(rows, options, many=len(rows) > QUIET_ROWS)
    out = [_table(rows, columns, key, positions, full)] if rows else []
    if params:
        out.append(_parameter_table(params))
        out.append(
            html(
                '<details class="tt-parameters"><summary>every fact of the {} parameters and '
                "buffers</summary>{}</details>",
                len(params),
                _table(params, columns, key, positions, full),
            )
        )
    return joined(out)


def _parameter_table(rows) -> Markup:
    """A model's parameters one line each, as the console's compact table."""
    head = joined(html("<th>{}</th>", c) for c in PARAMETER_COLUMNS)
    body = []
    for row in rows:
        state = row.state
        cells = [state.name, format_shape(state.shape), format_version(state.version)]
        cells += [fact_text(state, "requires_grad"), grad_norm(state.grad)]
        body.append(html("<tr>{}</tr>", joined(html("<td>{}</td>", c) for c in cells)))
    return html(
        '<div class="tt-table-wrap"><table class="tt-table"><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>",
        head,
        joined(body),
    )


def _error(step: Step) -> Markup:
    error = step.error
    declared = (
        Markup(" — declared in <code>raises</code>, as expected") if step.raised_as_declared else ""
    )
    message = html(": {}", error.message) if error.message else ""
    out = [
        html(
            '<div class="tt-box tt-error"><b>{}</b>{}{}{}',
            error.type,
            message,
            where(error.line),
            declared,
        )
    ]
    if error.explanation is not None:
        ex = error.explanation
        out.append(
            html(
                "<p><b>{}</b></p><p>{}</p><p><b>Fix:</b> {}</p>",
                ex.title,
                prose(str(ex.what)),
                prose(str(ex.fix)),
            )
        )
    out.append(Markup("</div>"))
    return joined(out)


def expectations_list(results) -> Markup:
    if not results:
        return Markup("")
    items = []
    for variant, result in results:
        mark = Markup(
            '<span class="tt-pass">✓</span>' if result.passed else '<span class="tt-fail">✗</span>'
        )
        text = html("{} <code>{}</code>", mark, result.expr)
        if variant:
            text = html("<b>{}:</b> {}", variant, text)
        if not result.passed:
            if result.error:
                text += html(" — raised {}", result.error)
            elif result.op is not None:
                text += html(" — {} {} {} is false", str(result.left), result.op, str(result.right))
            elif result.value is not None:
                text += html(" — was {}", result.value)
        items.append(html("<li>{}</li>", text))
    return html('<ul class="tt-list tt-expect">{}</ul>', joined(items))


def _table(rows, columns, key: int, positions: Mapping[int, int], full: bool = False) -> Markup:
    """The tensor table.

    ``data-i`` is the row's position in the step's ``tensors``, as in the JSON.
    """
    head = joined(html("<th>{}</th>", c) for c in columns)
    body = []
    for row in rows:
        state = row.state
        attrs = html(
            ' data-trace="{}" data-tensor="{}" data-storage="{}" data-i="{}"',
            key,
            state.name,
            state.storage or "",
            positions[id(state)],
        )
        cells = []
        for column in columns:
            css = [f"tt-cell-{column}"]
            if column != "name" and column in row.changed and not row.new:
                css.append("tt-changed")
            text = state.name if column == "name" else fact_text(state, column, full)
            focus = Markup(' tabindex="0"') if column in ("name", "storage") else ""
            cells.append(html('<td class="{}"{}{}>{}</td>', " ".join(css), attrs, focus, text))
        body.append(html('<tr class="{}">{}</tr>', "tt-new" if row.new else "", joined(cells)))
    return html(
        '<div class="tt-table-wrap"><table class="tt-table"><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>",
        head,
        joined(body),
    )


def _predictions(step: Step) -> Markup:
    """The backwards predicted to fail after this step, as the console says them.

    They are the step's ``Step.predictions``.
    """
    items = [html("<li>⚠ predicted: {}</li>", with_code(p.message)) for p in step.predictions]
    if not items:
        return Markup("")
    return html(
        '<div class="tt-box tt-warn tt-predictions"><ul class="tt-list">{}</ul></div>',
        joined(items),
    )


def ops_html(step: Step, options: RenderOptions) -> Markup:
    """What the step ran (``Step.ops``), in the console's words, at ``--ops``'s level; a loop's
    passes as the console folds them, a folded one's operations a click away."""
    level = options.ops if options.ops != "none" else "calls"
    parts = loop_parts(step, options.iterations)
    if parts is None:
        return _ops(step, level, 0, len(step.ops), _ran_summary(step), open_=False)
    out = []
    for part in parts:
        if part.kind == "folded":
            out.append(_ops(step, level, *part.ops, folded_line(part), open_=False, always=True))
        elif part.kind == "pass":
            out.append(_ops(step, level, *part.ops, iteration_heading(part, step.loop)))
            out.append(_flows(step, *part.flows, part))
        else:
            title = "ran before the loop" if part.kind == "before" else "ran after the loop"
            out.append(_ops(step, level, *part.ops, title))
            out.append(_flows(step, *part.flows))
    return joined(out)


def _ran_summary(step: Step) -> str:
    calls = sum(1 for op in step.ops if op.level == "call") or len(step.ops)
    more = (
        f", and at least {count_text(step.ops_omitted)} more operations not recorded"
        if step.ops_omitted
        else ""
    )
    return f"ran {calls} call{'s' if calls != 1 else ''}{more}"


def _ops(
    step: Step,
    level: str,
    start: int,
    stop: int,
    summary: str,
    open_: bool = True,
    always: bool = False,
) -> Markup:
    lines = ops_lines(step, level, start, stop) if stop > start else []
    if not lines and not always:
        return Markup("")
    return html(
        '<details class="tt-ops"{}><summary>{}</summary><pre class="tt-code">{}</pre></details>',
        Markup(" open") if open_ else "",
        visible(summary),
        visible("\n".join(lines)),
    )


def _flows(step: Step, start: int, stop: int, part: Optional[Part] = None) -> Markup:
    """Each backward call's gradient flow (``Step.flow``) as the console's tree.

    The values are on the edges; a tree an earlier pass of a loop drew, or the call
    before drew, is said in one line.
    """
    out = []
    for drawn in drawn_flows(step, start, stop, part):
        if drawn.again is not None:
            out.append(html('<p class="tt-status">{}</p>', visible(drawn.again)))
            continue
        out.append(
            html(
                '<details class="tt-flow" open><summary>{}</summary>'
                '<pre class="tt-code">{}</pre></details>',
                visible(drawn.head),
                visible("\n".join(drawn.tree)),
            )
        )
    return joined(out)


def _saved_by_node(graph_body: object) -> Dict[str, list]:
    saved: Dict[str, list] = {}
    if isinstance(graph_body, dict):
        for node in graph_body.get("nodes") or []:
            if isinstance(node, dict) and isinstance(node.get("saved"), list) and node["saved"]:
                saved[str(node.get("id"))] = [s for s in node["saved"] if isinstance(s, dict)]
    return saved


def _graphs(step: Step, extra: Mapping, key: int, place: str) -> Markup:
    """The step's graphs; ``place`` (its index, or ``at`` and its position) keeps ids unique."""
    if not step.graphs:
        return Markup("")
    bodies = extra.get("graphs") if isinstance(extra.get("graphs"), list) else []
    out = []
    for position, graph in enumerate(step.graphs):
        saved = _saved_by_node(bodies[position] if position < len(bodies) else None)
        # The SVG's ids are made from integers only: the trace, the step and the graph.
        out.append(
            html(
                '<figure class="tt-graph-wrap"><figcaption>autograd graph of '
                "<code>{}</code></figcaption>{}",
                graph.tensor,
                graph_svg(graph, f"{int(key)}-{place}-{position}", saved),
            )
        )
        lines = [
            html(
                '<li class="{}">{} {} · {}</li>',
                "tt-fail" if any(x.stale or x.freed for x in node.saved) else "",
                node.id,
                node.name,
                visible(saved_text(node.saved)),
            )
            for node in graph.nodes
            if node.saved
        ]
        if lines:
            out.append(
                html(
                    '<p class="tt-status">what each node saved for backward:</p>'
                    '<ul class="tt-list">{}</ul>',
                    joined(lines),
                )
            )
        out.append(Markup("</figure>"))
    return joined(out)
