"""The console form of doctor's NaN and Inf finding: the line that made it, why, and the fix.

Drawn in the layout of ``doctor.py``'s failures: a title, the headline, then
labelled rows. Text the user's code wrote (lines, names) is plain text with
control characters made visible, never rich markup.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

from rich.text import Text

from ..trace.doctor import Fix
from ..trace.nonfinite import Made, NonFinite, Operand
from .report_text import more as _more, place_text as _at, row as _row, styled as _styled

_VALUE = {"nan": "NaN", "inf": "inf", "-inf": "-inf"}
_WHAT = {"loss": "loss", "gradient": "gradient", "parameter": "parameter"}


def _shape(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _operand(o: Operand) -> str:
    who = o.name or o.argument
    if o.dtype == "number":
        return f"{who} = {o.value}"
    counts = [
        f"{n:,} {word}"
        for n, word in (
            (o.zeros, "zero" if o.zeros == 1 else "zeros"),
            (o.negatives, "negative" if o.negatives == 1 else "negatives"),
            (o.nan, "NaN"),
            (o.posinf, "inf"),
            (o.neginf, "-inf"),
        )
        if n
    ]
    if o.largest is not None:
        counts.append(f"largest |x| {o.largest:.3g}")
    return f"{who} {o.dtype} {_shape(o.shape)}: " + (", ".join(counts) or "all finite")


def _made_rows(label: str, m: Made) -> List[Text]:
    made = ", ".join(_VALUE[k] for k in m.made)
    count = "" if m.count is None else f"{m.count:,} of "
    into = f" in {m.name}" if m.name else ""
    node = f" ({m.node})" if m.node else ""
    lines = [
        _row(label, _at(m.place)),
        _more(
            _styled(
                f"{m.op}{node}, {m.phase}, iteration {m.iteration}: made {made}{into} "
                f"({count}{m.dtype} {_shape(m.shape)})",
                "dim",
            )
        ),
    ]
    for o in m.operands:
        lines.append(_more(_styled(_operand(o), "dim")))
    return lines


def nonfinite_lines(nf: NonFinite, fix_rows: Callable[[Tuple[Fix, ...]], List[Text]]) -> List[Text]:
    """The finding, as the console shows it; ``fix_rows`` draws the fixes as ``doctor.py``
    draws every fix (its words, its edits as lines out and in, whether it ran clean)."""
    s = nf.symptom
    title = f"{_WHAT[s.what]} became {_VALUE[s.value]}"
    lines = [
        _styled(f"tensortrace doctor: {title}", "bold red"),
        _styled("→ ", "bold red") + _styled(nf.headline, "bold"),
    ]
    if nf.origin is not None:
        lines += _made_rows("made", nf.origin)
    if nf.then is not None:
        lines += _made_rows("then", nf.then)
    if nf.entered is not None:
        lines += _made_rows("read", nf.entered)
    where = "step" if s.what == "parameter" else ("backward" if s.what == "loss" else "seen at")
    lines.append(_row(where, _at(s.place)))
    if s.names and s.what != "loss":
        lines.append(_more(_styled(", ".join(s.names), "dim")))
    if nf.losses and (nf.rule == "divergence" or nf.origin is None):
        shown = ", ".join(f"{v:.4g}" for v in nf.losses[-6:])
        lines.append(_row("losses", _styled(f"{shown} (the last iterations before)", "dim")))
    lines += fix_rows(nf.fixes)
    checked = None
    if nf.watch == "losses":
        checked = (
            "the losses only; --nan checks log, division, sqrt, exp, pow and the like, and "
            "their gradients, --nan-all every operation"
        )
    elif nf.watch in ("risky", "default") and (nf.origin is None or not nf.origin.from_finite):
        checked = (
            "log, division, sqrt, exp, pow and the like, and their gradients; "
            "--nan-all checks every operation"
        )
    if checked is not None:
        lines.append(_row("checked", _styled(checked, "dim")))
    return lines
