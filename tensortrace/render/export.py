"""SVG: the console rendering, recorded in colour and exported by rich.

An image then shows exactly what the terminal shows, colours included. It
loads nothing: rich's template asks a CDN for the Fira Code font, and that
request is taken out here (the font is still used when installed locally,
else the viewer's monospace), so an image opened offline makes no request.
(``--format html`` is its own page, drawn by ``html.py``.)
"""

from __future__ import annotations

import inspect
import re
from typing import Sequence

from rich.console import Console

from ..trace import Trace
from .console import console_renderables
from .console_parts import make_console
from .options import DEFAULT_OPTIONS, DEFAULT_WIDTH, RenderOptions
from .visible import visible_traces


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


# rich's own template, read from its public signature rather than its private module.
_RICH_SVG_FORMAT = inspect.signature(Console.export_svg).parameters["code_format"].default
# rich's SVG template without its font download and its link in a comment: each
# ``url("https://…") format("…")`` source of the @font-face rules goes, ``local(…)`` stays.
OFFLINE_SVG_FORMAT = re.sub(
    r"<!--[^>]*https?://[^>]*-->",
    "",
    re.sub(r',\s*url\("https?://[^"]*"\)\s*format\("[^"]*"\)', "", _RICH_SVG_FORMAT),
)


def render_svg(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """An SVG image of the terminal output, titled with the scenarios' titles."""
    return _recorded(traces, options).export_svg(
        title=_title(traces), code_format=OFFLINE_SVG_FORMAT
    )


# A piece of a page rather than a page: no <head> or <body> rules, so that it
# can sit inside a notebook without restyling the notebook around it.
_FRAGMENT = (
    '<div class="tensortrace" style="color:{foreground};background-color:{background};'
    'padding:0.5em 1em;overflow-x:auto">'
    "<pre style=\"font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace;margin:0;"
    'color:inherit;background-color:inherit">'
    '<code style="font-family:inherit">{code}</code></pre></div>'
)


def render_html_fragment(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The console rendering as one inline-styled ``<div>`` (what a notebook shows)."""
    return _recorded(traces, options).export_html(inline_styles=True, code_format=_FRAGMENT)
