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
scenario can close it. Every other piece of scenario text goes through
``html.escape``; nothing from the trace is ever parsed as markup.

What each step ran (``Step.ops``), each backward call's gradient flow
(``Step.flow``), the backwards predicted to fail (``Step.predictions``) and
what each graph node saved (``GraphNode.saved``) are drawn in the console's
own words (``ops.py``, ``text.py``), from the records; a trace that lacks
them (older, or ``--ops none``) simply shows none.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Dict, List, Mapping, Optional, Sequence

from ..model import FORMAT_NAME, FORMAT_VERSION, Step, Trace
from .compare import group_traces, merged_expectations, step_indexes, steps_by_index, variant_differences, variant_name
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
from .text import fact_text, one_line, outcome, saved_text, visible, visible_traces


def render_html(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The page for ``traces`` (one per scenario or per variant)."""
    return html_page(traces, options)


def wrap(bodies: Sequence[dict]) -> dict:
    """The JSON renderer's document: one trace, or the several-traces wrapper."""
    if len(bodies) == 1:
        return bodies[0]
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": list(bodies)}


def html_page(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS,
              bodies: Optional[Sequence[dict]] = None) -> str:
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
    nav: List[str] = []
    main: List[str] = []
    for number, group in enumerate(groups, 1):
        _scenario(number, group, [positions[id(t)] for t in group], extras, options, nav, main)
    title = " · ".join(dict.fromkeys(t.scenario.title for t in shown)) or "tensortrace"
    env = shown[0].environment if shown else None
    meta = f"tensortrace {env.tensortrace} · torch {env.torch} · Python {env.python} · {env.device}" if env else ""
    if env is not None and not env.safe:
        meta += " · safe mode off"
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        "<meta name=\"generator\" content=\"tensortrace\">",
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n",
        "<body data-step=\"\" data-scenario=\"\">",
        f"<header class=\"tt-top\"><h1>{escape(title)}</h1><p class=\"tt-meta\">{escape(meta)}</p></header>\n",
        "<div class=\"tt-layout\"><nav class=\"tt-steps\" aria-label=\"steps\">", "".join(nav), "</nav>\n",
        "<main><div class=\"tt-buttons\"><button id=\"tt-prev\" type=\"button\">← previous</button>",
        "<span id=\"tt-position\"></span><button id=\"tt-next\" type=\"button\">next →</button>",
        "<span class=\"tt-status\">← → keys move; click a name or storage to light up its memory</span></div>\n",
        "".join(main), "</main></div>\n",
        "<div id=\"tt-tip\" role=\"tooltip\" hidden></div>\n",
        f"<script type=\"application/json\" id=\"tt-data\">{script_json(wrap(bodies))}</script>\n",
        f"<script>{JS}</script>\n</body></html>\n",
    ])


def _extras_by_index(body: Mapping) -> Dict[int, Mapping]:
    """Each step's JSON object by index (setup included), for the facts the model may not have."""
    found: Dict[int, Mapping] = {}
    setup = body.get("setup")
    for step in ([setup] if isinstance(setup, dict) else []) + list(body.get("steps") or []):
        if isinstance(step, dict) and isinstance(step.get("index"), int):
            found[step["index"]] = step
    return found


def step_id(scenario: int, index: int) -> str:
    """The element id (and URL hash) of a step: ``step-3``, or ``s2-step-3`` in the second scenario."""
    return f"step-{index}" if scenario == 1 else f"s{scenario}-step-{index}"


def _scenario(number: int, group: Sequence[Trace], keys: Sequence[int], extras, options: RenderOptions,
              nav: List[str], main: List[str]) -> None:
    first = group[0]
    names = [variant_name(t, i) for i, t in enumerate(group)]
    head = [f"<div class=\"tt-scenario-head\" data-scenario=\"{number}\"><h2>{escape(first.scenario.title)}</h2>"]
    if first.scenario.description:
        head.append(f"<p class=\"tt-desc\">{_prose(first.scenario.description.strip())}</p>")
    for trace, name in zip(group, names):
        verdict = "behaved as declared" if trace.passed else "did not behave as declared"
        label = f"{name}: " if len(group) > 1 else ""
        css = "tt-pass" if trace.passed else "tt-fail"
        head.append(f"<p class=\"tt-status\">{escape(label)}<span class=\"{css}\">{verdict}</span>"
                    f" · {escape(trace.scenario.source or '')}</p>")
        for notice in trace.notices:
            head.append(f"<p class=\"tt-box tt-warn\">{escape(notice)}</p>")
        if trace.aborted:
            head.append(f"<p class=\"tt-box tt-error\">stopped early: {escape(trace.aborted)}</p>")
    if len(group) > 1:
        differences = variant_differences(group)
        if differences:
            head.append("<details><summary>What differs between the variants</summary><ul class=\"tt-list\">")
            head.extend(f"<li>{escape(line)}</li>" for line in differences)
            head.append("</ul></details>")
    head.append("</div>")
    main.append("".join(head))
    nav.append(f"<h2>{escape(one_line(first.scenario.title, 40))}</h2><ol>")
    columns = run_columns(group, options)
    per_trace = [steps_by_index(t) for t in group]
    previous = [_previous(t) for t in group]
    for index in step_indexes(group):
        steps = [s.get(index) for s in per_trace]
        if not any_step_wanted(steps, options.steps):
            continue
        ident = step_id(number, index)
        label = "setup" if index == 0 else f"step {index}"
        code = next(s.code for s in steps if s is not None)
        bad = any(s is not None and not s.behaved for s in steps)
        flag = ' class="tt-bad"' if bad else ""
        nav.append(f"<li><a href=\"#{ident}\"{flag}>"
                   f"{escape(label)} · <code>{escape(one_line(code, 36))}</code></a></li>")
        main.append(_step(number, ident, index, steps, group, keys, names, previous, extras, columns, options))
    nav.append("</ol>")


def _previous(trace: Trace) -> Dict[int, Optional[Step]]:
    before: Dict[int, Optional[Step]] = {}
    prev = None
    for step in all_steps(trace):
        before[step.index] = prev
        prev = step
    return before


def _step(number, ident, index, steps, group, keys, names, previous, extras, columns, options) -> str:
    label = "Setup" if index == 0 else f"Step {index}"
    out = [f"<section class=\"tt-step\" id=\"{ident}\" data-step=\"{index}\" data-scenario=\"{number}\">",
           f"<h3>{label}</h3>"]
    common_code, codes = variant_codes(steps)
    if common_code is not None:
        out.append(_code(common_code, next(s.line for s in steps if s is not None)))
    for variant, note in variant_notes(steps, names):
        prefix = f"<b>{escape(variant)}:</b> " if variant else ""
        out.append(f"<p class=\"tt-note\">{prefix}{_prose(note)}</p>")
    if len(group) > 1:
        out.append(_expectations([r for r in merged_expectations(steps, names) if r[0] == ""]))
    out.append("<div class=\"tt-variants\">")
    for position, (trace, step) in enumerate(zip(group, steps)):
        out.append(f"<div class=\"tt-variant\" data-trace=\"{keys[position]}\">")
        if len(group) > 1:
            out.append(f"<h4>{escape(names[position])}</h4>")
        if step is None:
            out.append("<p class=\"tt-status\">not run in this variant</p></div>")
            continue
        if codes:
            out.append(_code(step.code, step.line))
        own = merged_expectations([step], [""]) if len(group) == 1 else \
            [("", r) for v, r in merged_expectations(steps, names) if v == names[position]]
        out.append(_variant_body(step, previous[position].get(index), keys[position], own,
                                 extras[keys[position]].get(index, {}), columns, options))
        out.append("</div>")
    out.append("</div></section>\n")
    return "".join(out)


def _prose(text: str) -> str:
    """Escaped text where `backticks` become <code>, as notes and descriptions write code."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: leave the text as it is
        return escape(text)
    return "".join(f"<code>{escape(p)}</code>" if i % 2 else escape(p) for i, p in enumerate(parts))


def _code(code: str, line: Optional[int]) -> str:
    where = f" data-line=\"{line}\"" if line is not None else ""
    return f"<pre class=\"tt-code\"{where}><code>{escape(code.rstrip())}</code></pre>"


def _variant_body(step: Step, prev: Optional[Step], key: int, expectations, extra: Mapping, columns,
                  options: RenderOptions) -> str:
    misbehaved = "" if step.behaved else ' · <span class="tt-fail">did not behave as declared</span>'
    out = [f"<p class=\"tt-status\">{escape(outcome(step))}{misbehaved}</p>"]
    if step.error is not None:
        out.append(_error(step))
    for warning in step.warnings:
        where = f" (line {warning.line})" if warning.line is not None else ""
        out.append(f"<div class=\"tt-box tt-warn\"><b>{escape(warning.category)}</b>{where}: "
                   f"{escape(warning.message)}</div>")
    if step.stdout:
        out.append(f"<p class=\"tt-status\">printed:</p><pre class=\"tt-stdout\">{escape(step.stdout)}</pre>")
    out.append(_expectations(expectations))
    failures = unshown_failures(step)
    if failures:
        out.append("<ul class=\"tt-list tt-fail\">" + "".join(f"<li>{escape(f)}</li>" for f in failures) + "</ul>")
    _, rows = table_rows(prev, step, options)
    if rows:
        out.append(_table(rows, columns, key, {id(t): i for i, t in enumerate(step.tensors)}))
    names = [row.state.name for row in rows]
    shared = shared_storages(step, names)
    if shared:
        out.append("<p class=\"tt-storages\">shared memory: " + "; ".join(
            f"<span class=\"tt-storage-label\" tabindex=\"0\" data-trace=\"{key}\" data-storage=\"{escape(label)}\">"
            f"{escape(label)}</span> holds {escape(', '.join(group))}" for label, group in shared) + "</p>")
    for note in aliasing_notes(prev, step):
        out.append(f"<div class=\"tt-box\">{escape(note.describe())}</div>")
    out.append(_predictions(step))
    out.append(_ops(step))
    out.append(_graphs(step, extra, key))
    out.append(_flows(step))
    return "".join(out)


def _error(step: Step) -> str:
    error = step.error
    where = f" (line {error.line})" if error.line is not None else ""
    declared = " — declared in <code>raises</code>, as expected" if step.raised_as_declared else ""
    message = f": {escape(error.message)}" if error.message else ""
    out = [f"<div class=\"tt-box tt-error\"><b>{escape(error.type)}</b>{message}{escape(where)}{declared}"]
    if error.explanation is not None:
        ex = error.explanation
        out.append(f"<p><b>{escape(ex.title)}</b></p><p>{_prose(ex.what)}</p><p><b>Fix:</b> {_prose(ex.fix)}</p>")
    out.append("</div>")
    return "".join(out)


def _expectations(results) -> str:
    if not results:
        return ""
    items = []
    for variant, result in results:
        mark = "<span class=\"tt-pass\">✓</span>" if result.passed else "<span class=\"tt-fail\">✗</span>"
        text = f"{mark} <code>{escape(result.expr)}</code>"
        if variant:
            text = f"<b>{escape(variant)}:</b> " + text
        if not result.passed:
            if result.error:
                text += f" — raised {escape(result.error)}"
            elif result.op is not None:
                text += f" — {escape(str(result.left))} {escape(result.op)} {escape(str(result.right))} is false"
            elif result.value is not None:
                text += f" — was {escape(result.value)}"
        items.append(f"<li>{text}</li>")
    return "<ul class=\"tt-list tt-expect\">" + "".join(items) + "</ul>"


def _table(rows, columns, key: int, positions: Mapping[int, int]) -> str:
    """The tensor table; ``data-i`` is the row's position in the step's ``tensors``, as in the JSON."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        state = row.state
        attrs = (f" data-trace=\"{key}\" data-tensor=\"{escape(state.name)}\""
                 f" data-storage=\"{escape(state.storage or '')}\" data-i=\"{positions[id(state)]}\"")
        cells = []
        for column in columns:
            css = [f"tt-cell-{column}"]
            if column != "name" and column in row.changed and not row.new:
                css.append("tt-changed")
            text = state.name if column == "name" else fact_text(state, column)
            focus = " tabindex=\"0\"" if column in ("name", "storage") else ""
            cells.append(f"<td class=\"{' '.join(css)}\"{attrs}{focus}>{escape(text)}</td>")
        body.append(f"<tr class=\"{'tt-new' if row.new else ''}\">{''.join(cells)}</tr>")
    return (f"<div class=\"tt-table-wrap\"><table class=\"tt-table\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


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


def _with_code(text: str) -> str:
    """Escaped text with its `backticked` parts as code, as the messages write them."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(visible(text)))


def _predictions(step: Step) -> str:
    """The backwards predicted to fail after this step (``Step.predictions``), as the console says them."""
    items = [f"<li>⚠ predicted: {_with_code(p.message)}</li>" for p in step.predictions]
    if not items:
        return ""
    return "<div class=\"tt-box tt-warn tt-predictions\"><ul class=\"tt-list\">" + "".join(items) + "</ul></div>"


def _ops(step: Step) -> str:
    """What the step ran (``Step.ops``): each call, with the ATen operations under it, in the console's words."""
    lines = ops_lines(step, "aten")
    if not lines:
        return ""
    calls = sum(1 for op in step.ops if op.level == "call") or len(step.ops)
    more = f", and at least {step.ops_omitted:,} more operations not recorded" if step.ops_omitted else ""
    return (f"<details class=\"tt-ops\"><summary>ran {calls} call{'s' if calls != 1 else ''}{more}</summary>"
            f"<pre class=\"tt-code\">{escape(visible(chr(10).join(lines)))}</pre></details>")


def _flows(step: Step) -> str:
    """Each backward call's gradient flow (``Step.flow``) as the console's tree, values on the edges."""
    out = []
    for flow in step.flow:
        head, *tree = flow_lines(flow)
        out.append(f"<details class=\"tt-flow\" open><summary>{escape(visible(head))}</summary>"
                   f"<pre class=\"tt-code\">{escape(visible(chr(10).join(tree)))}</pre></details>")
    return "".join(out)


def _saved_by_node(graph_body: object) -> Dict[str, list]:
    saved: Dict[str, list] = {}
    if isinstance(graph_body, dict):
        for node in graph_body.get("nodes") or []:
            if isinstance(node, dict) and isinstance(node.get("saved"), list) and node["saved"]:
                saved[str(node.get("id"))] = [s for s in node["saved"] if isinstance(s, dict)]
    return saved


def _graphs(step: Step, extra: Mapping, key: int) -> str:
    if not step.graphs:
        return ""
    bodies = extra.get("graphs") if isinstance(extra.get("graphs"), list) else []
    out = []
    for position, graph in enumerate(step.graphs):
        saved = _saved_by_node(bodies[position] if position < len(bodies) else None)
        out.append(f"<figure class=\"tt-graph-wrap\"><figcaption>autograd graph of "
                   f"<code>{escape(graph.tensor)}</code></figcaption>"
                   f"{graph_svg(graph, f'{key}-{step.index}-{position}', saved)}")
        lines = [f"<li class=\"{'tt-fail' if any(x.stale or x.freed for x in node.saved) else ''}\">"
                 f"{escape(node.id)} {escape(node.name)} · {escape(visible(saved_text(node.saved)))}</li>"
                 for node in graph.nodes if node.saved]
        if lines:
            out.append("<p class=\"tt-status\">what each node saved for backward:</p><ul class=\"tt-list\">" + "".join(lines) + "</ul>")
        out.append("</figure>")
    return "".join(out)


__all__ = ["html_page", "render_html", "step_id", "wrap"]
