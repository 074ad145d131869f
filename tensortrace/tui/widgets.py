"""The explorer's widgets: the step list, the tensor table and the export prompt.

Each widget only shows what it is given; ``app.py`` decides what that is from
the ``Explorer`` state. Cells and labels arrive ready-made (rich text from
``render/explore.py``, plain text from ``state.py``), so no widget knows how a
fact is spelled.
"""

from __future__ import annotations

from typing import Optional, Sequence

from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option


class StepList(OptionList):
    """One line per step; the highlighted line is the step shown."""

    def show(self, labels: Sequence[str], position: int) -> None:
        """Replace the lines (plain text, never markup) and highlight ``position``."""
        current = [str(self.get_option_at_index(i).prompt) for i in range(self.option_count)]
        if current != list(labels):
            self.clear_options()
            self.add_options(
                [Option(Content(label), id=f"step-{i}") for i, label in enumerate(labels)]
            )
        if labels and self.highlighted != position:
            self.highlighted = position


class Detail(VerticalScroll, inherit_bindings=False):
    """The right-hand pane; it scrolls up and down only, so left and right stay free for steps."""

    BINDINGS = [
        Binding("up", "scroll_up", "Scroll up", show=False),
        Binding("down", "scroll_down", "Scroll down", show=False),
        Binding("home", "scroll_home", "Top", show=False),
        Binding("end", "scroll_end", "Bottom", show=False),
    ]


class TensorTable(DataTable, inherit_bindings=False):
    """The step's tensors, one row each; the cursor row is the tensor ``s`` follows.

    Only up and down are bound here, so that left and right stay free for
    moving between steps.
    """

    BINDINGS = [
        Binding("up", "cursor_up", "Previous tensor", show=False),
        Binding("down", "cursor_down", "Next tensor", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._names: list = []

    @property
    def selected(self) -> Optional[str]:
        """The name on the cursor row, or None when the table is empty."""
        if not self._names:
            return None
        return self._names[min(max(self.cursor_row, 0), len(self._names) - 1)]

    def show(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[object]],
        names: Sequence[str],
        keep: Optional[str] = None,
    ) -> None:
        """Replace the table; the cursor stays on ``keep`` when that name is still there."""
        self.clear(columns=True)
        self.add_columns(*headers)
        for name, cells in zip(names, rows):
            self.add_row(*cells, key=name)
        self._names = list(names)
        if keep in self._names:
            self.move_cursor(row=self._names.index(keep), animate=False)
        self.display = bool(self._names)


class ExportPrompt(ModalScreen):
    """Asks which format to export the current view in; dismisses with it, or None."""

    DEFAULT_CSS = """
    ExportPrompt { align: center middle; }
    ExportPrompt > Vertical {
        width: 52; height: auto; border: round $accent; padding: 0 1; background: $surface;
    }
    """
    BINDINGS = [
        Binding("m", "choose('markdown')", "Markdown"),
        Binding("h", "choose('html')", "HTML"),
        Binding("escape", "choose('')", "Cancel"),
    ]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self):
        with Vertical():
            yield Static(Content(f"Export {self.what}"))
            yield Static(Content("m: Markdown   h: HTML   Esc: cancel"))

    def action_choose(self, fmt: str) -> None:
        self.dismiss(fmt or None)


__all__ = ["Detail", "ExportPrompt", "StepList", "TensorTable"]
