"""Rendering called from Python: ``Trace.render(fmt, ...)`` and what Jupyter shows.

The command line builds ``RenderOptions`` from its flags; here they are
keyword arguments, checked and named as Python names them (``fmt=``,
``steps=``), and the notebook views are the HTML fragment (the console
rendering in colour, without a page around it) and the markdown rendering.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ..errors import UsageError
from ..trace import Trace
from . import FORMATS, render
from .ops import LEVELS
from .options import RenderOptions

NOTEBOOK_WIDTH = 110  # columns of the console rendering a notebook shows


def render_traces(
    traces: Sequence[Trace],
    fmt: str = "console",
    *,
    steps: Optional[Iterable[int]] = None,
    changes_only: bool = False,
    all_rows: bool = False,
    show: Optional[Iterable[str]] = None,
    values: object = True,
    width: Optional[int] = None,
    color: bool = False,
    ops: str = "calls",
    iterations: str = "first",
) -> str:
    """``traces`` in format ``fmt`` (one of ``tensortrace.render.FORMATS``); ``values="full"``,
    ``ops`` and ``iterations`` as ``--values full``, ``--ops`` and ``--iterations``."""
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise UsageError(f"fmt={fmt!r} is not one of {', '.join(FORMATS)}")
    if values not in (True, False, "full"):
        raise UsageError(f"values={values!r} is not one of True, False, 'full'")
    if ops not in LEVELS:
        raise UsageError(f"ops={ops!r} is not one of {', '.join(LEVELS)}")
    if iterations not in ("first", "all"):
        raise UsageError(f"iterations={iterations!r} is not one of first, all")
    if isinstance(show, str):
        raise UsageError("show= takes a list of names, e.g. show=['a', 'b']")
    if steps is not None:
        steps = frozenset(steps)
        if not all(isinstance(s, int) and s >= 1 for s in steps):
            raise UsageError("steps= takes step numbers, counted from 1, e.g. steps=[1, 3]")
    options = RenderOptions(
        steps=steps,
        changes_only=changes_only,
        all_rows=all_rows,
        show=tuple(show) if show is not None else None,
        values=bool(values),
        width=width,
        color=color,
        ops=ops,
        full_values=values == "full",
        iterations=iterations,
    )
    return render(list(traces), fmt.lower(), options)


def html(traces: Sequence[Trace], width: int = NOTEBOOK_WIDTH) -> str:
    """What a notebook shows: the console rendering, in colour, as one ``<div>``."""
    from .export import render_html_fragment

    return render_html_fragment(list(traces), RenderOptions(width=width))


def markdown(traces: Sequence[Trace]) -> str:
    """The markdown rendering (for front ends that show markdown, not HTML)."""
    return render(list(traces), "markdown")


__all__ = ["NOTEBOOK_WIDTH", "html", "markdown", "render_traces"]
