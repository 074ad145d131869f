"""The one-line verdicts of ``tensortrace check``: ``PASS name`` or ``FAIL name: where: why``.

A line quotes the scenario (its messages, its variant names), so every part is
made ``visible``: a broken or hostile file gives a readable line, never escape
sequences or characters that cannot be written.
"""

from __future__ import annotations

from ..trace import Trace
from ..render.facts import all_steps
from ..render.text import step_place
from ..render.visible import visible


def check_line(trace: Trace, target: str) -> str:
    """``PASS name`` or ``FAIL name: step N (line L): why``; ``target`` is what the user named."""
    name = target + (f" [{trace.scenario.variant}]" if trace.scenario.variant else "")
    if trace.passed:
        return visible(f"PASS {name}")
    for step in all_steps(trace):
        if not step.behaved:
            where = "setup" if step.index == 0 else f"step {step.index}"
            line = f" ({step_place(step)})" if step.line or step.cell else ""
            why = step.failures[0] if step.failures else "did not behave as declared"
            return visible(f"FAIL {name}: {where}{line}: {why}")
    return visible(f"FAIL {name}: {trace.aborted or 'did not run to the end'}")


def error_line(target: str, message: str) -> str:
    """The line for a target that could not be checked at all (``ERROR ...``)."""
    return visible(f"ERROR {message}") if message else visible(f"ERROR {target}")


def summary(passed: int, failed: int, unusable: int) -> str:
    """The closing count: ``3 passed, 1 failed`` (and what could not be used, when any)."""
    text = f"{passed} passed, {failed} failed"
    if unusable:
        text += f", {unusable} could not be used"
    return text


__all__ = ["check_line", "error_line", "summary"]
