"""A model's parameters on the terminal: one short line each, not a block of statistics.

When a step's table holds more tensors than ``layout.QUIET_ROWS`` (a model, entered by
``snoop()`` or built by a script), its parameters are drawn here
(``layout.parameter_rows`` decides which), with the cells and the drawings of
``console_table.py``: name, shape, version, requires_grad and the norm of the grad,
a cell that changed in the step marked as in every table. ``--values full`` draws
them as every other tensor is drawn.
"""

from __future__ import annotations

from typing import List, Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding

from .console_lines import TextLine
from .console_parts import CHANGED_MARK, CHANGED_STYLE, TABLE_INDENT, View
from .console_table import Cell, column_widths, fits_on_lines, make_cell, name_cell
from .console_table import TableLines, reference_table
from .layout import Row
from .text import format_shape, format_version, fact_text, grad_norm

COLUMNS = ("name", "shape", "version", "requires_grad", "grad_norm")
# The facts of a row whose change marks each cell.
_FIELDS = {"shape": "shape", "version": "version", "requires_grad": "requires_grad"}


def parameter_table(rows: Sequence[Row], view: View) -> RenderableType:
    """One line per parameter: ``model.0.weight  (8, 4)  1  True  0.0123``."""
    cells = [_cells(row, view) for row in rows]
    widths = column_widths(cells, COLUMNS, view)
    if widths is not None and fits_on_lines(cells, widths):
        return TableLines(COLUMNS, cells, widths)
    if widths is None:  # too narrow for the columns: a line each, wrapped between words
        return Group(
            *(
                TextLine(
                    " · ".join(
                        [row[0].plain, row[1].plain, "version " + row[2].plain]
                        + ["requires_grad " + row[3].plain, "grad norm " + row[4].plain]
                    ),
                    "",
                    TABLE_INDENT,
                )
                for row in cells
            )
        )
    return Padding(reference_table(COLUMNS, cells, widths), (0, 0, 0, TABLE_INDENT))


def _cells(row: Row, view: View) -> List[Cell]:
    state, changed, new = row
    texts = {
        "shape": format_shape(state.shape),
        "version": format_version(state.version),
        "requires_grad": fact_text(state, "requires_grad"),
        "grad_norm": grad_norm(state.grad),
    }
    marked = {column for column, field in _FIELDS.items() if field in changed}
    if "grad" in changed:
        marked.add("grad_norm")
    out = [name_cell(state, new, view)]
    for column in COLUMNS[1:]:
        text = texts[column]
        style = "dim" if text == "None" else ""
        if column in marked and not new:
            pieces = ((text, CHANGED_STYLE),) if view.color else ((text + CHANGED_MARK, ""),)
        else:
            pieces = ((text, ""),)
        out.append(make_cell(pieces, style))
    return out


__all__ = ["COLUMNS", "parameter_table"]
