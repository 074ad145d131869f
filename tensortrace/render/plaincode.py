"""A step's code, drawn as rich's ``Syntax`` draws it, with its lines written directly.

Without colour the code is ``Syntax(code, "text", word_wrap=True, ...)``:
the same characters as highlighted Python, but importing ``rich.syntax``
(pygments with it) and building its theme cost a ``render`` about a
twentieth of its time. In colour it is ``Syntax(code, python_lexer, ...)``,
whose drawing (a console pass to wrap each line, and a gutter's styles
worked out again for every step) cost a coloured step more than its table.
``PlainCode`` draws the same lines itself: the same ``Text`` (in colour,
``Syntax.highlight``'s), split and wrapped by the same console calls, the
same gutter and the same measurement, so the output is byte-identical,
which ``tests/render/test_plaincode.py`` checks. Code that pygments' lexer
would first rewrite (carriage returns, a leading byte-order mark) goes to
``Syntax`` itself.
"""

from __future__ import annotations

from typing import Callable, Optional

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from . import console_lines
from .console_page import drawn_by_segments

TAB_SIZE = 4  # Syntax's default
_GUTTER_PADDING = 2  # rich.syntax.NUMBERS_COLUMN_DEFAULT_PADDING


# Syntax's gutter on a transparent background: the number dim, the rest unstyled.
_NUMBER_STYLE = Style(dim=True)


def plain_code(
    code: str, line: Optional[int], highlight: Optional[Callable[[str], Text]] = None
) -> Optional[RenderableType]:
    """``code`` drawn as ``Syntax`` would: without colour, or in colour with ``highlight``
    (a ``Syntax``'s own ``highlight``, whose lexer and theme it is drawn with).

    None where only ``Syntax`` draws it right.
    """
    if "\r" in code or code.startswith("\ufeff"):
        return None
    return PlainCode(code, line, highlight)


class PlainCode:
    """``Syntax(code, lexer, line_numbers=line is not None, start_line=line or 1, word_wrap=True,
    background_color="default")``: on a console without colour the lexer is ``"text"``; in colour,
    ``highlight`` is that ``Syntax``'s ``highlight``."""

    drawn_text = drawn_by_segments  # the page's text without rich's layers (console_page)

    def __init__(
        self, code: str, line: Optional[int], highlight: Optional[Callable[[str], Text]] = None
    ) -> None:
        self.code = code
        self.line_numbers = line is not None
        self.start_line = line or 1
        self.highlight = highlight

    def _gutter(self) -> int:
        if not self.line_numbers:
            return 0
        return len(str(self.start_line + self.code.count("\n"))) + _GUTTER_PADDING

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.code.splitlines()
        width = self._gutter() + (max(cell_len(line) for line in lines) if lines else 0)
        if self.line_numbers:
            width += 1
        return Measurement(self._gutter(), width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        gutter = self._gutter()
        code_width = max(
            0, options.max_width - gutter - 1 if self.line_numbers else options.max_width
        )
        new_line = Segment("\n")
        code = self.code
        if (
            self.highlight is None
            and "\n" not in code
            and "\t" not in code
            and code
            and console_lines.fits_line(code, code_width)
        ):
            # a step's usual code: one line without colour that needs no wrapping, drawn as below
            # without a Text (a render of 200 steps x 4 tensors: 248M -> 225M instructions)
            if self.line_numbers:
                yield Segment("  ")
                yield Segment(str(self.start_line).rjust(gutter - 2) + " ")
            yield Segment(code)
            yield new_line
            return
        # What the lexer hands Syntax back: the code, tabs expanded, ending in a newline.
        ends_on_newline = self.code.endswith("\n")
        source = (self.code if ends_on_newline else self.code + "\n").expandtabs(TAB_SIZE)
        if self.highlight is not None:
            text = self.highlight(source)
        else:
            text = Text(justify="default", tab_size=TAB_SIZE, no_wrap=False)
            text.append(source)
        wrap_options = options.update(width=code_width).update(height=None, justify="left")
        blank = Style.null()
        number_style = None if self.highlight is None else _NUMBER_STYLE
        for line_no, line in enumerate(
            text.split("\n", allow_blank=ends_on_newline), self.start_line
        ):
            plain = line.plain
            if plain and console_lines.fits_line(plain, code_width):
                # one line that needs no wrapping: the segments render_lines would give
                if self.highlight is None:
                    wrapped = [[Segment(plain)]]
                else:
                    wrapped = [list(line.render(console))]
            else:
                wrapped = console.render_lines(line, wrap_options, style=blank, pad=False)
            for first, row in enumerate(wrapped):
                if self.line_numbers:
                    if first == 0:
                        yield Segment("  ")
                        yield Segment(str(line_no).rjust(gutter - 2) + " ", number_style)
                    else:
                        yield Segment(" " * gutter + " ")
                yield from row
                yield new_line


__all__ = ["PlainCode", "plain_code"]
