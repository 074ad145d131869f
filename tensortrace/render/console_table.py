"""A step's table on the terminal: its cells, their widths, and the two ways of drawing them.

Each cell is described once (``Cell``: its text in styled pieces) and its
width measured once. A table whose every cell fits its column on one line,
which is nearly every table, is written straight as lines of styled segments
(``TableLines``); one that must wrap is handed to rich's ``Table``
(``reference_table``), which wraps between elements. Both draw the same
cells, and ``tests/render/test_console_table.py`` checks that the lines are,
segment for segment, what the ``Table`` draws: rich's ``Table`` measures and
pads every cell through several layers of renderables, about 0.65 ms a row,
ten times what writing the row costs.

When the columns cannot fit the width at all, each tensor becomes a block
of lines instead (``state_cards``).
"""

from __future__ import annotations

import functools
import weakref

from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..trace import TensorState
from .console_page import segments_text as _text
from .console_parts import (
    CHANGED_MARK,
    CHANGED_STYLE,
    TABLE_INDENT,
    WRAPPING_COLUMNS,
    View,
    facts_text,
    storage_colour,
)
from .layout import Row
from .facts import same
from .text import fact_text, format_storage

HEADERS = {
    "version": "ver",
    "requires_grad": "req_grad",
    "is_leaf": "leaf",
    "contiguous": "contig",
    "retains_grad": "retains",
    "grad_norm": "grad norm",
}
HEADER_STYLE = "bold"
RIGHT_ALIGNED = frozenset({"version"})
# Between two columns: the cell's right padding, then the (blank) column divider.
GAP = 2


class Cell(NamedTuple):
    """A cell's text as styled pieces, over a style for the whole cell and its padding.

    ``make_cell`` measures the text once: a kept cell is measured once per run,
    not once per step that shows it.
    """

    pieces: Tuple[Tuple[str, str], ...]
    style: str = ""
    plain: str = ""  # the pieces' text, joined once
    widest: int = 0  # its longest line, in characters
    word: int = 0  # its longest word, in characters
    screen: int = -1  # its width on screen when it is one line with no tab, else -1

    def text(self) -> Text:
        """The cell as rich ``Text`` (what the reference table draws)."""
        text = Text("", style=self.style)
        for piece, style in self.pieces:
            text.append(piece, style=style)
        return text


@functools.lru_cache(maxsize=4096)  # most cells ("S2", "0", "False", "None") recur at every step
def make_cell(pieces: Tuple[Tuple[str, str], ...], style: str = "") -> Cell:
    plain = "".join(text for text, _ in pieces)
    flat = "\n" not in plain and "\t" not in plain
    return Cell(
        pieces,
        style,
        plain,
        len(plain) if flat else _widest_line(plain),
        _longest_word(plain),
        screen_width(plain) if flat else -1,
    )


def screen_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (a wide character takes two)."""
    return len(text) if text.isascii() else cell_len(text)


# A tensor's record and the cells drawn for it (``state_table``'s ``drawn``).
Kept = Tuple[TensorState, List["Cell"]]


def state_table(
    rows: Sequence[Row],
    columns: Sequence[str],
    view: View,
    drawn: Optional[Dict[TensorState, Kept]] = None,
) -> RenderableType:
    """One row per tensor; when the columns cannot fit the width, one block per tensor.

    ``drawn`` (one per run, whose columns are fixed) keeps the cells of each
    unchanged tensor, which most steps show again as they were.
    """
    cells = [_row_cells_kept(row, columns, view, drawn) for row in rows]
    widths = column_widths(cells, columns, view)
    if widths is None:
        return state_cards(rows, columns, view)
    if fits_on_lines(cells, widths):
        return TableLines(columns, cells, widths)
    return Padding(reference_table(columns, cells, widths), (0, 0, 0, TABLE_INDENT))


def _row_cells_kept(
    row: Row, columns: Sequence[str], view: View, drawn: Optional[Dict[TensorState, Kept]]
) -> List[Cell]:
    if drawn is None or row.changed or row.new:  # marks depend on the step before
        return row_cells(row, columns, view)
    try:
        kept = drawn.get(row.state)
    except TypeError:  # a record holding something unhashable: drawn afresh
        return row_cells(row, columns, view)
    if kept is not None and same(kept[0], row.state):  # equal is not enough: -0.0 == 0.0
        return kept[1]
    cells = row_cells(row, columns, view)
    drawn[row.state] = (row.state, cells)
    return cells


def row_cells(row: Row, columns: Sequence[str], view: View) -> List[Cell]:
    """The cells of one tensor's row, in column order, each with its change mark."""
    state, changed, new = row
    cells = []
    for column in columns:
        if column == "name":
            cells.append(name_cell(state, new, view))
            continue
        text = fact_text(state, column, view.full)
        style = storage_colour(state.storage, view) if column == "storage" else ""
        if text == "None" and column in ("grad", "grad_fn"):
            style = "dim"
        if column in changed and not new:
            # As console_parts.mark_cell: highlighted in colour, else marked.
            pieces = ((text, CHANGED_STYLE),) if view.color else ((text + CHANGED_MARK, ""),)
        else:
            pieces = ((text, ""),)
        cells.append(make_cell(pieces, style))
    return cells


def name_cell(state: TensorState, new: bool, view: View) -> Cell:
    pieces = [(state.name, "")]
    if new:
        pieces.append((" (new)", "green" if view.color else ""))
    if state.same_as is not None:
        pieces.append((f" (same object as {state.same_as})", "cyan" if view.color else ""))
    if state.kind == "ndarray":
        pieces.append((" ndarray", "dim"))
    return make_cell(tuple(pieces), "bold")


def column_widths(
    cells: Sequence[Sequence[Cell]], columns: Sequence[str], view: View
) -> Optional[Dict[str, int]]:
    """Width of each column's text, or None when even the narrowest layout is too wide.

    Short columns (labels, flags, names of functions) always get their full
    width; the long ones (names, values, grads) share what is left, each
    wrapping no narrower than its minimum, and never narrower than its longest
    word: a column wraps between elements, so that no number and no name is
    ever cut in two. Deciding this here, rather than leaving it to the table,
    means no column is ever cropped away.
    """
    available = view.width - TABLE_INDENT - GAP * (len(columns) - 1)
    needed: Dict[str, int] = {}
    least: Dict[str, int] = {}
    for position, column in enumerate(columns):
        header = len(HEADERS.get(column, column))
        widest = max([row[position].widest for row in cells])
        needed[column] = max(header, widest)
        floor = WRAPPING_COLUMNS.get(column)
        if floor:
            word = max([row[position].word for row in cells])
            least[column] = max(header, word, min(widest, floor))
        else:
            least[column] = needed[column]
    if sum(least.values()) > available:
        return None
    if sum(needed.values()) <= available:
        return needed
    # Fill the wrapping columns like water: the one that needs least is served
    # first, so a short name or grad is never wrapped to make room for a long summary.
    widths = dict(least)
    spare = available - sum(least.values())
    wanting = sorted((c for c in columns if needed[c] > least[c]), key=lambda c: needed[c])
    for position, column in enumerate(wanting):
        fair = spare // (len(wanting) - position)
        grant = min(needed[column] - least[column], fair)
        widths[column] += grant
        spare -= grant
    return widths


def fits_on_lines(cells: Sequence[Sequence[Cell]], widths: Dict[str, int]) -> bool:
    """Whether every cell is one line, no wider on screen than its column (nothing to wrap)."""
    limits = list(widths.values())
    for row in cells:
        for each, limit in zip(row, limits):
            if not 0 <= each.screen <= limit:  # -1: more than one line, or a tab
                return False
    return True


# --- the two drawings --------------------------------------------------------------


def reference_table(
    columns: Sequence[str], cells: Sequence[Sequence[Cell]], widths: Dict[str, int]
) -> Table:
    """The table as rich draws it, wrapping a cell between its words where it must."""
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        header_style=HEADER_STYLE,
        expand=False,
    )
    for column in columns:
        table.add_column(
            HEADERS.get(column, column),
            width=widths[column],
            no_wrap=column not in WRAPPING_COLUMNS,
            overflow="fold",
            justify="right" if column in RIGHT_ALIGNED else "left",
        )
    for row in cells:
        table.add_row(*(cell.text() for cell in row))
    return table


class TableLines:
    """A table whose cells all fit on one line, written as the segments rich's table writes.

    Indented by ``TABLE_INDENT`` and filled to the width, as a ``Padding``
    around the table is; the header is bold, a rule under it, each cell
    padded to its column in its own style, columns two spaces apart.
    """

    def __init__(
        self, columns: Sequence[str], cells: Sequence[Sequence[Cell]], widths: Dict[str, int]
    ) -> None:
        self.columns = list(columns)
        self.cells = cells
        self.widths = [widths[column] for column in columns]
        self.right = [column in RIGHT_ALIGNED for column in columns]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        styles = _Styles.of(console)
        yield from self._head(styles, options.max_width)
        for row in self.cells:
            yield from self._row(row, styles, options.max_width)

    def drawn_text(self, console: Console, options: ConsoleOptions) -> str:
        """The text of ``__rich_console__``'s segments (``console_page``), from pieces written once
        per console: the header with its rule, and each cell at its width (most cells, "S2",
        "False", an unchanged row's values, are the same at every step)."""
        styles = _Styles.of(console)
        width = options.max_width
        key = (tuple(self.columns), tuple(self.widths), width)
        head = styles.lines.get(key)
        if head is None:
            head = styles.lines[key] = _text(console, self._head(styles, width))
        null = styles.get("")
        start = _text(console, [Segment(" " * TABLE_INDENT, null)])
        gap = _text(console, [Segment(" ", null), Segment(" ", null)])  # padding, divider
        end = _text(console, self._end(width, null))
        texts = styles.texts
        out = [head]
        for row in self.cells:
            cells = []
            for key in zip(row, self.widths, self.right):
                text = texts.get(key)
                if text is None:
                    text = texts[key] = _text(console, styles.drawn(key))
                cells.append(text)
            out.append(start + gap.join(cells) + end)
        return "".join(out)

    def _head(self, styles: "_Styles", width: int) -> Iterator[Segment]:
        """The header and the rule under it."""
        null = styles.get("")
        header = [make_cell(((HEADERS.get(c, c), ""),), HEADER_STYLE) for c in self.columns]
        yield Segment(" " * TABLE_INDENT, null)
        yield from self._line(header, styles, styles.get(HEADER_STYLE))
        yield from self._end(width, null)
        yield Segment(" " * TABLE_INDENT, null)
        yield Segment("─" * self._inner(), null)
        yield from self._end(width, null)

    def _row(self, row: Sequence[Cell], styles: "_Styles", width: int) -> Iterator[Segment]:
        null = styles.get("")
        yield Segment(" " * TABLE_INDENT, null)
        yield from self._line(row, styles, null)
        yield from self._end(width, null)

    def _inner(self) -> int:
        return sum(self.widths) + GAP * (len(self.widths) - 1)

    def _end(self, width: int, null: Style) -> Iterator[Segment]:
        """What fills a line to the width, as the ``Padding`` around a table does, and its end."""
        fill = width - TABLE_INDENT - self._inner()
        if fill > 0:
            yield Segment(" " * fill, null)
        yield Segment.line()

    def _line(self, row: Sequence[Cell], styles: "_Styles", pad: Style) -> Iterator[Segment]:
        divider = Segment(" ", styles.get(""))
        padding = Segment(" ", pad)
        last = len(row) - 1
        for position, cell in enumerate(row):
            yield from styles.drawn((cell, self.widths[position], self.right[position]))
            if position < last:
                yield padding
                yield divider


def _cell_segments(cell: Cell, width: int, right: bool, styles: "_Styles") -> List[Segment]:
    """A cell padded to ``width``, split where its styles start and end, as ``Text`` renders it.

    The cell's own style covers its padding too; each styled piece is laid
    over it (the later style wins where they disagree).
    """
    spaces = width - cell.screen
    if not cell.style and len(cell.pieces) == 1 and not cell.pieces[0][1]:
        # unstyled: one segment with no style at all, as Text renders it
        return [Segment(" " * spaces + cell.plain if right else cell.plain + " " * spaces)]
    spans = []  # (start, end, style) of each styled stretch, the cell's own style first
    offset = spaces if right else 0
    for text, style in cell.pieces:
        if style and text:
            spans.append((offset, offset + len(text), style))
        offset += len(text)
    plain = " " * spaces + cell.plain if right else cell.plain + " " * spaces
    if cell.style:
        spans.insert(0, (0, width, cell.style))
    if not spans:
        return [Segment(plain)]
    cuts = sorted({0, width, *(s for s, _, _ in spans), *(e for _, e, _ in spans)})
    segments = []
    for start, stop in zip(cuts, cuts[1:]):
        over = tuple(style for s, e, style in spans if s <= start and stop <= e)
        segments.append(Segment(plain[start:stop], styles.get(*over)))
    return segments


class _Styles:
    """Styles by name and their combinations parsed once per console, and cells drawn once.

    One per console, so that the hundreds of steps of a trace share them: a
    column's width is stable within a run, so most cells ("S2", "False",
    "None") are drawn once for the whole trace rather than once per step.
    """

    _by_console: "weakref.WeakKeyDictionary[Console, _Styles]" = weakref.WeakKeyDictionary()
    MAX_CELLS = 20_000  # drawn cells kept per console: a long trace's values are mostly unique

    def __init__(self, console: Console) -> None:
        self.console = console
        self.known: Dict[Tuple[str, ...], Style] = {}
        self.cells: Dict[Tuple[Cell, int, bool], List[Segment]] = {}
        # a table's header and rule, and its cells, as text (``TableLines.drawn_text``)
        self.lines: Dict[tuple, str] = {}
        self.texts: Dict[Tuple[Cell, int, bool], str] = {}

    @classmethod
    def of(cls, console: Console) -> "_Styles":
        styles = cls._by_console.get(console)
        if styles is None or len(styles.cells) + len(styles.texts) > cls.MAX_CELLS:
            styles = cls._by_console[console] = cls(console)
        return styles

    def drawn(self, key: Tuple[Cell, int, bool]) -> List[Segment]:
        """The segments of a cell at a width, aligned right or not, drawn once."""
        segments = self.cells.get(key)
        if segments is None:
            segments = self.cells[key] = _cell_segments(*key, self)
        return segments

    def get(self, *names: str) -> Style:
        style = self.known.get(names)
        if style is None:
            parts = [self.console.get_style(name) for name in names] or [Style.null()]
            style = self.known[names] = Style.combine(parts)
        return style


# --- narrow terminals -----------------------------------------------------------------


def state_cards(rows: Sequence[Row], columns: Sequence[str], view: View) -> RenderableType:
    """The narrow layout: a name, then that tensor's facts on a few short lines.

    The names stand beside the facts when every word of them fits a quarter
    of the width; otherwise each name gets a line of its own above its facts,
    so that a long name stays whole (shortened with an ellipsis only when it
    is wider than the terminal itself).
    """
    extra = [
        c
        for c in ("shape", "dtype", "device", "stride", "contiguous", "retains_grad")
        if c in columns
    ]
    names = [name_cell(state, new, view).text() for state, _, new in rows]
    facts = [
        facts_text(
            state,
            view,
            marked=frozenset() if new else changed,
            style=CHANGED_STYLE,
            mark=CHANGED_MARK,
            storage="storage " + format_storage(state),
            extra=extra,
        )
        for state, changed, new in rows
    ]
    room = max(8, view.width // 4)
    if max(_longest_word(name.plain) for name in names) <= room:
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            header_style="bold",
            show_header=False,
            show_lines=True,
        )
        table.add_column("name", no_wrap=False, max_width=room)
        table.add_column("facts", overflow="fold")
        for name, fact in zip(names, facts):
            table.add_row(name, fact)
        return Padding(table, (0, 0, 0, TABLE_INDENT))
    blocks: List[RenderableType] = []
    for position, (name, fact) in enumerate(zip(names, facts)):
        if position:
            blocks.append(Text(""))
        name.overflow = "ellipsis"
        blocks.append(Padding(name, (0, 0, 0, TABLE_INDENT)))
        blocks.append(Padding(fact, (0, 0, 0, 2 * TABLE_INDENT)))
    return Group(*blocks)


def _widest_line(text: str) -> int:
    return max((len(line) for line in text.split("\n")), default=0)


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


__all__ = [
    "HEADERS",
    "Cell",
    "TableLines",
    "column_widths",
    "reference_table",
    "row_cells",
    "state_cards",
    "state_table",
]
