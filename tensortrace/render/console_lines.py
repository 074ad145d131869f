"""A step's one-line pieces on the terminal, written as the segments rich writes for them.

A step's title rule, the line that says what it ran, a warning or an
outcome are each one line of text in one style, indented. Drawn through
rich (a ``Rule``, a ``Padding`` around a ``Text``), each is measured,
wrapped, split into lines and padded through several layers of
renderables: at four tensors a step's small pieces cost more than its
table. Each piece here knows its reference drawing (``reference``) and,
when its text fits the width on one line with nothing rich would rewrite
(a tab, a newline, a control character), writes those same segments
itself; otherwise it hands rich the reference. The choice is made at
drawing time, where the width is known, by ``fits_line`` alone, and
``tests/render/test_console_lines.py`` checks, segment for segment, that
both ways draw the same, in colour and without, at several widths.
"""

from __future__ import annotations

from typing import Iterator, List

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.rule import Rule
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from .console_page import drawn_by_segments

TITLE_STYLE = "bold"
RULE_STYLE = "bright_blue"
RULE_CHARACTER = "─"
_NULL = Style()  # what Padding and Rule give the spaces they add
_LINE = Segment.line()


def fits_line(text: str, room: int) -> bool:
    """Whether ``text`` is one line rich would draw as it is, no wider on screen than ``room``.

    Characters that take no cell (a combining mark, a skin-tone modifier, a variation
    selector) are where rich's drawing is not the text itself: with no room at all it draws
    no line (a ``Rule`` only its rule), even for text of no width; and it crops whitespace
    at the end of a line longer than ``room`` in characters, though it fits in cells.
    """
    if room < 1 or not text.isprintable():  # tab, newline, control, separator: rich's to draw
        return False
    if text.isascii():
        return len(text) <= room
    return cell_len(text) <= room and (len(text) <= room or not text[-1].isspace())


class TextLine:
    """``Padding(Text(words, style=style), (0, 0, 0, indent))``: one line of prose under a step."""

    __slots__ = ("words", "style", "indent")
    drawn_text = drawn_by_segments  # the page's text without rich's layers (console_page)

    def __init__(self, words: str, style: str = "", indent: int = 2) -> None:
        self.words = words
        self.style = style
        self.indent = indent

    def reference(self) -> Padding:
        """The line as rich draws it, wrapping between words where it must."""
        return Padding(Text(self.words, style=self.style), (0, 0, 0, self.indent))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the reference, for a table or panel that sizes itself to its contents."""
        return Measurement.get(console, options, self.reference())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator:
        room = options.max_width - self.indent
        words = self.words
        if not words or self.indent <= 0 or not fits_line(words, room):
            yield self.reference()
            return
        yield Segment(" " * self.indent, _NULL)
        yield Segment(words, console.get_style(self.style)) if self.style else Segment(words)
        fill = room - (len(words) if words.isascii() else cell_len(words))
        if fill > 0:
            yield Segment(" " * fill, _NULL)
        yield _LINE


_BRANCH = str.maketrans({"├": "│", "└": " ", "─": " "})


def tree_rows(line: str, room: int) -> List[str]:
    """``line`` of a tree (``├─ ``, ``└─ ``, ``│``) cut into rows of at most ``room``
    characters between words; a row after the first starts under its own branch, its rails
    carried on, so that a long node never breaks the tree's drawing. ``[line]`` when it fits
    or the tree leaves no room for words."""
    head = len(line) - len(line.lstrip("│├└─ "))
    rails = line[:head].translate(_BRANCH) + "  "
    width = room - len(rails)
    if len(line) <= room or width < 12:
        return [line]
    rows: List[str] = []
    row = line[:head]
    start = len(row)
    for word in line[head:].split(" "):
        while len(word) > width:  # a word longer than a row: cut where the row ends
            if len(row) > start:
                rows.append(row)
                row = rails
                start = len(row)
            rows.append(row + word[: room - len(row)])
            word = word[room - len(row) :]
            row = rails
            start = len(row)
        if len(row) > start and len(row) + 1 + len(word) > room:
            rows.append(row)
            row, start = rails, len(rails)
        row += (" " if len(row) > start else "") + word
    rows.append(row)
    return rows


class TreeLine(TextLine):
    """A row of a tree, such as a gradient flow's: wrapped under its own branch
    (``tree_rows``), never back at the margin, where rich would wrap it."""

    __slots__ = ()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator:
        room = options.max_width - self.indent
        words = self.words
        # rich's own wrapping where a character is not one cell or not printable
        if fits_line(words, room) or not words.isprintable() or cell_len(words) != len(words):
            yield from super().__rich_console__(console, options)
            return
        for row in tree_rows(words, room):
            yield from TextLine(row, self.style, self.indent).__rich_console__(console, options)


class TitleLine:
    """``Rule(Text(title, style="bold"), align="left", style="bright_blue")``: a step's title."""

    __slots__ = ("title",)
    drawn_text = drawn_by_segments

    def __init__(self, title: str) -> None:
        self.title = title

    def reference(self) -> Rule:
        """The title as rich's ``Rule`` draws it, cut short with an ellipsis where it must."""
        return Rule(Text(self.title, style=TITLE_STYLE), align="left", style=RULE_STYLE)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the reference, for a table or panel that sizes itself to its contents."""
        return Measurement.get(console, options, self.reference())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator:
        width = options.max_width
        title = self.title
        # A Rule keeps two columns beside its title; past that it cuts the title short.
        if options.ascii_only or not title or not fits_line(title, width - 2):
            yield self.reference()
            return
        used = len(title) if title.isascii() else cell_len(title)
        yield Segment(title, console.get_style(TITLE_STYLE))
        yield Segment(" ", _NULL)
        yield Segment(RULE_CHARACTER * (width - used - 1), console.get_style(RULE_STYLE))
        yield _LINE


class BlankLine:
    """``Text("")``: the empty line before each step."""

    drawn_text = drawn_by_segments

    def reference(self) -> Text:
        return Text("")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the reference, for a table or panel that sizes itself to its contents."""
        return Measurement.get(console, options, self.reference())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator:
        yield Segment("")
        yield _LINE


BLANK = BlankLine()


def text_line(words: str, style: str = "", indent: int = 2) -> RenderableType:
    """One line of prose under a step, indented so that it wraps inside its margin."""
    return TextLine(words, style, indent)


__all__ = [
    "BLANK",
    "BlankLine",
    "TextLine",
    "TitleLine",
    "TreeLine",
    "fits_line",
    "text_line",
    "tree_rows",
]
