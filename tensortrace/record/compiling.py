"""A scenario's code, checked before anything runs and compiled once per text.

In safe mode every piece of code goes through the sandbox's checker
(``check_policy``, before the first step) and its compiler (``StepCompiler``);
with ``--trust`` it is compiled as plain Python. A text compiled before (a
step repeated, a variant of the same scenario) is only given its new file name.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import types
from typing import Any, Callable, Dict, FrozenSet, Iterator, Optional, Tuple

from ..errors import PolicyError

_MAX_COMPILED = 4096  # code objects a run keeps by text, for steps that repeat a text


def local_names(scenario: Any) -> FrozenSet[str]:
    """The names of the modules beside the scenario's Python file that its code imports."""
    return frozenset(m.name for m in getattr(scenario, "modules", ()))


def check_policy(scenario: Any) -> None:
    """Safe mode: refuse, before anything runs, code that reaches outside the scenario.

    The modules beside a Python file that its code imports are its user's code too, and
    are checked as it is; a refusal there names the module's file and line.
    """
    from ..sandbox import check_source

    for where, reason in scenario.refusals[:1]:  # e.g. a notebook's IPython magics
        raise PolicyError(reason, path=where)
    local = local_names(scenario)
    for module in getattr(scenario, "modules", ()):
        try:
            with deep_recursion():
                refusals = check_source(module.source, "exec", local)
        except RecursionError:
            raise PolicyError(
                "is nested too deeply for safe mode to check; split it into simpler statements, "
                "or use --trust to run it as plain Python",
                path=module.path,
            ) from None
        except SyntaxError as exc:
            raise PolicyError(
                f"is not valid Python ({exc.msg})",
                path=module.path,
                line=exc.lineno,
                column=exc.offset,
            ) from None
        if refusals:
            first = refusals[0]
            raise PolicyError(first.message, path=module.path, line=first.line, column=first.column)
    for what, code, mode in scenario.all_code():
        try:
            with deep_recursion():
                refusals = check_source(code.source(mode), mode, local)
        except RecursionError:
            raise PolicyError(
                f"{what} is nested too deeply for safe mode to check; split it into simpler "
                "statements, or use --trust to run it as plain Python",
                path=scenario.path,
                line=code.line,
                column=code.column,
            ) from None
        if refusals:
            first = refusals[0]
            line, column = code.locate_source(mode, first.line, first.column)
            raise PolicyError(f"{first.message}", **scenario.place(code, line, column))


@contextlib.contextmanager
def deep_recursion(limit: int = 6000) -> Iterator[None]:
    """Room for the safe-mode checker's recursive walk of long expressions (a.abs().abs()...)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def relabel(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` under another file name, its nested functions' code too: a
    traceback's file name says which step (or setup piece) the line is in."""
    consts = code.co_consts
    if any(isinstance(c, types.CodeType) for c in consts):
        consts = tuple(relabel(c, filename) if isinstance(c, types.CodeType) else c for c in consts)
    return code.replace(co_filename=filename, co_consts=consts)


_COMPILE_SAFE: Optional[Callable[..., types.CodeType]] = None


def _compile_safe() -> Callable[..., types.CodeType]:
    """``sandbox.compile_safe``, imported at its first use (once)."""
    global _COMPILE_SAFE
    if _COMPILE_SAFE is None:
        from ..sandbox import compile_safe

        _COMPILE_SAFE = compile_safe
    return _COMPILE_SAFE


class StepCompiler:
    """Compiles a run's code, in safe mode through the sandbox, each text once.

    ``local``: the names of the modules beside the run's Python file, which its imports
    may name in safe mode.
    """

    def __init__(self, safe: bool, local: FrozenSet[str] = frozenset()) -> None:
        self.safe = safe
        self.local = local
        # (text, mode) -> code; (text, "marks") -> the code with its loop marked, or None
        self._compiled: Dict[Tuple[str, str], Optional[types.CodeType]] = {}

    def __call__(self, code: Any, filename: str, mode: str) -> types.CodeType:
        """``code`` (a ``scenario.spec.Code``) compiled under ``filename``."""
        text = code.source(mode)
        known = self._compiled.get((text, mode))
        if known is not None:
            return known if known.co_filename == filename else relabel(known, filename)
        if self.safe:
            compile_safe = _compile_safe()
            try:  # known code comes from the checker's cache, at any depth
                compiled = compile_safe(text, filename, mode, self.local)
            except RecursionError:  # new code nested too deeply for this stack: again, with room
                with deep_recursion():
                    compiled = compile_safe(text, filename, mode, self.local)
        else:
            compiled = compile(text, filename, mode, dont_inherit=True)
        if len(self._compiled) < _MAX_COMPILED:
            self._compiled[(text, mode)] = compiled
        return compiled

    def with_loop_marks(self, code: Any, filename: str) -> Optional[types.CodeType]:
        """``code`` compiled with its one outermost loop's passes marked (``loops.marked``), or
        None when it holds no such loop (``code`` is then compiled as ever)."""
        from .loops import marked

        text = code.source("exec")
        key = (text, "marks")
        if key in self._compiled:
            known = self._compiled[key]
            if known is None or known.co_filename == filename:
                return known
            return relabel(known, filename)
        try:
            with deep_recursion():
                if self.safe:
                    compiled = _compile_safe()(text, filename, "exec", self.local, transform=marked)
                else:
                    tree = marked(ast.parse(text, filename, "exec"))
                    compiled = (
                        None if tree is None else compile(tree, filename, "exec", dont_inherit=True)
                    )
        except RecursionError:  # nested too deeply to mark: run as compiled, unmarked
            compiled = None
        if len(self._compiled) < _MAX_COMPILED:
            self._compiled[key] = compiled
        return compiled


__all__ = ["StepCompiler", "check_policy", "deep_recursion", "local_names", "relabel"]
