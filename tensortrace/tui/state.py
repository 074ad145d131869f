"""What the explorer is looking at, kept apart from how it is drawn.

``Explorer`` holds the traces, which one (variant) and which step is current,
the name filter and the followed storage; every question the panes ask
("which rows?", "which steps touched S1?") is answered here from the trace
and the facts ``render/facts.py`` and ``render/layout.py`` derive, so the
same answers can be tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..trace import Step, Trace
from ..render.facts import all_steps, changed_fields
from ..render.layout import Row, run_columns, table_rows
from ..render.options import RenderOptions
from ..render.text import one_line
from ..render.visible import visible_traces

# The facts whose change means a step touched a storage: written, or moved onto it.
TOUCHING_FIELDS = frozenset({"values", "version", "storage"})
_ALL = RenderOptions()


@dataclass
class Explorer:
    """The explorer's state; the traces are shown with control characters made visible."""

    traces: List[Trace]
    variant: int = 0
    position: int = 0  # index into ``steps`` (setup, when recorded, is position 0)
    filter: str = ""
    follow: Optional[str] = None  # the storage label followed
    follow_name: Optional[str] = None  # the name it was picked through (for a variant switch)
    graphs_shown: bool = True
    # a loop's passes: "first" (the first in full, the others folded) or "all" (key i)
    iterations: str = "first"
    _columns: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.traces = visible_traces(self.traces)

    # --- where we are ------------------------------------------------------------

    @property
    def trace(self) -> Trace:
        return self.traces[self.variant]

    @property
    def steps(self) -> Tuple[Step, ...]:
        return all_steps(self.trace)

    @property
    def step(self) -> Optional[Step]:
        steps = self.steps
        return steps[self.position] if steps else None

    @property
    def previous(self) -> Optional[Step]:
        return self.steps[self.position - 1] if self.position > 0 else None

    def move(self, by: int) -> bool:
        """Step ``by`` steps on (back when negative), within the trace; whether it moved."""
        return self.go(self.position + by)

    def go(self, position: int) -> bool:
        position = max(0, min(position, len(self.steps) - 1))
        moved = position != self.position
        self.position = max(0, position)
        return moved

    def next_variant(self) -> bool:
        """The next trace of the file, at the same step index where it has one; whether it switched.

        A followed storage is followed on by the name it was picked through,
        since storage labels are numbered per run.
        """
        if len(self.traces) < 2:
            return False
        index = self.step.index if self.step is not None else 0
        self.variant = (self.variant + 1) % len(self.traces)
        indexes = [s.index for s in self.steps]
        self.position = (
            indexes.index(index)
            if index in indexes
            else min(self.position, max(0, len(indexes) - 1))
        )
        if self.follow_name is not None:
            self.follow = self._storage_of(self.follow_name)
            if self.follow is None:
                self.follow_name = None
        return True

    # --- what the table shows ------------------------------------------------------

    @property
    def columns(self) -> List[str]:
        """The table's columns, decided once per trace as ``run`` decides them."""
        if self.variant not in self._columns:
            self._columns[self.variant] = run_columns([self.trace], _ALL)
        return self._columns[self.variant]

    def rows(self) -> Tuple[Tuple[str, ...], List[Row]]:
        """The names the step shows and the rows the filter lets through."""
        step = self.step
        if step is None:
            return (), []
        names, rows = table_rows(self.previous, step, _ALL)
        return names, [row for row in rows if self.matches(row.state.name)]

    def matches(self, name: str) -> bool:
        """Whether a name passes the filter: the filter's text anywhere in it, any case."""
        return self.filter.lower() in name.lower()

    # --- following a storage ---------------------------------------------------------

    def follow_storage(self, name: str) -> Optional[str]:
        """Follow the storage ``name`` lives on at this step (again: stop); the label, or None."""
        label = self._storage_of(name)
        if label is None or label == self.follow:
            self.follow = self.follow_name = None
        else:
            self.follow, self.follow_name = label, name
        return self.follow

    def _storage_of(self, name: str) -> Optional[str]:
        for step in self.steps[self.position :: -1] + self.steps[self.position + 1 :]:
            for state in step.tensors:
                if state.name == name and state.storage is not None:
                    return state.storage
        return None

    def on_followed(self, step: Optional[Step] = None) -> Tuple[str, ...]:
        """The names on the followed storage at ``step`` (default: the current one)."""
        step = self.step if step is None else step
        if self.follow is None or step is None:
            return ()
        return tuple(s.name for s in step.tensors if s.storage == self.follow)

    def touches(self) -> List[Tuple[int, Tuple[str, ...]]]:
        """Each step that wrote the followed storage, bound a name on it or moved one onto it,
        with those names: (step index, names)."""
        if self.follow is None:
            return []
        found = []
        prev: Optional[Step] = None
        for step in self.steps:
            before = {s.name: s for s in prev.tensors} if prev is not None else {}
            names = tuple(
                s.name
                for s in step.tensors
                if s.storage == self.follow
                and (s.name not in before or changed_fields(before[s.name], s) & TOUCHING_FIELDS)
            )
            if names:
                found.append((step.index, names))
            prev = step
        return found

    # --- the step list -----------------------------------------------------------------

    def step_labels(self, width: int = 24) -> List[str]:
        """One line per step for the list: a mark, the step's number and its first line of code.

        ``●`` marks a step that touched the followed storage, ``✗`` one that did not
        behave as declared.
        """
        touched = {index for index, _ in self.touches()}
        labels = []
        for step in self.steps:
            mark = "●" if step.index in touched else ("✗" if not step.behaved else " ")
            number = "setup" if step.index == 0 else str(step.index)
            first = next((line.strip() for line in step.code.splitlines() if line.strip()), "")
            labels.append(one_line(f"{mark}{number:>2} {first}", width))
        return labels


def names_of_rows(rows: Sequence[Row]) -> Tuple[str, ...]:
    return tuple(row.state.name for row in rows)


__all__ = ["Explorer", "TOUCHING_FIELDS", "names_of_rows"]
