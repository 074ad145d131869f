"""A step's one-line pieces written as segments are, segment for segment, what rich draws.

``console_lines`` writes a step's title rule, its prose lines and its blank
line straight as segments when they fit on one line; each piece keeps its
rich drawing as ``reference``. Both are drawn and compared as segments (what
the terminal, HTML and SVG are made of), in colour and without, at several
widths, over texts at and around the edges of the fast path; and whole pages
are compared with the reference path forced.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from render_fixtures import detach_trace, recorded_traces, troubled_trace
from tensortrace.render import RenderOptions, render
from tensortrace.render import console_lines
from tensortrace.render.console_lines import BLANK, TextLine, TitleLine
from tensortrace.render.console_parts import highlighted
from tensortrace.render.plaincode import PlainCode

WIDTHS = (20, 40, 80, 100, 160)
STYLES = ("", "dim", "bold", "bold yellow", "green")
TEXTS = (
    "ran:",
    "Step 2 · line 19",
    "setup",
    "⚠ predicted: x.backward() will fail",
    "shared memory: S1 holds a, b",
    "名前 (new) 変数",
    "  leading spaces",
    "trailing spaces  ",
    "a" * 17,
    "a" * 18,
    "a" * 19,
    "a" * 38,
    "a" * 40,
    "two words " * 12,
    "tab\there",
    "new\nline",
    "\x1b[31mred",
    "line\u2028separator",
    "",
    " ",
    "e\u0301" * 10 + "  ",
    "\U0001f44d\U0001f3fd ok ",
)


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


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_lines_are_the_references_segments(width: int, color: bool):
    console = _console(width, color)
    fast = 0
    for text in TEXTS:
        for style in STYLES:
            for indent in (2, 4, 6):
                line = TextLine(text, style, indent)
                assert _segments(console, line) == _segments(console, line.reference()), (
                    text,
                    style,
                    indent,
                )
                fast += bool(text) and console_lines.fits_line(text, width - indent)
        title = TitleLine(text)
        assert _segments(console, title) == _segments(console, title.reference()), text
    assert _segments(console, BLANK) == _segments(console, BLANK.reference())
    assert fast >= 40  # the fast path really ran, not only the reference


# Characters that take no cell, where rich's drawing is not the text itself: with no room
# at all (a lone skin-tone modifier, combining mark, variation selector or virama), and
# whitespace at the end of a line longer than its room in characters.
@example(text="\U0001f3fb", width=1, indent=1, color=False)
@example(text="\u0301", width=1, indent=1, color=True)
@example(text="\ufe0f", width=3, indent=3, color=False)
@example(text="\ua9c0", width=7, indent=7, color=False)
@example(text="\U0001f3ff", width=2, indent=4, color=False)
@example(text="\u0325\u0355", width=2, indent=7, color=True)
@example(text="\U0001f3fd\U0001f3ff ", width=6, indent=5, color=False)
@example(text="\u0301\u0301 ", width=7, indent=5, color=False)
@example(text="\u0301a ", width=7, indent=5, color=True)
@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=50),
    width=st.integers(1, 60),
    indent=st.integers(1, 8),
    color=st.booleans(),
)
def test_any_text_draws_as_rich_draws_it(text: str, width: int, indent: int, color: bool):
    console = _console(width, color)
    line = TextLine(text, "dim", indent)
    assert _segments(console, line) == _segments(console, line.reference())
    title = TitleLine(text)
    assert _segments(console, title) == _segments(console, title.reference())


def test_a_table_sizes_a_piece_as_it_sizes_the_reference():
    from rich.measure import Measurement
    from rich.table import Table

    console = _console(80, False)
    for piece in (TextLine("ran:", "dim", 4), TitleLine("Step 2 · line 19"), BLANK):
        measured = Measurement.get(console, console.options, piece)
        assert measured == Measurement.get(console, console.options, piece.reference())
        table, reference = Table(), Table()
        table.add_row(piece, "x")
        reference.add_row(piece.reference(), "x")
        assert _segments(console, table) == _segments(console, reference)


def test_what_rich_would_rewrite_goes_to_rich():
    assert console_lines.fits_line("Step 2 · line 19", 16)
    assert not console_lines.fits_line("Step 2 · line 19", 15)
    assert not console_lines.fits_line("名前", 3)  # two columns a character
    for text in ("a\tb", "a\nb", "a\x1bb", "a\u2028b", "a\x85b"):
        assert not console_lines.fits_line(text, 80)
    assert console_lines.fits_line("\U0001f3fb", 1)  # a modifier takes no cell ...
    assert not console_lines.fits_line("\U0001f3fb", 0)  # ... but with no room rich draws none
    assert console_lines.fits_line("e\u0301 ", 3)
    assert not console_lines.fits_line("e\u0301 ", 2)  # 2 cells, but rich crops 3 characters


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", (10, 30, 80))
def test_code_lines_are_what_render_lines_gives(monkeypatch, width: int, color: bool):
    console = _console(width, color)
    highlight = highlighted if color else None
    codes = [
        ("t0.add_(1)", 5),
        ("x = 1\n\ny = x + 2\n", None),
        ("y = " + "x + " * 30, 120),
        ("名前 = torch.ones(3)", 1),
        ("if x:\n\tpass", 9),
    ]
    fast = [_segments(console, PlainCode(code, line, highlight)) for code, line in codes]
    monkeypatch.setattr(console_lines, "fits_line", lambda text, room: False)
    assert fast == [_segments(console, PlainCode(code, line, highlight)) for code, line in codes]


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("fmt", ["console", "svg"])
def test_pages_are_the_same_through_rich(monkeypatch, fmt: str, color: bool):
    traces = [detach_trace(), troubled_trace(), *recorded_traces("detach-vs-data")]
    for width in (60, 100):
        options = RenderOptions(width=width, color=color, ops="calls")
        fast = render(traces, fmt, options)
        with monkeypatch.context() as patch:
            patch.setattr(console_lines, "fits_line", lambda text, room: False)
            assert render(traces, fmt, options) == fast


# --- a tree's rows: a long node wraps under its own branch --------------------------------

TREE = [
    "    └─ [1., 1., 1., 1.] → MulBackward0",
    "       ├─ [0.5, 0.25, 0.125, 0.0625] → AccumulateGrad → weight_of_the_first_layer.grad:"
    " None → [0.5, 0.25, 0.125, 0.0625]",
    "       └─ [1.235, 2.346, 3.457, 4.568] → AccumulateGrad → b.grad: None → [1.235, 2.346]",
]


@pytest.mark.parametrize("room", [30, 40, 60, 78, 120])
def test_a_tree_row_wraps_under_its_branch(room: int):
    for line in TREE:
        rows = console_lines.tree_rows(line, room)
        if len(line) <= room:
            assert rows == [line]
            continue
        assert len(rows) > 1
        assert all(len(row) <= room for row in rows)
        head = line[: len(line) - len(line.lstrip("│├└─ "))]
        assert rows[0].startswith(head)
        rails = head.replace("├─ ", "│  ").replace("└─ ", "   ") + "  "
        for row in rows[1:]:
            assert row.startswith(rails) and row[len(rails)] != " "
        # nothing lost or reordered: each break took the place of one space (where no word
        # is longer than a row, which is cut instead)
        if max(map(len, line.split(" "))) > room - len(rails):
            continue
        pieces = [rows[0][len(head) :]] + [row[len(rails) :] for row in rows[1:]]
        assert " ".join(pieces) == line[len(head) :]


def test_a_word_longer_than_a_row_is_cut_at_the_rows_end():
    line = "       └─ " + "x" * 50 + " → AccumulateGrad"
    rows = console_lines.tree_rows(line, 30)
    assert all(len(row) <= 30 for row in rows)
    assert "".join(rows).replace("x", "").replace(" ", "") == "└─→AccumulateGrad"
    assert sum(r.count("x") for r in rows) == 50


def test_a_gradient_flow_keeps_its_rails_on_the_console():
    """A leaf's long AccumulateGrad row at width 80 wraps inside the tree, never at the margin."""
    import tensortrace

    scenario = tensortrace.loads_scenario(
        "title: wrap\n"
        "setup: |\n"
        "  weight_of_the_first_layer = torch.tensor([1.2345, 2.3456, 3.4567, 4.5678],"
        " requires_grad=True)\n"
        "  b = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)\n"
        "steps:\n"
        "  - run: |\n"
        "      loss = (weight_of_the_first_layer * b).sum()\n"
        "      loss.backward()\n",
        path="wrap.yaml",
    )
    trace = tensortrace.trace(scenario, safe=False)
    text = render([trace], "console", RenderOptions(width=80))
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "gradient flow of" in line)
    tree = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        tree.append(line)
    assert any("weight_of_the_first_layer.grad" in line for line in tree)
    assert any(line.lstrip().startswith("│") for line in tree)  # a continuation under ├─
    assert all(len(line.rstrip()) <= 80 for line in tree)
    # the next line after the tree is the prediction, not a wrapped piece of a node
    assert lines[start + 1 + len(tree)].lstrip().startswith(("⚠", "1 step", ""))
