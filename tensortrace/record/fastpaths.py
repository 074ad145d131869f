"""Modules whose ``forward`` takes a fast path only when no torch-function mode is active.

``nn.TransformerEncoder``, ``nn.TransformerEncoderLayer`` and
``nn.MultiheadAttention`` check ``torch.overrides.has_torch_function`` before
their fused kernels, and that is true whenever *any* ``TorchFunctionMode`` is
on the stack: under the recording's call mode an eval-mode encoder with a
padding mask ran its slow path, and its padded positions held computed values
where plain PyTorch gives zeros. So around the ``forward`` of a module whose
code asks that question, the call mode steps off the stack (when it is the
only function mode there: with one of the user's on it, plain PyTorch takes
the slow path too). The module's call is then recorded as one call, the
module's ``forward``, and the ATen operations it ran (the dispatch mode
stays) are listed under it; the trace's notices say so.

The module is told by a global forward pre-hook and an always-called forward
hook, registered while the recording's modes are on the stacks
(``opmodes.BothModes``). Global hooks do not count as "hooks attached to the
module" for the fast path's own check, which reads the module's own hooks.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from .modestack import FUNCTION, insert, remove
from .oplog import OpEntry

if TYPE_CHECKING:  # pragma: no cover
    from .opmodes import CallMode

_ASKS: Dict[type, bool] = {}  # module class -> its forward asks for torch-function modes


def asks_for_modes(cls: type) -> bool:
    """Whether ``cls.forward``'s code calls ``has_torch_function`` (read once per class)."""
    found = _ASKS.get(cls)
    if found is None:
        try:
            code = inspect.unwrap(cls.forward).__code__
            found = "has_torch_function" in code.co_names
        except (AttributeError, ValueError, TypeError):
            found = False
        _ASKS[cls] = found
    return found


class _Forward:
    """What the op log calls a module's forward: ``torch.nn.TransformerEncoder.forward`` (the
    public name of a ``torch.nn`` class, not the module that defines it)."""

    def __init__(self, cls: type) -> None:
        module = cls.__module__
        public = "torch.nn" if getattr(torch.nn, cls.__name__, None) is cls else module
        self.__module__ = public
        self.__qualname__ = f"{cls.__qualname__}.forward"
        self.__name__ = "forward"


_FORWARDS: Dict[type, _Forward] = {}


def _forward(cls: type) -> _Forward:
    found = _FORWARDS.get(cls)
    if found is None:
        found = _FORWARDS[cls] = _Forward(cls)
    return found


def notice(name: str) -> str:
    return (
        f"{name} checks that no torch-function mode is active before its fast path, so the "
        "recording's call mode stepped aside while it ran: it is listed as one call, with the "
        "ATen operations under it"
    )


class FastPaths:
    """The hooks that step the call mode aside around such a module's ``forward``."""

    def __init__(self, calls: "CallMode", limit: int) -> None:
        self.calls = calls
        self.limit = limit  # ``opmodes.MAX_OPS``: past it, operations are only counted
        self.handles: List[Any] = []
        # per open forward of an asking module: whether the call mode stepped aside for it,
        # the entry recorded for it (None past the limit) and the parent it replaced
        self.open: List[Tuple[bool, Optional[OpEntry], Optional[int]]] = []

    def __enter__(self) -> None:
        hooks = torch.nn.modules.module
        self.handles = [
            hooks.register_module_forward_pre_hook(self.before),
            hooks.register_module_forward_hook(self.after, always_call=True),
        ]

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.open = []  # a forward that never returned (the caller takes the modes out)

    def before(self, module: Any, args: Any) -> None:
        if not asks_for_modes(type(module)):
            return
        calls = self.calls
        rec = calls.rec
        # only when the call mode is the one function mode on the stack: inside a recorded
        # call it is off already, and a mode of the user's makes plain PyTorch slow too
        if FUNCTION.length() != 1 or FUNCTION.top() is not calls or rec.paused:
            self.open.append((False, None, None))
            return
        remove(FUNCTION, calls)
        rec.aside[f"nn.{type(module).__name__}"] = None
        entry: Optional[OpEntry] = None
        rec.count += 1
        if rec.count <= self.limit:
            if rec.pending:
                rec.settle()
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            entry = OpEntry("call", _forward(type(module)), None, [rec.take(t) for t in tensors])
            rec.raw.append(entry)
        self.open.append((True, entry, rec.parent))
        if entry is not None:
            rec.parent = len(rec.raw) - 1

    def after(self, module: Any, args: Any, output: Any) -> None:
        if not asks_for_modes(type(module)) or not self.open:
            return
        aside, entry, parent = self.open.pop()
        if not aside:
            return
        rec = self.calls.rec
        rec.parent = parent
        if rec.pending:
            rec.settle()
        if entry is not None:
            produced = output if isinstance(output, (tuple, list)) else (output,)
            entry.outs = [rec.take(t) for t in produced if isinstance(t, torch.Tensor)]
        insert(FUNCTION, self.calls)


__all__ = ["FastPaths", "asks_for_modes", "notice"]
