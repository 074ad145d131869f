"""HTML and SVG: the console rendering, recorded in colour and exported by rich.

A page or an image then shows exactly what the terminal shows, colours
included, which is what a reader who shares a trace usually wants.
"""

from __future__ import annotations

from typing import Sequence

from ..model import Trace
from .console import DEFAULT_WIDTH, console_renderables, make_console


def _recorded(traces: Sequence[Trace], options):
    width = options.width or DEFAULT_WIDTH
    console = make_console(width, True, record=True)
    for renderable in console_renderables(traces, options, width=width, color=True):
        console.print(renderable)
    return console


def _title(traces: Sequence[Trace]) -> str:
    titles = []
    for trace in traces:
        if trace.scenario.title not in titles:
            titles.append(trace.scenario.title)
    return " · ".join(titles) or "tensortrace"


def render_html(traces: Sequence[Trace], options) -> str:
    """A standalone HTML page with inline styles."""
    return _recorded(traces, options).export_html(inline_styles=True)


def render_svg(traces: Sequence[Trace], options) -> str:
    """An SVG image of the terminal output, titled with the scenarios' titles."""
    return _recorded(traces, options).export_svg(title=_title(traces))
