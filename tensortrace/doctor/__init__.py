"""``tensortrace doctor``: name the line that broke backward, or silently changed what it computes.

Runs inside the user's own process, around the user's own code (no safe
mode): ``recorder.py`` watches what autograd saves and what writes into it
(``watch.py`` its records and function mode, ``taps.py`` the wrappers that
see cuts and steps, ``aside.py`` the regions it steps out of);
``diagnose.py`` reads a failed backward while its graph still exists
(``freed.py`` a freed graph, ``cuts.py`` a loss that does not require grad,
``silent.py`` silent changes and starved parameters), naming things with
``names.py`` and ``places.py`` and walking graphs with ``graphs.py``; fixes
are edits (``edits.py``) that ``verify.py`` runs on copies of the script in a
child (``replay.py``). ``session.py`` holds the ``with tensortrace.doctor():``
block and the command line's script runner; the report's typed records are
``trace/doctor.py``, drawn by ``render/doctor.py``. ``nonfinite.py`` and
``symptoms.py`` watch for the first NaN or Inf (by default ``symptoms.py``
alone; with ``--nan`` ``nanmode.py`` hands them operations, ``nanrules.py``
says why, ``nanfix.py`` and ``nancheck.py`` build and run its fixes).
docs/doctor.md describes what it finds.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any


class _CallableModule(types.ModuleType):
    """Once this package is imported, ``tensortrace.doctor`` may be the package rather than the
    class; calling the package makes a ``doctor`` all the same."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.doctor(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """``doctor`` and ``run_target``, loaded on first use (the command line imports this
    package at every start)."""
    if name in __all__:
        value = getattr(import_module(".session", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["doctor", "run_target"]
