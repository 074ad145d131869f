"""``--format html``: one self-contained page to click through a trace, offline.

Everything a reader sees is drawn in Python, at export time: here the page,
its navigation and each step's section; in ``html_step.py`` what one step of
one variant shows. That is the steps with their code, notes, tensor tables
(changed cells marked, as ``layout.py`` and ``facts.py`` decide for every
renderer), errors with their explanation, warnings, expectations, output,
and autograd graphs as SVG diagrams (``graph_svg.py``). Variants of one
scenario stand side by side. The page therefore reads, and prints, with
scripting off; ``html_page.py`` adds the small inlined script (step
navigation, storage highlighting, a tensor's record on hover) and the
stylesheet.

The trace itself is embedded as the JSON renderer's document, in a
``<script type="application/json">`` block escaped so that no text of the
scenario can close it. Every other piece of the page is built with markupsafe:
each template is a literal ``Markup`` written in these modules, and every value
put into one (``html_markup.html()``, ``joined()``) is escaped, whatever its
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

import functools
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from markupsafe import Markup

from ..trace import FORMAT_NAME, FORMAT_VERSION, Step, Trace
from .compare import (
    group_traces,
    merged_expectations,
    step_indexes,
    steps_by_index,
    variant_differences,
    variant_name,
)
from .facts import all_steps
from .html_markup import code_block, html, joined, prose
from .html_page import CSS, JS, script_json
from .html_step import expectations_list, variant_body
from .layout import any_step_wanted, run_columns, variant_codes, variant_notes
from .loops import line_folds
from .options import DEFAULT_OPTIONS, RenderOptions
from .text import as_int, one_line, step_place
from .visible import visible_traces


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
    pieces: List[str] = []
    _write_page(traces, pieces.append, options, bodies)
    return "".join(pieces)


def write_html(
    traces: Sequence[Trace], write: Callable[[str], None], options: RenderOptions = DEFAULT_OPTIONS
) -> None:
    """The page, handed to ``write`` a step at a time as it is drawn (never whole in memory)."""
    _write_page(traces, write, options)


def _write_page(
    traces: Sequence[Trace],
    write: Callable[[str], None],
    options: RenderOptions,
    bodies: Optional[Sequence[dict]] = None,
) -> None:
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
    for part in (
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
                '<span id="tt-position"></span>'
                '<button id="tt-next" type="button">next →</button>'
                '<span class="tt-status">← → keys move; '
                "click a name or storage to light up its memory"
                "</span></div>\n"
            ),
        ]
        + main
        + [
            Markup('</main></div>\n<div id="tt-tip" role="tooltip" hidden></div>\n'),
            # script_json writes <, >, &, U+2028/2029 as JSON escapes: nothing ends the block
            html(
                '<script type="application/json" id="tt-data">{}</script>\n',
                Markup(script_json(wrap(bodies))),
            ),
            html("<script>{}</script>\n</body></html>\n", Markup(JS)),
        ]
    ):
        write(str(part() if callable(part) else part))  # a step's section: drawn now


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
        head.append(html('<p class="tt-desc">{}</p>', prose(description)))
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
    folds = _nav_folds(group, options)
    first = True
    for position, index in enumerate(step_indexes(group), 1):
        steps = [s.get(index) for s in per_trace]
        if not any_step_wanted(steps, options.steps):
            continue
        fold = folds.get(index)
        if fold is not None and fold[0] == "open":
            nav.append(html('<li><details class="tt-fold"><summary>{}</summary><ol>', fold[1]))
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
        main.append(  # drawn when written, so that the page is never whole in memory
            functools.partial(
                _step,
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
                first,
            )
        )
        first = False
        if fold is not None and fold[2]:
            nav.append(Markup("</ol></details></li>"))
    nav.append(Markup("</ol>"))


def _nav_folds(group: Sequence[Trace], options: RenderOptions) -> Dict[int, tuple]:
    """A line-by-line trace's folded loop passes (``loops.line_folds``), by step index:
    (``open`` at a fold's first step, else ``in``; its line; whether it is its last step).
    The steps stay on the page; the list of steps holds them in a ``<details>``."""
    if len(group) != 1 or options.steps is not None:
        return {}
    steps = group[0].steps
    found: Dict[int, tuple] = {}
    for fold in line_folds(steps, options.iterations).values():
        for n, position in enumerate(fold.steps):
            index = steps[position].index
            found[index] = ("open" if n == 0 else "in", fold.line, n == len(fold.steps) - 1)
    return found


def _previous(trace: Trace) -> Dict[int, Optional[Step]]:
    before: Dict[int, Optional[Step]] = {}
    prev = None
    for step in all_steps(trace):
        before[step.index] = prev
        prev = step
    return before


def _step(
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
    slot: int,
    first: bool = False,
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
        out.append(code_block(common_code, next(s.line for s in steps if s is not None)))
    for variant, note in variant_notes(steps, names):
        prefix = html("<b>{}:</b> ", variant) if variant else ""
        out.append(html('<p class="tt-note">{}{}</p>', prefix, prose(str(note))))
    if len(group) > 1:
        out.append(expectations_list([r for r in merged_expectations(steps, names) if r[0] == ""]))
    out.append(Markup('<div class="tt-variants">'))
    for position, (trace, step) in enumerate(zip(group, steps)):
        out.append(html('<div class="tt-variant" data-trace="{}">', keys[position]))
        if len(group) > 1:
            out.append(html("<h4>{}</h4>", names[position]))
        if step is None:
            out.append(Markup('<p class="tt-status">not run in this variant</p></div>'))
            continue
        if codes:
            out.append(code_block(step.code, step.line))
        own = (
            merged_expectations([step], [""])
            if len(group) == 1
            else [("", r) for v, r in merged_expectations(steps, names) if v == names[position]]
        )
        out.append(
            variant_body(
                step,
                previous[position].get(index),
                keys[position],
                own,
                extras[keys[position]].get(index, {}),
                columns,
                options,
                place,
                first,
            )
        )
        out.append(Markup("</div>"))
    out.append(Markup("</div></section>\n"))
    return joined(out)


__all__ = ["html", "html_page", "joined", "render_html", "step_id", "wrap", "write_html"]
