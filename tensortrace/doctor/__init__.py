"""``tensortrace doctor``: name the line that broke backward, or silently changed what it computes.

Runs inside the user's own process, around the user's own code (no safe
mode): ``recorder.py`` watches what autograd saves and what writes into it,
``diagnose.py`` reads a failed backward while its graph still exists,
``records.py`` holds the report's typed records (``render/doctor.py`` draws
them), and ``session.py`` the ``with tensortrace.doctor():`` block and the
command line's script runner; ``nonfinite.py`` and ``symptoms.py`` watch for
the first NaN or Inf. docs/doctor.md describes what it finds.
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
