"""Which tensors a bound value holds, and under which names: ``x``, ``lin.weight``, ``xs[0]``.

The tracer records a tensor bound to a name, a module's parameters and
buffers, and tensors in lists, tuples and dicts up to two levels deep. Every
read here uses the built-in types' own methods and a module's own dicts, so
that no method a user's subclass overrides runs on the tool's behalf.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from .probe import reason_of
from .values import is_ndarray

# tensors recorded per step (tracer.MAX_NAMES): a container's items beyond it are not read
MAX_NAMES = 500


def expand_value(
    name: str,
    value: Any,
    found: List[Tuple[str, Any, str]],
    depth: int,
    notes: Optional[List[str]] = None,
) -> None:
    """Add ``value``'s tensors to ``found`` under the names the contract gives them.

    Containers are read with the built-in types' own methods (``list.__getitem__``,
    ``dict.items``), so that a subclass's overrides, which the user's code may
    count or log, never run on the tool's behalf.
    """
    if isinstance(value, torch.Tensor):
        kind = "parameter" if isinstance(value, torch.nn.Parameter) else "tensor"
        found.append((name, value, kind))
    elif is_ndarray(value):
        found.append((name, value, "ndarray"))
    elif isinstance(value, torch.nn.Module):
        try:
            members = _module_members(name, value)
        except Exception as exc:  # e.g. an __init__ that never called super().__init__()
            if notes is not None:
                notes.append(
                    f"{name}: its parameters could not be listed "
                    f"({type(exc).__name__}: {reason_of(exc)})"
                )
            return
        found.extend(members)
    elif depth < 2 and isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        getitem = list.__getitem__ if isinstance(value, list) else tuple.__getitem__
        for i, item in enumerate(getitem(value, slice(0, MAX_NAMES))):
            expand_value(f"{name}[{i}]", item, found, depth + 1, notes)
    elif depth < 2 and isinstance(value, dict):
        for key, item in list(dict.items(value))[:MAX_NAMES]:
            if isinstance(key, (str, int)) and not isinstance(key, bool):
                expand_value(f"{name}[{key!r}]", item, found, depth + 1, notes)
    elif notes is not None and isinstance(value, (list, tuple, dict)) and _holds_tensor(value, 4):
        note = f"{name} holds tensors nested more than two containers deep; they are not recorded"
        if note not in notes:
            notes.append(note)


def _holds_tensor(value: Any, depth: int) -> bool:
    """Whether a container holds a tensor within ``depth`` more levels (its first items only)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth <= 0 or isinstance(value, torch.Size):
        return False
    if isinstance(value, (list, tuple)):
        items = (list.__getitem__ if isinstance(value, list) else tuple.__getitem__)(
            value, slice(0, 64)
        )
    elif isinstance(value, dict):
        items = list(dict.values(value))[:64]
    else:
        return False
    return any(_holds_tensor(item, depth - 1) for item in items)


def _module_members(name: str, module: torch.nn.Module) -> List[Tuple[str, Any, str]]:
    """The parameters, then the buffers, of ``module`` and its submodules, in the order and under
    the names ``named_parameters()`` and ``named_buffers()`` give them.

    Read from the modules' own ``_modules``, ``_parameters`` and ``_buffers``
    dicts, never through a method or ``__getattr__`` a subclass may override:
    the user's code must not see the tool call it.
    """
    modules: List[Tuple[str, Any]] = []
    seen_modules: set = set()
    stack: List[Tuple[str, Any]] = [(name, module)]
    while stack:  # preorder, each module once, as named_modules()
        prefix, m = stack.pop()
        if id(m) in seen_modules:
            continue
        seen_modules.add(id(m))
        own = object.__getattribute__(m, "__dict__")
        if not all(k in own for k in ("_modules", "_parameters", "_buffers")):
            raise AttributeError(f"{type(m).__name__}.__init__ did not call super().__init__()")
        modules.append((prefix, own))
        children = [(f"{prefix}.{k}", c) for k, c in dict.items(own["_modules"]) if c is not None]
        stack.extend(reversed(children))
    members: List[Tuple[str, Any, str]] = []
    for field, kind in (("_parameters", "parameter"), ("_buffers", "buffer")):
        seen: set = set()
        for prefix, own in modules:
            for key, t in dict.items(own[field]):
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    members.append((f"{prefix}.{key}", t, kind))
    return members


__all__ = ["expand_value"]
