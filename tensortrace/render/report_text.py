"""The pieces of a doctor report's console lines: a styled word, a file:line with its code,
a labelled row and its continuation, shared by the report (``doctor.py``) and its NaN/Inf
section (``nonfinite.py``)."""

from __future__ import annotations

from typing import Optional

from rich.text import Text

from ..trace.doctor import Place
from .visible import visible


def styled(text: str, style: str) -> Text:
    return Text(visible(text), style=style)


def place_text(p: Optional[Place]) -> Text:
    """``path:line  code``, or "(line unknown)"."""
    if p is None:
        return Text("(line unknown)", style="dim")
    return styled(f"{p.path}:{p.line}", "bold cyan") + Text("  ") + styled(p.code, "")


def row(label: str, body: Text) -> Text:
    """A report row: its label in a column of nine, then ``body``."""
    return styled(f"  {label:<9} ", "bold") + body


def more(body: Text) -> Text:
    """A row's next line, under its body."""
    return Text(" " * 12) + body
