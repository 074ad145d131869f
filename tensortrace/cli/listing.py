"""The bundled library as ``tensortrace list`` and ``tensortrace show`` print it.

The caller says how wide and whether in colour; nothing here looks at the
terminal. Titles, tags and files are made ``visible``, like all scenario text.
"""

from __future__ import annotations

import io
from typing import Iterable, Optional

from rich.console import Console
from rich.table import Table

from ..render.visible import visible


def render_scenario_list(entries: Iterable, *, width: Optional[int], color: bool) -> str:
    """A table of name, title and tags (``entries``: library entries), and how to run one.

    ``width`` None lets the table take the width its rows need.
    """
    entries = list(entries)
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("title")
    table.add_column("tags")
    for e in entries:
        table.add_row(visible(e.name), visible(e.title), visible(", ".join(e.tags)))
    console = Console(
        file=io.StringIO(),
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        markup=False,
        emoji=False,
        highlight=color,
        _environ={},
    )
    console.print(table)
    console.print(f"{len(entries)} scenarios; run one with: tensortrace run NAME")
    # rich pads every cell to the column's width; a file or a pipe gets no trailing blanks
    return "".join(line.rstrip(" ") + "\n" for line in console.file.getvalue().splitlines())


def render_scenario_source(text: str) -> str:
    """A scenario file's text as ``show`` prints it: as written, control characters visible."""
    return visible(text)


__all__ = ["render_scenario_list", "render_scenario_source"]
