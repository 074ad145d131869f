"""Modules beside a Python file, imported in safe mode as the user's own code.

``python FILE`` imports ``helper`` from ``helper.py`` beside FILE. In safe
mode the file's code and that module's are the user's alike, so the module
gets the same treatment as the file: its code was checked with the file's,
before anything ran (``check_source`` with ``local``), it is compiled through
the same guards (``compile_safe``), and it runs in a namespace with the same
builtins (the run's own, so that its imports come back here). Its functions
and classes count as home, as the file's own do: the guards read their
attributes as they read the file's.

The module runs from the text that was checked, not from the file again, and
is kept per run (never in ``sys.modules``, which an in-process run shares with
its caller): a second ``import helper`` gets the same module, as Python's
import would; one whose code raised is forgotten, as Python forgets it.
"""

from __future__ import annotations

import types
from typing import Any, Dict, FrozenSet, Sequence, Tuple

from .checker import compile_safe

#: (name, file, text) of each module beside the file: ``scenario.spec.LocalModule`` as plain data
Source = Tuple[str, str, str]


class LocalModules:
    """The modules beside one run's Python file: known by name, run on their first import."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources: Dict[str, Source] = {name: (name, path, text) for name, path, text in sources}
        self.names: FrozenSet[str] = frozenset(self.sources)
        self.loaded: Dict[str, types.ModuleType] = {}
        self.builtins: Dict[str, Any] = {}  # the run's builtins (``guards.safe_globals``)
        self.home: Any = None  # the runtime's verdicts, told of each module as it is made

    def load(self, name: str) -> types.ModuleType:
        """The module ``name``, run now if it is not yet."""
        module = self.loaded.get(name)
        if module is not None:
            return module
        _, path, text = self.sources[name]
        code = compile_safe(text, path, "exec", self.names)
        module = types.ModuleType(name)
        module.__file__ = path
        module.__dict__["__builtins__"] = self.builtins
        if self.home is not None:
            self.home.home_module(module)
        self.loaded[name] = module  # before it runs: an import cycle gets it half made
        try:
            exec(code, module.__dict__)
        except BaseException:
            del self.loaded[name]
            raise
        return module


__all__ = ["LocalModules", "Source"]
