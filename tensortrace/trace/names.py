"""How a name given in ``show`` or ``graph`` picks the recorded names it stands for.

One rule for the scenario's keys, where the tracer reads them, and for the
command line's ``--show``, where the renderers read it: ``lin`` stands for
``lin.weight`` and ``lin.bias``, ``xs`` for ``xs[0]`` and ``xs[1]``, and
every name for itself. Plain string functions: no torch, so both sides use it.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Tuple


def covers(wanted: str, name: str) -> bool:
    """``lin`` covers ``lin.weight``; ``xs`` covers ``xs[0]``; a name covers itself."""
    return name == wanted or name.startswith(wanted + ".") or name.startswith(wanted + "[")


def expand(wanted: Sequence[str], present: Iterable[str]) -> Tuple[str, ...]:
    """The present names that ``wanted`` stands for, in the order asked, each once."""
    present = tuple(present)
    chosen = []
    seen = set()
    for want in wanted:
        for name in present:
            if covers(want, name) and name not in seen:
                seen.add(name)
                chosen.append(name)
    return tuple(chosen)


__all__ = ["covers", "expand"]
