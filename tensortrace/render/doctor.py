"""The console form of a ``tensortrace doctor`` report: the line to change, why, and the fix.

Places are written ``path:line`` so that terminals make them links. Text the
user's code wrote (source lines, names) is printed as plain text, never read
as rich markup, with control characters made visible.
"""

from __future__ import annotations

import io
from typing import List, Optional, Tuple

from rich.console import Console
from rich.text import Text

from ..trace.doctor import Failure, Place, Report, Saved, Silent, Write
from .visible import visible

NO_SAFE_MODE = "ran in this process, as your own code: no safe mode"
_KIND_TITLES = {
    "modified-in-place": "backward failed: a tensor it needs was changed in place",
    "freed-graph": "backward failed: it runs through a graph an earlier backward freed",
    "no-grad": "backward failed: the loss is cut off from everything that requires grad",
}


def summary_line(report: Report) -> str:
    """What was watched, as one line."""
    w = report.watched
    return (
        f"watched {w.saved:,} saved tensor{'s' * (w.saved != 1)}, {w.writes:,} "
        f"write{'s' * (w.writes != 1)} into them, {w.backwards:,} backward "
        f"call{'s' * (w.backwards != 1)} ({NO_SAFE_MODE})"
    )


def render_console(report: Report, *, width: Optional[int] = None, color: bool = False) -> str:
    """The report as the console shows it (ANSI colour only when ``color``)."""
    lines: List[Text] = []
    if report.failure is not None:
        lines += _failure(report.failure)
    for silent in report.silent:
        if lines:
            lines.append(Text(""))
        lines += _silent(silent)
    if report.nonfinite is not None:
        from .nonfinite import nonfinite_lines

        if lines:
            lines.append(Text(""))
        lines += nonfinite_lines(report.nonfinite)
    if report.failure is None and not report.silent and report.nonfinite is None:
        lines.append(
            _styled("tensortrace doctor: nothing to report: ", "bold green")
            + Text(summary_line(report))
        )
    else:
        lines.append(Text(f"tensortrace doctor: {summary_line(report)}", style="dim"))
    stream = io.StringIO()
    console = Console(
        file=stream,
        width=width or 100,
        force_terminal=color,
        color_system="standard" if color else None,
        highlight=False,
        soft_wrap=True,
        emoji=False,
        markup=False,
    )
    for line in lines:
        console.print(line)
    return stream.getvalue()


def _styled(text: str, style: str) -> Text:
    return Text(visible(text), style=style)


def _at(p: Optional[Place]) -> Text:
    if p is None:
        return Text("(line unknown)", style="dim")
    return _styled(f"{p.path}:{p.line}", "bold cyan") + Text("  ") + _styled(p.code, "")


def _row(label: str, body: Text) -> Text:
    return _styled(f"  {label:<9} ", "bold") + body


def _more(body: Text) -> Text:
    return Text(" " * 12) + body


def _failure(f: Failure) -> List[Text]:
    title = _KIND_TITLES.get(f.kind, "backward failed")
    lines = [
        _styled(f"tensortrace doctor: {title}", "bold red"),
        _styled("→ ", "bold red") + _styled(f.headline, "bold"),
    ]
    if f.saved is not None:
        lines += _saved_rows(f.saved)
    lines += _write_rows(f.writes)
    if f.carrier is not None or f.carried_at is not None:
        lines.append(
            _row(
                "carrier",
                _styled(f.carrier or "a tensor", "bold")
                + Text(" links this graph to the freed one, used at"),
            )
        )
        lines.append(_more(_at(f.carried_at)))
    if f.freed_by is not None:
        lines.append(_row("freed by", _at(f.freed_by)))
    for i, cut in enumerate(f.cuts[:5]):
        lines.append(
            _row("cut" if i == 0 else "", _styled(cut.kind, "bold") + Text("  ") + _at(cut.place))
        )
    if f.backward is not None:
        lines.append(_row("backward", _at(f.backward)))
    for i, fix in enumerate(f.fixes):
        lines.append(_row("fix" if i == 0 else "", _styled(fix, "green")))
    lines.append(_row("PyTorch", _styled(f.error, "dim")))
    return lines


def _saved_rows(s: Saved) -> List[Text]:
    shape = "[" + ", ".join(str(n) for n in s.shape) + "]"
    who = f" by {s.node}" if s.node else ""
    head = _styled(s.name or "(unnamed)", "bold") + Text(
        visible(f"  {s.dtype} {shape}, saved{who} at version {s.version}, at")
    )
    return [_row("saved", head), _more(_at(s.place))]


def _write_rows(writes: Tuple[Write, ...]) -> List[Text]:
    lines = []
    for i, w in enumerate(writes):
        through = f" through {w.alias}" if w.alias else ""
        version = (
            " (no version bump: autograd cannot see it)"
            if w.version is None
            else f" (version {w.version} -> {w.version + 1})"
        )
        label = "written" if i == 0 else ""
        lines.append(_row(label, _at(w.place)))
        lines.append(_more(Text(visible(f"{w.op}{through}{version}"), style="dim")))
    return lines


def _silent(s: Silent) -> List[Text]:
    lines = [
        _styled(
            "tensortrace doctor: warning: a backward used a saved tensor whose values "
            "changed after it was saved",
            "bold yellow",
        ),
        _styled("→ ", "bold yellow") + _styled(s.headline, "bold"),
    ]
    lines += _saved_rows(s.saved)
    lines += _write_rows(s.writes)
    for cut in s.shares:
        lines.append(_row("shared", _styled("NumPy view (writes through it bump no version)", "")))
        lines.append(_more(_at(cut.place)))
    if s.backward is not None:
        times = f" ({s.times} backward calls)" if s.times > 1 else ""
        lines.append(_row("backward", _at(s.backward) + Text(times)))
    if s.leaves:
        lines.append(
            _row(
                "wrong",
                Text(
                    visible(
                        "gradients of "
                        + ", ".join(s.leaves[:8])
                        + (" …" if len(s.leaves) > 8 else "")
                        + " were computed from the changed values"
                    )
                ),
            )
        )
    return lines
