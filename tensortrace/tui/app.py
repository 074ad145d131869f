"""The explorer: a textual app that steps through recorded traces.

Left, the steps; right, the current step's code and note, its tensor table
(changed cells marked, as ``run`` marks them), what it raised or warned (with
the explanation), and its autograd trees. The keys move between steps,
filter the table by name, follow the storage of the selected tensor across
steps, switch between the file's traces (variants) and export the view.

The app only arranges: what is shown comes from ``state.Explorer`` and the
pieces ``render/explore.py`` draws.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Input, OptionList, Static

from ..errors import TensorTraceError
from ..trace import Trace
from ..render import explore as draw
from .export import export_view
from .state import Explorer, names_of_rows
from .widgets import Detail, ExportPrompt, StepList, TensorTable

# Width of the step list, in columns.
STEP_LIST_WIDTH = 20


class ExplorerApp(App):
    """``ExplorerApp(traces).run()``.

    ``export_dir`` is where ``e`` writes (default: the current folder).
    """

    TITLE = "tensortrace explore"
    ENABLE_COMMAND_PALETTE = False
    CSS = f"""
    #title {{ height: 1; padding: 0 1; background: $boost; }}
    #body {{ height: 1fr; }}
    #steps {{ width: {STEP_LIST_WIDTH}; height: 1fr; border: none; padding: 0; }}
    #detail {{ width: 1fr; height: 1fr; padding: 0 0 0 1; scrollbar-gutter: stable; }}
    #filter {{ display: none; height: 3; }}
    #filter.open {{ display: block; }}
    #tensors {{ height: auto; max-height: 12; margin: 1 0 0 2; scrollbar-size-horizontal: 1; }}
    #card {{ margin: 1 0 1 0; }}
    #graphs.hidden {{ display: none; }}
    """
    BINDINGS = [
        Binding("left", "step(-1)", "Step", key_display="←"),
        Binding("right", "step(1)", "Step", key_display="→"),
        Binding("k", "step(-1)", "Previous step", show=False),
        Binding("j", "step(1)", "Next step", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("s", "follow", "Storage"),
        Binding("g", "graphs", "Graphs"),
        Binding("i", "iterations", "Iterations"),
        Binding("v", "variant", "Variant"),
        Binding("e", "export", "Export"),
        Binding("q", "quit", "Quit"),
        Binding("pageup", "page(-1)", "Scroll up", show=False),
        Binding("pagedown", "page(1)", "Scroll down", show=False),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        traces: Sequence[Trace],
        *,
        export_dir: Optional[Path] = None,
        color: Optional[bool] = None,
    ) -> None:
        super().__init__()
        self.state = Explorer(list(traces))
        self.export_dir = Path(export_dir) if export_dir is not None else Path.cwd()
        # Without colour the marks carry the meaning ('*' for a change), as in 'run'.
        self.color = not os.environ.get("NO_COLOR") if color is None else color
        self.last_export: Optional[Path] = None  # the file 'e' wrote last

    # --- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        with Horizontal(id="body"):
            yield StepList(id="steps")
            with Detail(id="detail"):
                yield Static(id="head")
                yield Input(
                    placeholder="filter tensors by name (Enter: keep, Esc: clear)", id="filter"
                )
                yield TensorTable(id="tensors")
                yield Static(id="under")
                yield Static(id="follow")
                yield Static(id="card")
                yield Static(id="outcome")
                yield Static(id="graphs")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()
        self.query_one(TensorTable).focus()

    def on_resize(self) -> None:
        self.redraw()  # the graph trees' depth follows the width

    @property
    def table(self) -> TensorTable:
        return self.query_one(TensorTable)

    def redraw(self) -> None:
        """Draw every pane from the state."""
        state = self.state
        view = draw.explorer_view(max(40, self.size.width - STEP_LIST_WIDTH - 2), self.color)
        self.query_one("#title", Static).update(
            draw.trace_title(state.trace, state.variant, len(state.traces))
        )
        self.query_one(StepList).show(state.step_labels(STEP_LIST_WIDTH - 2), state.position)
        step = state.step
        if step is None:
            self.query_one("#head", Static).update(draw.say_nothing())
            return
        self.query_one("#head", Static).update(draw.step_head(step, view))
        names, rows = state.rows()
        keep = self.table.selected
        columns = state.columns
        self.table.show(
            draw.column_headers(columns),
            draw.tensor_cells(rows, columns, view, state.follow),
            names_of_rows(rows),
            keep=keep,
        )
        self._draw_card(view)
        under = self.query_one("#under", Static)
        if state.filter and not rows:
            under.update(draw.no_match(state.filter))
        else:
            under.update(draw.under_table(state.previous, step, names, view))
        follow = self.query_one("#follow", Static)
        follow.display = state.follow is not None
        if state.follow is not None:
            follow.update(
                draw.follow_line(
                    state.follow, state.on_followed(), state.touches(), step.index, view
                )
            )
        self.query_one("#outcome", Static).update(draw.outcome(step, state.iterations))
        graphs = self.query_one("#graphs", Static)
        graphs.set_class(not state.graphs_shown, "hidden")
        if state.graphs_shown:
            graphs.update(draw.graphs(step, view))

    def _draw_card(self, view=None) -> None:
        """The selected tensor's facts in full, below the table."""
        step = self.state.step
        if step is None:
            return
        view = view or draw.explorer_view(
            max(40, self.size.width - STEP_LIST_WIDTH - 2), self.color
        )
        self.query_one("#card", Static).update(
            draw.tensor_card(self.state.previous, step, self.table.selected, view)
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._draw_card()

    # --- keys ------------------------------------------------------------------------

    def action_step(self, by: int) -> None:
        if self.state.move(by):
            self.redraw()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "steps" and self.state.go(event.option_index):
            self.redraw()

    def action_page(self, by: int) -> None:
        detail = self.query_one(Detail)
        if by < 0:
            detail.scroll_page_up(animate=False)
        else:
            detail.scroll_page_down(animate=False)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("open")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.state.filter = event.value
        self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.remove_class("open")
        self.table.focus()

    def on_key(self, event) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            box.value = ""
            box.remove_class("open")
            self.table.focus()

    def action_follow(self) -> None:
        name = self.table.selected
        if name is None:
            self.notify("No tensor is selected at this step.", severity="warning")
            return
        self.state.follow_storage(name)  # the follow line under the table says what it is
        self.redraw()

    def action_graphs(self) -> None:
        self.state.graphs_shown = not self.state.graphs_shown
        self.redraw()

    def action_iterations(self) -> None:
        """A loop step's passes: every one in full, or the first and a summary of the others."""
        self.state.iterations = "all" if self.state.iterations == "first" else "first"
        self.redraw()

    def action_variant(self) -> None:
        if not self.state.next_variant():
            self.notify("This file holds one trace; there is no other variant to switch to.")
            return
        self.redraw()

    def action_export(self) -> None:
        step = self.state.step
        if step is None:
            self.notify("There is no step to export.", severity="warning")
            return
        what = "the setup" if step.index == 0 else f"step {step.index}"
        self.push_screen(ExportPrompt(what), self._export)

    def _export(self, fmt: Optional[str]) -> None:
        if not fmt:
            return
        step = self.state.step
        names = None
        if self.state.filter:
            names = names_of_rows(self.state.rows()[1])
            if not names:
                self.notify(
                    f"No tensor matches the filter {self.state.filter!r}; nothing was exported.",
                    severity="warning",
                )
                return
        try:
            path = export_view(self.state.trace, step.index, names, fmt, self.export_dir)
        except (TensorTraceError, OSError) as exc:
            self.notify(f"Could not export: {exc}", severity="error")
            return
        self.last_export = path
        self.notify(f"Wrote {path}")

    def action_quit(self) -> None:
        self.exit(0)


def explore(traces: Sequence[Trace]) -> int:
    """Run the explorer on a terminal until the reader quits; the exit status."""
    app = ExplorerApp(traces)
    app.run()
    return app.return_code or 0


__all__ = ["ExplorerApp", "explore"]
