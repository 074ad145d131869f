"""HTML and SVG: the console rendering, recorded in colour and exported by rich.

A page or an image then shows exactly what the terminal shows, colours
included, which is what a reader who shares a trace usually wants.
"""

from __future__ import annotations

from typing import Sequence

from ..model import Trace
from .console import console_renderables
from .console_parts import make_console
from .options import DEFAULT_OPTIONS, DEFAULT_WIDTH, RenderOptions
from .text import visible_traces


def _recorded(traces: Sequence[Trace], options: RenderOptions):
    # A page is not a terminal: its width is the one asked for, else the default.
    width = options.width or DEFAULT_WIDTH
    console = make_console(width, True, record=True)
    for renderable in console_renderables(traces, options, width=width, color=True):
        console.print(renderable)
    return console


def _title(traces: Sequence[Trace]) -> str:
    titles = []
    for trace in visible_traces(traces):
        if trace.scenario.title not in titles:
            titles.append(trace.scenario.title)
    return " · ".join(titles) or "tensortrace"


def render_html(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """A standalone HTML page with inline styles."""
    return _recorded(traces, options).export_html(inline_styles=True)


def render_svg(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """An SVG image of the terminal output, titled with the scenarios' titles."""
    return _recorded(traces, options).export_svg(title=_title(traces))
