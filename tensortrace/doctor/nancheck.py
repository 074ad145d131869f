"""Check the fixes of a NaN or Inf by running them, as doctor's other fixes are (``verify.py``).

Each fix with edits runs on an edited copy of the script in a child, until
the backward call where the symptom showed has passed once more than it had
(the iteration that went non-finite, and the next), or the script ends. The
child watches for NaN and Inf as the run did (``probe``: the same watch,
by default or every operation), and a fix passes only when that watch finds
nothing: a fix that merely moves the NaN, or delays it past the checked
iterations, fails with the headline the copy got.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import msgspec

from ..trace.doctor import Report

PROBE = "tensortrace.doctor.nancheck:probe"
PROBE_EVERY_OP = "tensortrace.doctor.nancheck:probe_every_op"


class _Probe:
    """In the child: doctor's recorder with the NaN and Inf watch, read when the child ends."""

    def __init__(self, every_op: bool) -> None:
        from .nonfinite import NonFiniteWatch
        from .recorder import Recorder

        self.rec = Recorder()
        self.rec.start()
        self.watch = NonFiniteWatch(self.rec, every_op=every_op)
        self.rec.nonfinite = self.watch
        self.watch.start()

    def problems(self) -> List[str]:
        from . import nanrules, symptoms

        seen = symptoms.finish(self.watch)
        if seen is None:
            return []
        return [nanrules.diagnosis(seen, self.watch.every_op).headline]


def probe(spec: Any) -> _Probe:
    return _Probe(every_op=False)


def probe_every_op(spec: Any) -> _Probe:
    return _Probe(every_op=True)


def checked(
    report: Report,
    target: str,
    args: Sequence[str],
    module: bool,
    budget: float,
    took: Optional[float],
) -> Report:
    """``report`` with the NaN or Inf fixes run (``took``: seconds the run needed to reach the
    symptom, to tell whether the budget allows a copy to get there)."""
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
    if symptom.backward is not None:
        point = Target(symptom.backward.path, symptom.backward.line, symptom.backward_run)
    probes = (PROBE_EVERY_OP if found.watch == "every-op" else PROBE,)
    script = Script.of(target, args, module)
    fixes = check_fixes(script, found.fixes, point, budget=budget, probes=probes)
    runs = sum(1 for f in fixes if f.check is not None)
    times = "once" if runs == 1 else "twice" if runs == 2 else f"{runs} times"
    note = (
        f"each fix of the NaN or Inf marked ✓ or ✗ ran on a copy of {target}, "
        f"watched for NaN and Inf (the script ran again, {times}; --no-check skips this); your "
        "files were not changed"
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
