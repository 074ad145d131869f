"""Which class names a ``raises:`` or ``warns:`` declaration may use.

A declared name is matched at run time against the ``__name__`` and
``module.qualname`` of the raised class and its bases, so a misspelling such
as ``RunTimeError`` can never match: it would only fail after the whole run.
The loader asks ``unknown_class`` at load time instead. Names are checked
against the builtins, torch's own exception and warning classes, dotted names
that resolve, and the classes the scenario defines (or imports) itself.

Nothing here imports a module a scenario names: a scenario file is not
trusted, and loading runs outside the confined child. Only torch is imported,
and only when a name is not a builtin.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import re
import sys
from typing import FrozenSet, Iterable, List, Optional, Set

_CLASS_RE = re.compile(r"^[ \t]*class[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def scenario_classes(codes: Iterable[str]) -> Set[str]:
    """Names the scenario's own code binds to a class it defines or imports."""
    names: Set[str] = set()
    for text in codes:
        names.update(_CLASS_RE.findall(text))
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # placeholders not yet filled in; the class regex still saw the definitions
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def unknown_class(name: str, warning: bool, own: Set[str]) -> Optional[str]:
    """None when ``name`` can name the declared class; else why not, with a suggestion."""
    base = Warning if warning else BaseException
    kind = "a warning class" if warning else "an exception class"
    if name in own:
        return None
    if "." in name:
        found = _resolve(name)
        if found is _UNCHECKED:
            return None
        if isinstance(found, type) and issubclass(found, base):
            return None
        if found is None:
            return f"{name!r} does not name anything in {name.split('.')[0]}; check the spelling"
        return f"{name!r} is not {kind}"
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, base):
        return None
    if _torch() is None:
        return None  # without torch nothing runs anyway; the run says so
    known = _loaded_class_names(base)
    if name in known:
        return None
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        close = _closest(name, base, known)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{name!r} is not {kind}{hint}"
    close = _closest(name, base, known | own)
    hint = (
        f"; did you mean {close[0]!r}?"
        if close
        else (
            "; give a builtin or torch class, one the scenario defines, "
            "or a dotted name such as torch.OutOfMemoryError"
        )
    )
    return f"{name!r} is not {kind} of Python or torch{hint}"


def _closest(name: str, base: type, known: Set[str]) -> List[str]:
    """The close match to suggest: a builtin class first, because which other classes are
    loaded depends on the process (a Jupyter kernel, a test runner's plugins)."""
    builtin = sorted(
        n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, base)
    )
    return difflib.get_close_matches(name, builtin, n=1, cutoff=0.6) or difflib.get_close_matches(
        name, sorted(known), n=1, cutoff=0.6
    )


_UNCHECKED = object()


def _resolve(name: str) -> object:
    """The object a dotted name names, None if it names nothing, or _UNCHECKED.

    Only torch is imported; any other module is looked at only when it is
    already loaded (importing it would run code the scenario chose).
    """
    parts = name.split(".")
    root = parts[0]
    if root == "builtins":
        obj: object = builtins
    elif root == "torch" and _torch() is not None:
        obj = sys.modules["torch"]
    elif root in sys.modules and sys.modules[root] is not None:
        obj = sys.modules[root]
    else:
        return _UNCHECKED
    for i, part in enumerate(parts[1:], start=1):
        module = sys.modules.get(".".join(parts[: i + 1]))
        try:
            obj = module if module is not None else getattr(obj, part)
        except Exception:  # torch's lazy submodules import on attribute access, and may fail
            return None
    return obj


def _torch() -> object:
    try:
        import torch
    except Exception:  # no torch here: the run will say so
        return None
    return torch


@functools.lru_cache(maxsize=None)
def _loaded_class_names(base: type) -> FrozenSet[str]:
    """``__name__`` of every subclass of ``base`` loaded here, torch's included."""
    _torch()
    names: Set[str] = set()
    stack: List[type] = [base]
    seen: Set[type] = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        names.add(cls.__name__)
        try:
            stack.extend(cls.__subclasses__())
        except TypeError:  # type.__subclasses__ needs an instance
            continue
    return frozenset(n for n in names if not n.startswith("_"))


__all__ = ["scenario_classes", "unknown_class"]
