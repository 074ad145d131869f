"""What the explorer writes: the current view as a document, and screenshots.

``export_view`` renders the step on screen through the one renderer registry
(``render(traces, fmt, options)``), restricted to that step and to the names
the filter lets through, and writes it atomically with ``output.Output``.
``offline_svg`` takes the web-font download out of a textual/rich SVG
screenshot, so that opening the image makes no network request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from ..errors import UsageError
from ..trace import Trace
from ..output import Output
from ..render import render
from ..render.options import RenderOptions

# Format -> suffix of the file written.
EXPORT_FORMATS = {"markdown": ".md", "html": ".html"}

# ``url("https://…") format("woff2")`` in an @font-face's src: the font is looked
# up locally (``local("FiraCode-Regular")``) and otherwise falls back to monospace.
_FONT_URL = re.compile(
    r"""\s*,\s*url\(\s*["']?https?://[^)"']*["']?\s*\)\s*format\(\s*["'][^"']*["']\s*\)"""
)
_ANY_URL = re.compile(r"""url\(\s*["']?https?://""")


def export_name(trace: Trace, step_index: int, fmt: str) -> str:
    """A file name saying which scenario, variant and step: ``detach-step2.md``."""
    source = trace.scenario.source
    stem = Path(source).stem if source else "trace"
    parts = [stem]
    if trace.scenario.variant:
        parts.append(trace.scenario.variant)
    parts.append("setup" if step_index == 0 else f"step{step_index}")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts)).strip("-.") or "trace"
    return name + EXPORT_FORMATS[fmt]


def export_view(
    trace: Trace, step_index: int, names: Optional[Sequence[str]], fmt: str, folder: Path
) -> Path:
    """Write one step of ``trace`` (only ``names``, when given) as ``fmt`` into ``folder``.

    Returns the path written.
    """
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"cannot export as {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    options = RenderOptions(steps=frozenset({step_index}), show=tuple(names) if names else None)
    text = render([trace], fmt, options)
    path = Path(folder) / export_name(trace, step_index, fmt)
    out = Output(str(path))
    try:
        out.write(text)
        out.commit()
    finally:
        out.discard()
    return path


def offline_svg(svg: str) -> str:
    """The SVG without the web fonts it would download; the text keeps a local or monospace font."""
    cleaned = _FONT_URL.sub("", svg)
    if _ANY_URL.search(cleaned):
        raise ValueError("the screenshot still refers to a font on the network")
    return cleaned


def write_svg(svg: str, path: Path) -> Path:
    """Write a screenshot atomically, with no network font in it."""
    out = Output(str(path))
    try:
        out.write(offline_svg(svg))
        out.commit()
    finally:
        out.discard()
    return Path(path)


__all__ = ["EXPORT_FORMATS", "export_name", "export_view", "offline_svg", "write_svg"]
