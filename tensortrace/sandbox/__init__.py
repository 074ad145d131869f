"""Safe mode: what a scenario's code may do, and how it is executed.

Scenario files are shared, so running one must not read or write the user's
files, start processes, open connections, or reach the interpreter's
internals. At the level of Python, safe mode (the default) has two layers
that read the same policy tables (:mod:`.policy`):

1. **Before anything runs**, :func:`check_source` (:mod:`.checker`) walks the
   code's syntax tree and returns a :class:`Refusal` (line, column, message)
   for every construct the policy refuses where it is written.
2. **While it runs**, the code produced by :func:`compile_safe` sends every
   attribute read and write, every import and every class statement through
   the guards of :mod:`.guards` (and the builtins of
   :mod:`.scenario_builtins`), which raise :class:`SafeModeViolation` for
   what is reached another way.

The checker's knowledge of the syntax tree is in :mod:`.syntax`, the checks
that need the whole source in :mod:`.deferred`; the guards' verdicts on live
objects, and their caches, are in :mod:`.verdicts`; the tables on modules
are in :mod:`.modules`, re-exported by :mod:`.policy`.

This layer exists for clear, early messages; it is not a proof of safety.
The runner also executes each step in a child process under operating-system
limits. See ``docs/safety.md``.
"""

from __future__ import annotations

from .checker import Refusal, check_source, compile_safe
from .guards import SafeModeViolation, safe_globals
from .policy import ALLOWED_DUNDER_METHODS, ALLOWED_MODULES, ALLOWED_UNDERSCORE_ATTRIBUTES

__all__ = [
    "ALLOWED_MODULES",
    "ALLOWED_UNDERSCORE_ATTRIBUTES",
    "ALLOWED_DUNDER_METHODS",
    "Refusal",
    "SafeModeViolation",
    "check_source",
    "compile_safe",
    "safe_globals",
]
