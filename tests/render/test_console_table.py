"""A step's table written as lines is, segment for segment, what rich's Table draws.

``console_table.TableLines`` writes a table whose cells all fit on one line
straight as segments; ``reference_table`` is rich's ``Table`` over the same
cells. Every table of these traces is drawn both ways and compared as
segments (what the terminal, HTML and SVG are made of), in colour and
without, at several widths; and whole pages are compared with the plain
path forced.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.padding import Padding

from render_fixtures import (
    ENV,
    detach_trace,
    recorded_traces,
    tensor,
    troubled_trace,
)
from tensortrace.trace import ScenarioInfo, Step, Trace, evolve
from tensortrace.render import RenderOptions, render
from tensortrace.render import console_table
from tensortrace.render.console_parts import TABLE_INDENT, View
from tensortrace.render.facts import with_previous
from tensortrace.render.layout import run_columns, table_rows
from tensortrace.render.visible import visible_traces

WIDTHS = (40, 60, 80, 100, 160)


def odd_trace() -> Trace:
    """Names and facts that style a cell in pieces: new, same object, ndarray, marks, dims."""
    a = tensor("a", (1.0, 2.0), requires_grad=True)
    b = evolve(tensor("b", (1.0, 2.0)), same_as="a")
    n = evolve(tensor("n", (3.0, 4.0), storage="S2", dtype="torch.float64"), kind="ndarray")
    g = tensor("grad_me", (0.5,), storage="S3", requires_grad=True, grad=(1.0,))
    h = tensor(
        "h",
        ((1.0, 2.0), (3.0, 4.0)),
        storage="S4",
        is_leaf=False,
        grad_fn="MulBackward0",
        requires_grad=True,
    )
    wide = tensor("名前", (7.0,), storage="S5")
    first = Step(index=1, code="a = ...", line=1, tensors=(a, b, n, g, h, wide))
    changed = (
        evolve(a, version=1, values=tensor("a", (2.0, 3.0)).values),
        b,
        n,
        evolve(g, grad=None),
        h,
        wide,
    )
    second = Step(index=2, code="a.add_(1)", line=2, tensors=changed)
    return Trace(scenario=ScenarioInfo(title="odd cells"), environment=ENV, steps=(first, second))


def many_trace(count: int = 30) -> Trace:
    states = tuple(tensor(f"t{i}", (0.0,) * 4, storage=f"S{i + 1}") for i in range(count))
    bumped = tuple(evolve(s, version=1) if i == 3 else s for i, s in enumerate(states))
    steps = (
        Step(index=1, code="bind", line=1, tensors=states),
        Step(index=2, code="t3.add_(1)", line=2, tensors=bumped),
    )
    return Trace(scenario=ScenarioInfo(title="many"), environment=ENV, steps=steps)


def all_traces():
    return [
        detach_trace(),
        troubled_trace(),
        odd_trace(),
        many_trace(),
        *recorded_traces("detach-vs-data"),
    ]


def _console(width: int, color: bool) -> Console:
    return Console(
        file=io.StringIO(),
        width=width,
        color_system="truecolor" if color else None,
        force_terminal=color,
        markup=False,
        highlight=False,
        emoji=False,
        _environ={},
    )


def _segments(console: Console, renderable) -> list:
    """Every segment as its repr, which SVG's identifiers hash (a missing style is not Style())."""
    return [repr(segment) for segment in console.render(renderable)]


def _tables(trace: Trace, view: View):
    columns = run_columns([trace], view.options)
    for prev, step in with_previous(trace):
        _, rows = table_rows(prev, step, view.options)
        if rows:
            yield rows, columns


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_lines_are_the_tables_segments(width: int, color: bool):
    drawn = 0
    for trace in visible_traces(all_traces()):
        view = View(RenderOptions(width=width, color=color), width, color)
        for rows, columns in _tables(trace, view):
            cells = [console_table.row_cells(row, columns, view) for row in rows]
            widths = console_table.column_widths(cells, columns, view)
            if widths is None or not console_table.fits_on_lines(cells, widths):
                continue
            console = _console(width, color)
            lines = _segments(console, console_table.TableLines(columns, cells, widths))
            table = console_table.reference_table(columns, cells, widths)
            assert lines == _segments(console, Padding(table, (0, 0, 0, TABLE_INDENT)))
            drawn += 1
    if width >= 80:
        assert drawn >= 8  # the comparison really ran, over tables of every trace


def test_a_wide_character_or_a_second_line_goes_to_the_table():
    view = View(RenderOptions(width=100), 100, False)
    trace = odd_trace()
    columns = run_columns([trace], view.options)
    _, rows = table_rows(None, trace.steps[0], view.options)
    cells = [console_table.row_cells(row, columns, view) for row in rows]
    widths = console_table.column_widths(cells, columns, view)
    assert widths is not None and not console_table.fits_on_lines(cells, widths)
    rest = [c for c, row in zip(cells, rows) if row.state.name not in ("名前", "h")]
    assert console_table.fits_on_lines(rest, widths)


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("fmt", ["console", "svg"])
def test_pages_are_the_same_through_the_table(monkeypatch, fmt: str, color: bool):
    traces = all_traces()
    options = RenderOptions(width=80, color=color)
    fast = render(traces, fmt, options)
    monkeypatch.setattr(console_table, "fits_on_lines", lambda cells, widths: False)
    assert _first_difference(render(traces, fmt, options), fast) is None


def _first_difference(expected: str, got: str):
    """The first line where two pages differ (a short message rather than a huge diff)."""
    if expected == got:
        return None
    pairs = zip(expected.splitlines(), got.splitlines())
    return next(((n, a, b) for n, (a, b) in enumerate(pairs, 1) if a != b), "lengths differ")
