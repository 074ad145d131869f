"""Check the fixes of a NaN or Inf by running them, as doctor's other fixes are (``verify.py``).

Each fix with edits runs on an edited copy of the script in a child: to its
end when the whole run fits the checks' budget, else until the backward call
where the symptom showed has passed once more than it had (the iteration
that went non-finite, and the next). The child watches for NaN and Inf as
the run did (``PROBES``: the same watch, at the same level), and a
fix passes only when that watch finds nothing. For a divergence the copy's
losses must not grow either (a thousandfold, the last three rising): a
smaller learning rate that only slows the growth fails, before it overflows.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import msgspec

from ..trace.doctor import Report

PROBES = {
    (level, growth): f"tensortrace.doctor.nancheck:probe_{level.replace('-', '_')}"
    + ("_growth" if growth else "")
    for level in ("losses", "risky", "every-op")
    for growth in (False, True)
}


class _Probe:
    """In the child: doctor's recorder with the NaN and Inf watch, read when the child ends."""

    def __init__(self, level: str, growth: bool) -> None:
        from .nonfinite import NonFiniteWatch
        from .recorder import Recorder

        self.growth = growth
        self.rec = Recorder()
        self.rec.start()
        self.watch = NonFiniteWatch(self.rec, level=level)
        self.rec.nonfinite = self.watch
        self.watch.start()

    def problems(self) -> List[str]:
        from . import nanrules, symptoms

        seen = symptoms.finish(self.watch)
        if seen is not None:
            return [nanrules.diagnosis(seen, self.watch.level).headline]
        grew = nanrules.diverging(list(self.watch.losses)) if self.growth else None
        if grew is not None:
            i, a, j, b = grew
            return [f"the loss still grows: {a:.3g} at iteration {i}, {b:.3g} at iteration {j}"]
        return []


def probe_losses(spec: Any) -> _Probe:
    return _Probe("losses", growth=False)


def probe_losses_growth(spec: Any) -> _Probe:
    return _Probe("losses", growth=True)


def probe_risky(spec: Any) -> _Probe:
    return _Probe("risky", growth=False)


def probe_risky_growth(spec: Any) -> _Probe:
    return _Probe("risky", growth=True)


def probe_every_op(spec: Any) -> _Probe:
    return _Probe("every-op", growth=False)


def probe_every_op_growth(spec: Any) -> _Probe:
    return _Probe("every-op", growth=True)


def checked(
    report: Report,
    target: str,
    args: Sequence[str],
    module: bool,
    budget: float,
    took: Optional[float],
    whole: Optional[float],
) -> Report:
    """``report`` with the NaN or Inf fixes run. ``took``: seconds the run needed to reach the
    symptom; ``whole``: to its end (whether a copy may run to its end within the budget)."""
    from .verify import Script, Target, check_fixes

    found = report.nonfinite
    if found is None or not any(f.edits for f in found.fixes):
        return report
    symptom = found.symptom
    if took is not None and took * 1.5 + 5 > budget:
        note = (
            f"the fixes were not run: the script took {took:.0f} s to reach the NaN or Inf, more "
            f"than the checks' budget allows ({budget:g} s; --check-budget raises it)"
        )
        return msgspec.structs.replace(report, checked=_joined(report.checked, note))
    point = None
    to_end = whole is not None and whole * 1.5 + 5 <= budget
    if symptom.backward is not None and not to_end:
        point = Target(symptom.backward.path, symptom.backward.line, symptom.backward_run)
    level = "risky" if found.watch == "default" else found.watch
    probe_name = PROBES[(level, found.rule == "divergence")]
    script = Script.of(target, args, module)
    fixes = check_fixes(script, found.fixes, point, budget=budget, probes=(probe_name,))
    runs = sum(1 for f in fixes if f.check is not None)
    times = "once" if runs == 1 else "twice" if runs == 2 else f"{runs} times"
    how_far = "to its end" if point is None else "to the iteration after the symptom's"
    note = (
        f"each fix of the NaN or Inf marked ✓ or ✗ ran on a copy of {target} {how_far}, "
        f"watched for NaN and Inf (the script ran again, {times}; --no-check skips this); "
        "your files were not changed"
    )
    return msgspec.structs.replace(
        report,
        nonfinite=msgspec.structs.replace(found, fixes=fixes),
        checked=_joined(report.checked, note),
    )


def _joined(before: Optional[str], note: str) -> str:
    """The report's note on checks: doctor's own, if it ran any, then this one."""
    if before is None or before.startswith("the fixes were not run (tensortrace doctor"):
        return note
    return f"{before}; {note}"
