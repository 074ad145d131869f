"""Renderers: a recorded trace in, text out.

``render(traces, fmt, options)`` is the one entry point, and ``FORMATS`` the
one list of formats, shared by ``run`` and ``render``. Every renderer has the
same shape, ``render_X(traces, options) -> str``; a format that is also
written while a run goes (``jsonl``) has a ``stream`` as well. Renderers read
the model and return a string; they never print, exit, look at the terminal,
or import torch, so a saved trace can be rendered again on a machine without
PyTorch.

Several traces of one scenario that differ only in ``scenario.variant`` are
rendered side by side; traces of different scenarios one after another.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Callable, Dict, Optional, Sequence, Tuple

from ..trace.collector import long_lived
from ..errors import UsageError
from ..trace import Trace
from .options import DEFAULT_OPTIONS, RenderOptions, Renderer, StreamRenderer

# format -> (module, function); modules are imported on first use, so that
# ``--format json`` never pays for rich.
_RENDERERS: Dict[str, Tuple[str, str]] = {
    "console": ("console", "render_console"),
    "json": ("json", "render_json"),
    "jsonl": ("jsonl", "render_jsonl"),
    "markdown": ("markdown", "render_markdown"),
    "html": ("html", "render_html"),
    "svg": ("export", "render_svg"),
    "dot": ("diagram", "render_dot"),
    "mermaid": ("diagram", "render_mermaid"),
}

FORMATS: Tuple[str, ...] = tuple(_RENDERERS)


def check_format(fmt: str) -> str:
    """The format named (any case), or a ``UsageError`` that lists the choices."""
    name = fmt.lower()
    if name not in _RENDERERS:
        raise UsageError(f"--format {fmt.lower()!r} is not one of {', '.join(FORMATS)}")
    return name


def renderer(fmt: str) -> Renderer:
    """The function that renders ``fmt``."""
    try:
        module, function = _RENDERERS[fmt]
    except KeyError:
        raise UsageError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}") from None
    loaded = sys.modules.get(f"{__name__}.{module}")
    if loaded is None:
        with long_lived():  # a renderer's modules (rich's) live as long as the process
            loaded = import_module(f".{module}", __name__)
    return getattr(loaded, function)


def stream(fmt: str) -> Optional[StreamRenderer]:
    """The live form of ``fmt`` (its text for each event as a run goes), or None for a document."""
    if fmt == "jsonl":
        from .jsonl import JsonlStream

        return JsonlStream()
    return None


def render(traces: Sequence[Trace], fmt: str, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """All traces (one per scenario, or one per variant of a scenario) in one format."""
    return renderer(fmt)(list(traces), options)


# Formats whose document can be large, written a piece at a time: format -> (module, function).
_WRITERS: Dict[str, Tuple[str, str]] = {
    "json": ("json", "write_json"),
    "html": ("html", "write_html"),
}


def render_to(
    traces: Sequence[Trace],
    fmt: str,
    write: Callable[[str], None],
    options: RenderOptions = DEFAULT_OPTIONS,
) -> None:
    """``render``, handing the text to ``write`` as it is made where the format allows it
    (JSON and HTML), so that a large document is never whole in memory."""
    if fmt not in _WRITERS:
        write(render(traces, fmt, options))
        return
    renderer(fmt)  # imports the module
    module, function = _WRITERS[fmt]
    getattr(sys.modules[f"{__name__}.{module}"], function)(list(traces), write, options)


__all__ = [
    "FORMATS",
    "RenderOptions",
    "Renderer",
    "StreamRenderer",
    "check_format",
    "render",
    "render_to",
    "renderer",
    "stream",
]
