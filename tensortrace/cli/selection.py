"""What the command line's --step, --steps and --show ask for, read and checked.

Plain parsing with errors a user can act on (``UsageError``); the renderers
then read the result from ``RenderOptions``.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

from ..errors import UsageError

# A name as a scenario writes one: a, lin.weight, xs[0], d['k'].
_NAME = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[(\d+|'[^']*'|\"[^\"]*\")\])*$"
)


def names_of(text: Optional[str], option: Optional[str] = None) -> Tuple[str, ...]:
    """``a, lin`` -> ``("a", "lin")``: the names of a comma-separated option.

    With ``option`` (``--graph``), a part that is no name is a ``UsageError`` naming it.
    """
    names = tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()
    for name in names if option is not None else ():
        if not _NAME.match(name):
            raise UsageError(
                f"{option} {name!r} is not a name: write names such as a, lin.weight, xs[0] "
                "or d['k'], comma-separated"
            )
    return names


def parse_steps(step: Optional[int], steps: Optional[str]) -> Optional[frozenset]:
    """The step numbers asked for (0: the setup), or None for all.

    ``UsageError`` for a malformed range.
    """
    if step is not None and steps is not None:
        raise UsageError("give --step or --steps, not both")
    if step is not None:
        if step < 0:
            raise UsageError(f"--step {step}: steps are numbered from 1 (0 is the setup)")
        return frozenset([step])
    if steps is None:
        return None
    chosen = set()
    for part in steps.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                chosen.update(range(lo, hi + 1))
            else:
                chosen.add(int(part))
        except ValueError:
            raise UsageError(
                f"--steps {steps!r}: write step numbers and ranges such as 2-5 or 1,3,7-9"
            ) from None
    return frozenset(chosen)


def check_steps_exist(steps: Optional[frozenset], counts: Sequence[int], has_setup: bool) -> None:
    """A step number that no scenario has is a mistake worth saying, not an empty page.

    Step 0 is the setup, so it exists only when a scenario has one.
    """
    if not steps:
        return
    most = max(counts, default=0)
    missing = sorted(i for i in steps if i > most or (i == 0 and not has_setup))
    if missing:
        shown = ", ".join(str(i) for i in missing[:5])
        if not most:
            raise UsageError(f"there is no step {shown}")
        setup = "0 (the setup) and " if has_setup else ""
        raise UsageError(f"there is no step {shown}: the scenario has steps {setup}1 to {most}")


__all__ = ["check_steps_exist", "names_of", "parse_steps"]
