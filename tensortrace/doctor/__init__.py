"""``tensortrace doctor``: name the line that broke backward, or silently changed what it computes.

Runs inside the user's own process, around the user's own code (no safe
mode): ``recorder.py`` watches what autograd saves and what writes into it,
``diagnose.py`` reads a failed backward while its graph still exists,
``records.py`` holds the report's typed records (``render/doctor.py`` draws
them), and ``session.py`` the ``with tensortrace.doctor():`` block and the
command line's script runner. docs/doctor.md describes what it finds.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .session import doctor, run_target


class _CallableModule(types.ModuleType):
    """Once this package is imported, ``tensortrace.doctor`` may be the package rather than the
    class; calling the package makes a ``doctor`` all the same."""

    def __call__(self, *args: Any, **kwargs: Any) -> doctor:
        return doctor(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["doctor", "run_target"]
