"""``--format html``: one self-contained page to click through a trace, offline.

Everything a reader sees is drawn here, in Python, at export time: the steps
with their code, notes, tensor tables (changed cells marked, as ``layout.py``
and ``facts.py`` decide for every renderer), errors with their explanation,
warnings, expectations, output, and autograd graphs as SVG diagrams
(``graph_svg.py``). Variants of one scenario stand side by side. The page
therefore reads, and prints, with scripting off; ``html_page.py`` adds the
small inlined script (step navigation, storage highlighting, a tensor's
record on hover) and the stylesheet.

The trace itself is embedded as the JSON renderer's document, in a
``<script type="application/json">`` block escaped so that no text of the
scenario can close it. Every other piece of the page is built with markupsafe:
each template is a literal ``Markup`` written here, and every value put into
one (``html()``, ``Markup.format``, ``Markup.join``) is escaped, whatever its
type, so no text of the trace is ever parsed as markup, and attributes are
always quoted. Element ids and anchors are made from step indices the page
formats itself as integers (``as_int``); an index that is not a number gets
an id from the step's position instead, never its text.

What each step ran (``Step.ops``), each backward call's gradient flow
(``Step.flow``), the backwards predicted to fail (``Step.predictions``) and
what each graph node saved (``GraphNode.saved``) are drawn in the console's
own words (``ops.py``, ``text.py``), from the records; a trace that lacks
them (older, or ``--ops none``) simply shows none.
"""

from __future__ import annotations

import json
import re
import string
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from markupsafe import Markup, escape

from ..trace import FORMAT_NAME, FORMAT_VERSION, Step, Trace
from .compare import (
    group_traces,
    merged_expectations,
    step_indexes,
    steps_by_index,
    variant_differences,
    variant_name,
)
from .facts import aliasing_notes, all_steps
from .graph_svg import graph_svg
from .html_page import CSS, JS, script_json
from .layout import (
    any_step_wanted,
    run_columns,
    shared_storages,
    table_rows,
    unshown_failures,
    variant_codes,
    variant_notes,
)
from .ops import flow_lines, ops_lines
from .options import DEFAULT_OPTIONS, RenderOptions
from .text import (
    as_int,
    count_text,
    fact_text,
    one_line,
    outcome,
    saved_text,
    step_place,
    visible,
    visible_traces,
)


def html(template: str, *values: object, **named: object) -> Markup:
    """``template`` (markup written here, never data) with each value escaped into it.

    The one way the page puts a value into markup: every ``{}`` (or ``{name}``)
    of the template takes its value through ``markupsafe.escape`` (``&``, ``<``,
    ``>``, both quotes), whatever its type, unless it is ``Markup`` built the
    same way. It does what ``Markup(template).format(...)`` does, with the
    template's parts read once, as a page formats tens of thousands of them.
    """
    parts = _TEMPLATES.get(template)
    if parts is None:
        parts = _TEMPLATES[template] = _template_parts(template)
    out = []
    position = 0
    for literal, field in parts:
        out.append(literal)
        if field is None:
            continue
        if field:
            value = named[field]
        else:
            value = values[position]
            position += 1
        out.append(escape(value))  # Markup (already built this way) comes back as it is
    return Markup("".join(out))


_TEMPLATES: Dict[str, List[Tuple[str, Optional[str]]]] = {}


def _template_parts(template: str) -> List[Tuple[str, Optional[str]]]:
    """(literal markup, the field after it: ``""`` the next positional value, a name, or None)."""
    parts = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if spec or conversion or (field and field.isdigit()):
            raise ValueError(f"an HTML template takes plain {{}} or {{name}} fields: {template!r}")
        parts.append((literal, field))
    return parts


def joined(parts, separator: str = "") -> Markup:
    """The parts one after another; any part that is not ``Markup`` is escaped."""
    return Markup(separator).join(parts)


def render_html(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The page for ``traces`` (one per scenario or per variant)."""
    return html_page(traces, options)


def wrap(bodies: Sequence[dict]) -> dict:
    """The JSON renderer's document: one trace, or the several-traces wrapper."""
    if len(bodies) == 1:
        return bodies[0]
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": list(bodies)}


def html_page(
    traces: Sequence[Trace],
    options: RenderOptions = DEFAULT_OPTIONS,
    bodies: Optional[Sequence[dict]] = None,
) -> str:
    """The page; ``bodies`` are the traces' JSON documents (by default their ``to_dict()``).

    A caller that holds documents with facts the model does not carry yet
    passes them here: they are embedded, and their extra facts drawn.
    """
    traces = list(traces)
    bodies = list(bodies) if bodies is not None else [t.to_dict() for t in traces]
    if len(bodies) != len(traces):
        raise ValueError("html_page needs one JSON document per trace")
    shown = visible_traces(traces)
    extras = [_extras_by_index(body) for body in bodies]
    positions = {id(t): k for k, t in enumerate(shown)}
    groups = group_traces(shown)
    nav: List[Markup] = []
    main: List[Markup] = []
    for number, group in enumerate(groups, 1):
        _scenario(number, group, [positions[id(t)] for t in group], extras, options, nav, main)
    title = " · ".join(dict.fromkeys(str(t.scenario.title) for t in shown)) or "tensortrace"
    env = shown[0].environment if shown else None
    meta = (
        f"tensortrace {env.tensortrace} · torch {env.torch} · Python {env.python} · {env.device}"
        if env
        else ""
    )
    if env is not None and not env.safe:
        meta += " · safe mode off"
    return str(
        joined(
            [
                Markup(
                    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                    '<meta name="viewport" content="width=device-width, initial-scale=1">'
                    '<meta name="generator" content="tensortrace">'
                ),
                html("<title>{}</title><style>{}</style></head>\n", title, Markup(CSS)),
                Markup('<body data-step="" data-scenario="">'),
                html(
                    '<header class="tt-top"><h1>{}</h1><p class="tt-meta">{}</p></header>\n',
                    title,
                    meta,
                ),
                Markup('<div class="tt-layout"><nav class="tt-steps" aria-label="steps">'),
                joined(nav),
                Markup(
                    '</nav>\n<main><div class="tt-buttons">'
                    '<button id="tt-prev" type="button">← previous</button>'
                    '<span id="tt-position"></span><button id="tt-next" type="button">next →</button>'
                    '<span class="tt-status">← → keys move; click a name or storage to light up its '
                    "memory"
                    "</span></div>\n"
                ),
                joined(main),
                Markup('</main></div>\n<div id="tt-tip" role="tooltip" hidden></div>\n'),
                # script_json writes <, >, &, U+2028/2029 as JSON escapes: nothing ends the block
                html(
                    '<script type="application/json" id="tt-data">{}</script>\n',
                    Markup(script_json(wrap(bodies))),
                ),
                html("<script>{}</script>\n</body></html>\n", Markup(JS)),
            ]
        )
    )


def _extras_by_index(body: Mapping) -> Dict[int, Mapping]:
    """Each step's JSON object by index (setup included), for the facts the model may not have."""
    found: Dict[int, Mapping] = {}
    setup = body.get("setup")
    for step in ([setup] if isinstance(setup, dict) else []) + list(body.get("steps") or []):
        if isinstance(step, dict) and isinstance(step.get("index"), int):
            found[step["index"]] = step
    return found


def step_id(scenario: int, index: object, position: int = 0) -> str:
    """The element id (and URL hash) of a step: ``step-3``, or ``s2-step-3`` in the second scenario.

    Both numbers are formatted here as integers; a step whose index is not one
    is named by its ``position`` on the page instead (``step-at-4``).
    """
    number = as_int(index)
    name = f"step-{number}" if number is not None else f"step-at-{int(position)}"
    return name if scenario == 1 else f"s{int(scenario)}-{name}"


def _scenario(
    number: int,
    group: Sequence[Trace],
    keys: Sequence[int],
    extras,
    options: RenderOptions,
    nav: List[Markup],
    main: List[Markup],
) -> None:
    first = group[0]
    names = [variant_name(t, i) for i, t in enumerate(group)]
    head = [
        html(
            '<div class="tt-scenario-head" data-scenario="{}"><h2>{}</h2>',
            number,
            first.scenario.title,
        )
    ]
    if first.scenario.description:
        description = str(first.scenario.description).strip()
        head.append(html('<p class="tt-desc">{}</p>', _prose(description)))
    for trace, name in zip(group, names):
        verdict = "behaved as declared" if trace.passed else "did not behave as declared"
        label = f"{name}: " if len(group) > 1 else ""
        css = "tt-pass" if trace.passed else "tt-fail"
        head.append(
            html(
                '<p class="tt-status">{}<span class="{}">{}</span> · {}</p>',
                label,
                css,
                verdict,
                trace.scenario.source or "",
            )
        )
        for notice in trace.notices:
            head.append(html('<p class="tt-box tt-warn">{}</p>', notice))
        if trace.aborted:
            head.append(html('<p class="tt-box tt-error">stopped early: {}</p>', trace.aborted))
    if len(group) > 1:
        differences = variant_differences(group)
        if differences:
            head.append(
                Markup(
                    "<details><summary>What differs between the variants</summary>"
                    '<ul class="tt-list">'
                )
            )
            head.extend(html("<li>{}</li>", line) for line in differences)
            head.append(Markup("</ul></details>"))
    head.append(Markup("</div>"))
    main.append(joined(head))
    nav.append(html("<h2>{}</h2><ol>", one_line(str(first.scenario.title), 40)))
    columns = run_columns(group, options)
    per_trace = [steps_by_index(t) for t in group]
    previous = [_previous(t) for t in group]
    for position, index in enumerate(step_indexes(group), 1):
        steps = [s.get(index) for s in per_trace]
        if not any_step_wanted(steps, options.steps):
            continue
        ident = step_id(number, index, position)
        label = "setup" if index == 0 else f"step {index}"
        code = next(s.code for s in steps if s is not None)
        bad = any(s is not None and not s.behaved for s in steps)
        flag = Markup(' class="tt-bad"') if bad else ""
        nav.append(
            html(
                '<li><a href="#{}"{}>{} · <code>{}</code></a></li>',
                ident,
                flag,
                label,
                one_line(str(code), 36),
            )
        )
        main.append(
            _step(
                number,
                ident,
                index,
                steps,
                group,
                keys,
                names,
                previous,
                extras,
                columns,
                options,
                position,
            )
        )
    nav.append(Markup("</ol>"))


def _previous(trace: Trace) -> Dict[int, Optional[Step]]:
    before: Dict[int, Optional[Step]] = {}
    prev = None
    for step in all_steps(trace):
        before[step.index] = prev
        prev = step
    return before


def _step(
    number, ident, index, steps, group, keys, names, previous, extras, columns, options, slot: int
) -> Markup:
    number_ = as_int(index)
    place = f"{number_}" if number_ is not None else f"at{int(slot)}"  # for the graphs' ids
    label = "Setup" if index == 0 else f"Step {index}"
    cell = next((s for s in steps if s is not None and s.cell is not None), None)
    if cell is not None:  # a notebook's step: its cell and line
        label += f" · {step_place(cell)}"
    out = [
        html(
            '<section class="tt-step" id="{}" data-step="{}" data-scenario="{}"><h3>{}</h3>',
            ident,
            index,
            number,
            label,
        )
    ]
    common_code, codes = variant_codes(steps)
    if common_code is not None:
        out.append(_code(common_code, next(s.line for s in steps if s is not None)))
    for variant, note in variant_notes(steps, names):
        prefix = html("<b>{}:</b> ", variant) if variant else ""
        out.append(html('<p class="tt-note">{}{}</p>', prefix, _prose(str(note))))
    if len(group) > 1:
        out.append(_expectations([r for r in merged_expectations(steps, names) if r[0] == ""]))
    out.append(Markup('<div class="tt-variants">'))
    for position, (trace, step) in enumerate(zip(group, steps)):
        out.append(html('<div class="tt-variant" data-trace="{}">', keys[position]))
        if len(group) > 1:
            out.append(html("<h4>{}</h4>", names[position]))
        if step is None:
            out.append(Markup('<p class="tt-status">not run in this variant</p></div>'))
            continue
        if codes:
            out.append(_code(step.code, step.line))
        own = (
            merged_expectations([step], [""])
            if len(group) == 1
            else [("", r) for v, r in merged_expectations(steps, names) if v == names[position]]
        )
        out.append(
            _variant_body(
                step,
                previous[position].get(index),
                keys[position],
                own,
                extras[keys[position]].get(index, {}),
                columns,
                options,
                place,
            )
        )
        out.append(Markup("</div>"))
    out.append(Markup("</div></section>\n"))
    return joined(out)


def _prose(text: str) -> Markup:
    """Escaped text where `backticks` become <code>, as notes and descriptions write code."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: leave the text as it is
        return escape(text)
    return joined(html("<code>{}</code>", p) if i % 2 else p for i, p in enumerate(parts))


def _line_attribute(line: object) -> Markup:
    """`` data-line="12"`` for a line number; nothing for no line, or one that is not a number."""
    number = as_int(line) if line is not None else None
    return html(' data-line="{}"', number) if number is not None else Markup("")


def _code(code: str, line: Optional[int]) -> Markup:
    return html(
        '<pre class="tt-code"{}><code>{}</code></pre>', _line_attribute(line), str(code).rstrip()
    )


def _where(line: object) -> str:
    """`` (line 12)``, in words; the value is escaped where it is put, whatever it holds."""
    return f" (line {line})" if line is not None else ""


def _variant_body(
    step: Step,
    prev: Optional[Step],
    key: int,
    expectations,
    extra: Mapping,
    columns,
    options: RenderOptions,
    place: str,
) -> Markup:
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
                _where(warning.line),
                warning.message,
            )
        )
    if step.stdout:
        out.append(
            html('<p class="tt-status">printed:</p><pre class="tt-stdout">{}</pre>', step.stdout)
        )
    out.append(_expectations(expectations))
    failures = unshown_failures(step)
    if failures:
        out.append(
            html(
                '<ul class="tt-list tt-fail">{}</ul>',
                joined(html("<li>{}</li>", f) for f in failures),
            )
        )
    _, rows = table_rows(prev, step, options)
    if rows:
        out.append(_table(rows, columns, key, {id(t): i for i, t in enumerate(step.tensors)}))
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
    out.append(_ops(step))
    out.append(_graphs(step, extra, key, place))
    out.append(_flows(step))
    return joined(out)


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
            _where(error.line),
            declared,
        )
    ]
    if error.explanation is not None:
        ex = error.explanation
        out.append(
            html(
                "<p><b>{}</b></p><p>{}</p><p><b>Fix:</b> {}</p>",
                ex.title,
                _prose(str(ex.what)),
                _prose(str(ex.fix)),
            )
        )
    out.append(Markup("</div>"))
    return joined(out)


def _expectations(results) -> Markup:
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


def _table(rows, columns, key: int, positions: Mapping[int, int]) -> Markup:
    """The tensor table; ``data-i`` is the row's position in the step's ``tensors``, as in the JSON."""
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
            text = state.name if column == "name" else fact_text(state, column)
            focus = Markup(' tabindex="0"') if column in ("name", "storage") else ""
            cells.append(html('<td class="{}"{}{}>{}</td>', " ".join(css), attrs, focus, text))
        body.append(html('<tr class="{}">{}</tr>', "tt-new" if row.new else "", joined(cells)))
    return html(
        '<div class="tt-table-wrap"><table class="tt-table"><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>",
        head,
        joined(body),
    )


def _text(value: object, limit: int = 160) -> str:
    """A fact of unknown shape (from a newer recorder) as one short, visible line."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return visible(one_line(text, limit))


def _names(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v, 40) for v in value) or "—"
    return "—" if value is None else _text(value, 60)


_CODE_SPAN = re.compile(r"`([^`]+)`")


def _with_code(text: str) -> Markup:
    """Escaped text with its `backticked` parts as code, as the messages write them."""
    text = visible(str(text))
    out: List[object] = []
    position = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(text[position : span.start()])
        out.append(html("<code>{}</code>", span.group(1)))
        position = span.end()
    out.append(text[position:])
    return joined(out)


def _predictions(step: Step) -> Markup:
    """The backwards predicted to fail after this step (``Step.predictions``), as the console says them."""
    items = [html("<li>⚠ predicted: {}</li>", _with_code(p.message)) for p in step.predictions]
    if not items:
        return Markup("")
    return html(
        '<div class="tt-box tt-warn tt-predictions"><ul class="tt-list">{}</ul></div>',
        joined(items),
    )


def _ops(step: Step) -> Markup:
    """What the step ran (``Step.ops``): each call, with the ATen operations under it, in the console's words."""
    lines = ops_lines(step, "aten")
    if not lines:
        return Markup("")
    calls = sum(1 for op in step.ops if op.level == "call") or len(step.ops)
    more = (
        f", and at least {count_text(step.ops_omitted)} more operations not recorded"
        if step.ops_omitted
        else ""
    )
    return html(
        '<details class="tt-ops"><summary>ran {} call{}{}</summary>'
        '<pre class="tt-code">{}</pre></details>',
        calls,
        "s" if calls != 1 else "",
        more,
        visible("\n".join(lines)),
    )


def _flows(step: Step) -> Markup:
    """Each backward call's gradient flow (``Step.flow``) as the console's tree, values on the edges."""
    out = []
    for flow in step.flow:
        head, *tree = flow_lines(flow)
        out.append(
            html(
                '<details class="tt-flow" open><summary>{}</summary>'
                '<pre class="tt-code">{}</pre></details>',
                visible(head),
                visible("\n".join(tree)),
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


__all__ = ["html", "html_page", "joined", "render_html", "step_id", "wrap"]
