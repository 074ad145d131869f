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


# A piece of a page rather than a page: no <head> or <body> rules, so that it
# can sit inside a notebook without restyling the notebook around it.
_FRAGMENT = (
    '<div class="tensortrace" style="color:{foreground};background-color:{background};padding:0.5em 1em;overflow-x:auto">'
    "<pre style=\"font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace;margin:0;"
    'color:inherit;background-color:inherit"><code style="font-family:inherit">{code}</code></pre></div>'
)


def render_html_fragment(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The console rendering as one inline-styled ``<div>`` (what a notebook shows)."""
    return _recorded(traces, options).export_html(inline_styles=True, code_format=_FRAGMENT)
