"""The console page written directly (``page_text``) is, character for character, what rich
prints for the same parts (``reference_text``): in colour and without, at several widths, for
the fixed traces and for bundled scenarios recorded now (variants side by side, autograd trees,
errors, warnings, NumPy arrays, shared memory)."""

from __future__ import annotations

import pytest

import tensortrace
from render_fixtures import detach_trace, recorded_traces, troubled_trace
from tensortrace.render import RenderOptions, render
from tensortrace.render.console import console_renderables
from tensortrace.render.console_page import page_text, reference_text
from tensortrace.render.console_parts import make_console
from tensortrace.scenario.library import bundled_path

SCENARIOS = [
    "detach-vs-data",  # variants side by side
    "gradient-flow",  # trees and gradient flow
    "inplace-error-message",  # an error
    "numpy-sharing",  # arrays, shared memory
    "views",  # offsets, strides
    "backward-twice",
    "silent-write",
]


@pytest.fixture(scope="module")
def traces() -> list:
    found = [detach_trace(), troubled_trace(), *recorded_traces("detach-vs-data")]
    for name in SCENARIOS:
        got = tensortrace.trace(bundled_path(name), safe=False)
        found.extend([got] if hasattr(got, "steps") else list(got))  # variants: several
    return found


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [40, 61, 100])
def test_the_page_is_what_rich_prints(traces, width: int, color: bool):
    options = RenderOptions(width=width, color=color, ops="calls")
    for trace in traces:
        parts = console_renderables([trace], options, width=width, color=color)
        ours = page_text(make_console(width, color), parts)
        assert ours == reference_text(make_console(width, color), parts), trace.scenario.title


def test_a_table_line_written_once_is_not_reused_at_another_width(traces):
    """A console keeps each table line it wrote; a line is kept for its columns' widths and the
    page's width together, so a narrower page never gets a wider page's line."""
    options = RenderOptions(width=100, color=False)
    wide = console_renderables(traces[:1], options, width=100, color=False)
    narrow = console_renderables(traces[:1], RenderOptions(width=70), width=70, color=False)
    console = make_console(100, False)
    page_text(console, wide)
    console.width = 70
    assert page_text(console, narrow) == reference_text(make_console(70, False), narrow)


def test_the_rendered_page_is_the_written_page(traces):
    options = RenderOptions(width=80, color=True)
    parts = console_renderables(traces, options, width=80, color=True)
    assert render(traces, "console", options) == page_text(make_console(80, True), parts)
