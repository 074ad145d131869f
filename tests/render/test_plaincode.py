"""``PlainCode`` draws exactly what rich's ``Syntax`` draws, byte for byte: without colour (the
plain-text lexer) and in colour (highlighted as Python, with every style's escape code)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.render.console_parts import SYNTAX_THEME, code_syntax, highlighted
from tensortrace.render.plaincode import PlainCode, plain_code
from tensortrace.scenario import load_scenario


def _syntax(code: str, line, color: bool = False):
    return Syntax(
        code,
        "python" if color else "text",
        theme=SYNTAX_THEME,
        line_numbers=line is not None,
        start_line=line or 1,
        word_wrap=True,
        background_color="default",
    )


def _plain(code: str, line, color: bool = False):
    return plain_code(code, line, highlighted if color else None)


def _draw(renderable, width: int, color: bool = False) -> str:
    console = Console(
        file=io.StringIO(),
        width=width,
        color_system="truecolor" if color else None,
        force_terminal=color,
        highlight=False,
        markup=False,
        emoji=False,
        _environ={},
    )
    console.print(renderable)
    return console.file.getvalue()


def _in_a_table(code: str, line, draw) -> Table:
    """Two code cells side by side, as variants are drawn: the columns take their width from the
    measurement."""
    table = Table()
    table.add_column("a")
    table.add_column("b")
    table.add_row(draw(code, line), draw("y = 1", None))
    return table


def _same(code: str, line, width: int, color: bool = False) -> None:
    plain = _plain(code, line, color)
    assert isinstance(plain, PlainCode), code
    theirs = _draw(_syntax(code, line, color), width, color)
    assert _draw(plain, width, color) == theirs, (code, line, width, color)
    ours = _in_a_table(code, line, lambda c, n: _plain(c, n, color))
    theirs = _in_a_table(code, line, lambda c, n: _syntax(c, n, color))
    assert _draw(ours, width, color) == _draw(theirs, width, color), (code, line, width, color)


def _library_code():
    codes = []
    for name in bundled_names():
        scenario = load_scenario(bundled_path(name))
        for _, code, _ in scenario.all_code():
            codes.append(code.text.rstrip("\n"))
    assert all(plain_code(c, 1) is not None for c in codes)
    return codes


TRICKY = [
    "",
    "x = 1",
    "a = torch.ones(3)\n\n\nb = a * 2",
    "    indented = True\nback = 1",
    "trailing   \n  spaces  ",
    "tab\there\n\tand\tthere",
    "wide 中文字符 " * 9,
    "emoji 🙂 " * 12,
    "a_very_long_identifier_without_any_space_" * 4,
    "words " * 40,
    "x = 1\n" * 12,
    "last line blank\n ",
    "ends with many newlines\n\n\n",
    "\n\nleading newlines",
    "[bold]not markup[/bold] and :smile:",
]


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [20, 41, 80, 130])
@pytest.mark.parametrize("line", [None, 1, 7, 98, 1000])
def test_plain_code_draws_what_syntax_draws(width, line, color):
    for code in TRICKY:
        _same(code, line, width, color)


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [30, 100])
def test_the_librarys_code_takes_the_cheap_path_and_draws_the_same(width, color):
    library = _library_code()
    assert len(library) > 100
    for code in library:
        _same(code, 12, width, color)


@settings(max_examples=150, deadline=None)
@given(
    code=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\ufeff"), max_size=120
    ),
    line=st.one_of(st.none(), st.integers(1, 20000)),
    width=st.integers(8, 120),
)
def test_plain_code_draws_what_syntax_draws_for_any_text(code, line, width):
    _same(code, line, width)
    _same(code, line, width, color=True)


def test_what_the_lexer_would_rewrite_goes_to_syntax():
    for code in ["carriage\rreturn", "windows\r\nline", "\ufeffbom"]:
        assert plain_code(code, 1) is None
        assert isinstance(code_syntax(code, 1, color=False), Syntax)
    assert isinstance(code_syntax("x = 1", 3, color=False), PlainCode)
    assert isinstance(code_syntax("x = 1", 3, color=True), PlainCode)
    assert isinstance(code_syntax("windows\r\nline", 3, color=True), Syntax)
