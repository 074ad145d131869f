"""The console form of a ``tensortrace doctor`` report: the line to change, why, and the fix.

Places are written ``path:line`` so that terminals make them links. Text the
user's code wrote (source lines, names) is printed as plain text, never read
as rich markup, with control characters made visible.
"""

from __future__ import annotations

import io
from typing import List, Optional, Tuple, Union

from rich.console import Console
from rich.text import Text

from ..trace.doctor import (
    LINE_KINDS,
    Aside,
    Edit,
    Failure,
    Fix,
    Report,
    Saved,
    Silent,
    Starved,
    Write,
)
from .report_text import more as _more, place_text as _at, row as _row, styled as _styled
from .visible import visible

NO_SAFE_MODE = "ran in this process, as your own code: no safe mode"
_KIND_TITLES = {
    "modified-in-place": "backward failed: a tensor it needs was changed in place",
    "freed-graph": "backward failed: it runs through a graph an earlier backward freed",
    "no-grad": "backward failed: the loss is cut off from everything that requires grad",
    "not-scalar": "backward failed: the tensor it starts from is not one number",
    "leaf-in-place": "an in-place write into a leaf that requires grad was refused",
    "non-leaf-grad": "a .grad read as None: the tensor is not a leaf",
    "numpy-requires-grad": "numpy() refused: the tensor requires grad",
}
MARKS = {"passed": "✓", "failed": "✗", "unchecked": "?"}
_MARK_STYLES = {"passed": "bold green", "failed": "bold red", "unchecked": "yellow"}


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
    for starved in report.starved:
        if lines:
            lines.append(Text(""))
        lines += _starved(starved)
    if report.nonfinite is not None:
        from .nonfinite import nonfinite_lines

        if lines:
            lines.append(Text(""))
        lines += nonfinite_lines(report.nonfinite, _fix_rows)
    if report.checked and any(_has_edits(f) for f in _all_fixes(report)):
        lines.append(_styled(f"tensortrace doctor: {report.checked}", "dim"))
    for aside in report.aside:
        lines.append(_aside(aside))
    if (
        report.failure is None
        and not report.silent
        and not report.starved
        and report.nonfinite is None
    ):
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


def _all_fixes(report: Report) -> List[Union[Fix, str]]:
    found: List[Union[Fix, str]] = []
    if report.failure is not None:
        found += list(report.failure.fixes)
    for starved in report.starved:
        found += list(starved.fixes)
    if report.nonfinite is not None:
        found += list(report.nonfinite.fixes)
    return found


def _has_edits(fix: Union[Fix, str]) -> bool:
    return isinstance(fix, Fix) and bool(fix.edits)


def _runs(f: Failure) -> str:
    if f.runs is None:
        return ""
    return f"carried from {f.unit} {f.runs[0]} to {f.unit} {f.runs[1]}"


def _failure(f: Failure) -> List[Text]:
    title = _KIND_TITLES.get(f.kind, "backward failed")
    lines = [
        _styled(f"tensortrace doctor: {title}", "bold red"),
        _styled("→ ", "bold red") + _styled(f.headline, "bold"),
    ]
    if f.saved is not None:
        lines += _saved_rows(f.saved)
    lines += _write_rows(f.writes)
    if f.carrier is not None:
        where = f.assigned_at or f.carried_at
        lines.append(_row("carrier", _styled(f.carrier, "bold") + Text(", assigned at")))
        lines.append(_more(_at(where)))
        if f.runs is not None:
            lines.append(_more(_styled(_runs(f), "")))
        if f.carried_at is not None and f.assigned_at is not None and f.carried_at != f.assigned_at:
            lines.append(_row("read", _at(f.carried_at)))
    if f.shared is not None:
        node = f" (its {f.shared_node} saved tensors were freed)" if f.shared_node else ""
        lines.append(_row("needs", _at(f.shared) + _styled(node, "dim")))
    if f.freed_by is not None:
        lines.append(_row("freed by", _at(f.freed_by)))
    for i, cut in enumerate(f.cuts[:5]):
        lines.append(
            _row("cut" if i == 0 else "", _styled(cut.kind, "bold") + Text("  ") + _at(cut.place))
        )
    if f.backward is not None:
        lines.append(_row("line" if f.kind in LINE_KINDS else "backward", _at(f.backward)))
    groups: dict = {}
    for w in f.blocked:
        groups.setdefault(w.place, []).append(w.alias or "a saved tensor")
    for where, names in groups.items():
        by = "" if where is None else f" {where.code} at {where.path}:{where.line} changed"
        lines.append(
            _row(
                "blocked",
                _styled(
                    f"retain_graph=True would not help:{by or ' a write changed'} "
                    f"{', '.join(dict.fromkeys(names))}, which the graph saved",
                    "dim",
                ),
            )
        )
    lines += _fix_rows(f.fixes)
    said = "Python" if f.kind == "non-leaf-grad" else "PyTorch"  # a TypeError of Python's
    lines.append(_row(said, _styled(f.error, "dim")))
    return lines


def _fix_rows(fixes: Tuple[Union[Fix, str], ...]) -> List[Text]:
    lines: List[Text] = []
    for i, fix in enumerate(fixes):
        label = "fix" if i == 0 else ""
        if isinstance(fix, str):  # a version 1 report
            lines.append(_row(label, _styled(fix, "green")))
            continue
        check = fix.check
        mark = Text("")
        if check is not None:
            mark = _styled(MARKS[check.verdict] + " ", _MARK_STYLES[check.verdict])
        lines.append(_row(label, mark + _styled(fix.text, "green")))
        for edit in fix.edits:
            lines += _edit_rows(edit)
        if check is not None and check.verdict != "passed":
            word = "failed" if check.verdict == "failed" else "not checked"
            lines.append(_more(_styled(f"  {word}: {check.detail}", "dim")))
    return lines


def _edit_rows(e: Edit) -> List[Text]:
    """The lines an edit takes out (-) and puts in (+), indented as in the file less the
    indentation they share."""
    where = _styled(f"  {e.path}:{e.line}", "cyan")
    blank = Text(" " * (len(e.path) + len(str(e.line)) + 3))
    old = e.was.split("\n") if e.end >= e.line else []
    new = e.text.split("\n") if e.text else []
    shared = _common_indent(old + new)
    rows: List[Text] = []
    for sign, style, part in [("-", "red", o) for o in old] + [("+", "green", n) for n in new]:
        rows.append(_more(where + _styled(f"  {sign} {part[shared:].rstrip()}", style)))
        where = blank
    return rows


def _common_indent(lines: List[str]) -> int:
    widths = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    return min(widths) if widths else 0


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
        how = "" if s.exact else " (every leaf under the node that read it)"
        lines.append(
            _row(
                "wrong",
                Text(
                    visible(
                        "gradients of "
                        + _names(s.leaves)
                        + " were computed from the changed values"
                        + how
                    )
                ),
            )
        )
    elif s.exact:
        lines.append(
            _row("wrong", Text("none: no gradient came out different from the values as saved"))
        )
    if s.exact and s.unaffected:
        lines.append(_row("unchanged", Text(visible("gradients of " + _names(s.unaffected)))))
    return lines


def _names(names: Tuple[str, ...]) -> str:
    return ", ".join(names[:8]) + (" …" if len(names) > 8 else "")


def _starved(s: Starved) -> List[Text]:
    lines = [
        _styled(
            "tensortrace doctor: warning: an optimizer step found parameters without gradients",
            "bold yellow",
        ),
        _styled("→ ", "bold yellow") + _styled(s.headline, "bold"),
    ]
    if s.cut is not None:
        lines.append(_row("cut", _styled(s.cut.kind, "bold") + Text("  ") + _at(s.cut.place)))
    times = f" ({s.times} steps)" if s.times > 1 else ""
    lines.append(_row("step", _at(s.step) + Text(times)))
    lines.append(_row("no grad", Text(visible(f"{_names(s.parameters)} ({len(s.parameters)})"))))
    lines += _fix_rows(s.fixes)
    return lines


def _aside(a: Aside) -> Text:
    where = "" if a.place is None else f" at {a.place.path}:{a.place.line}"
    times = f" ({a.times} times)" if a.times > 1 else ""
    return _styled(
        f"tensortrace doctor: stepped aside for {a.what}{where}{times}, which refuses "
        "saved-tensor hooks: what runs inside it was not watched",
        "dim",
    )
