"""Renderers: a recorded trace in, text out.

``render(traces, fmt, options)`` is the one entry point. Renderers read the
model and return a string; they never print, exit, or import torch, so a saved
trace can be rendered again on a machine without PyTorch.

Several traces of one scenario that differ only in ``scenario.variant`` are
rendered side by side; traces of different scenarios one after another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Optional, Sequence, Tuple

from ..errors import UsageError
from ..model import Trace

FORMATS = ("console", "json", "markdown", "html", "svg", "dot", "mermaid")


@dataclass(frozen=True)
class RenderOptions:
    """What to show. The defaults show everything the trace holds."""

    steps: Optional[FrozenSet[int]] = None  # step indexes to show (1-based); None: all
    changes_only: bool = False  # only rows whose facts changed in that step
    show: Optional[Tuple[str, ...]] = None  # names to show (overrides the scenario's)
    values: bool = True  # False: no values/grad columns
    width: Optional[int] = None  # console width; None: terminal's, or 100 when not a terminal
    color: bool = False  # ANSI colour in console output


def _console(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .console import render_console

    return render_console(traces, options)


def _json(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .json import render_json

    return render_json(traces)


def _markdown(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .markdown import render_markdown

    return render_markdown(traces, options)


def _html(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .export import render_html

    return render_html(traces, options)


def _svg(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .export import render_svg

    return render_svg(traces, options)


def _dot(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .diagram import render_dot

    return render_dot(traces, options)


def _mermaid(traces: Sequence[Trace], options: RenderOptions) -> str:
    from .diagram import render_mermaid

    return render_mermaid(traces, options)


_RENDERERS: Dict[str, Callable[[Sequence[Trace], RenderOptions], str]] = {
    "console": _console,
    "json": _json,
    "markdown": _markdown,
    "html": _html,
    "svg": _svg,
    "dot": _dot,
    "mermaid": _mermaid,
}


def render(traces: Sequence[Trace], fmt: str, options: RenderOptions = RenderOptions()) -> str:
    """All traces (one per scenario, or one per variant of a scenario) in one format."""
    try:
        renderer = _RENDERERS[fmt]
    except KeyError:
        raise UsageError(
            f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}"
        ) from None
    return renderer(list(traces), options)


__all__ = ["FORMATS", "RenderOptions", "render"]
