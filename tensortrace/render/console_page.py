"""The console page as text: rich's printing of its parts, or the same text written directly.

``reference_text`` is rich's: the parts printed as one ``Group`` into a
captured console. Every segment goes through rich's generic rendering (a
generator for each level of nesting) and then its buffer, which cost a
step at four tensors about as much as making the step's parts.

``page_text`` gives the same characters. A part of ours that writes its own
segments (``console_lines``, ``console_table``, ``plaincode``) is asked for
its ``drawn_text``: the text of those segments, rendered as rich renders
its buffer (``segments_text``), or None where the part hands its drawing to
rich. Such parts, and every other renderable, are printed by rich, several
in a row in one print. ``tests/render/test_console_page.py`` checks that
both give the same text for bundled scenarios recorded in the test and the
fixed traces, at several widths, in colour and without.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

from rich.console import COLOR_SYSTEMS, Console, ConsoleOptions, Group, RenderableType
from rich.segment import Segment


def reference_text(console: Console, parts: Sequence[RenderableType]) -> str:
    """The parts as ``console.print(Group(*parts), crop=False)`` writes them."""
    with console.capture() as captured:
        console.print(Group(*parts), crop=False)
    return captured.get()


def page_text(console: Console, parts: Iterable[RenderableType]) -> str:
    """The same text as ``reference_text``, parts of ours written without rich's layers."""
    options = console.options
    out: List[str] = []
    waiting: List[RenderableType] = []  # parts for rich, printed together
    for part in parts:
        drawn = getattr(part, "drawn_text", None)
        text = drawn(console, options) if drawn is not None else None
        if text is None:
            waiting.append(part)
            continue
        if waiting:
            out.append(reference_text(console, waiting))
            waiting = []
        out.append(text)
    if waiting:
        out.append(reference_text(console, waiting))
    return "".join(out)


def segments_text(console: Console, segments: Iterable[object]) -> Optional[str]:
    """The text rich writes for ``segments`` (its buffer's rendering), or None when one of them is
    a renderable rather than a segment (the part handed its drawing to rich)."""
    system = COLOR_SYSTEMS.get(console.color_system) if console.color_system else None
    out = []
    for segment in segments:
        if type(segment) is not Segment:
            return None
        text, style, control = segment
        if control:  # never written by our parts; rich drops it on a console that is no terminal
            return None
        if system is not None and style:  # without colour a style renders as its bare text
            text = style.render(text, color_system=system)
        out.append(text)
    return "".join(out)


def drawn_by_segments(part: object, console: Console, options: ConsoleOptions) -> Optional[str]:
    """``drawn_text`` for a part whose ``__rich_console__`` yields segments, or its reference."""
    return segments_text(console, part.__rich_console__(console, options))  # type: ignore[attr-defined]


__all__ = ["drawn_by_segments", "page_text", "reference_text", "segments_text"]
