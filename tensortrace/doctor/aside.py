"""Step aside for code that refuses saved-tensor hooks, so that it runs as it would without doctor.

``torch.func.grad``, ``vjp``, ``jacrev`` and ``hessian`` (and anything else
built on ``torch.autograd.graph.disable_saved_tensors_hooks``) raise when a
saved-tensor hook is registered: "torch.func transforms don't yet support
saved tensor hooks". Under doctor the script would fail where plain Python
runs. So the recorder wraps that function: when doctor's own hooks are the
innermost ones, it takes them (and its write watch) off for the region,
lets PyTorch disable hooks as it asked, and puts them back after. What runs
inside is not watched, and the report says where doctor stepped aside. When
someone else's hooks are innermost, the original runs unchanged (and raises
as it would without doctor).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .places import spot_of

if TYPE_CHECKING:
    from .recorder import Recorder

_AUTOGRAD = torch._C._autograd


def _ours_on_top(rec: "Recorder") -> bool:
    top = getattr(_AUTOGRAD, "_top_saved_tensors_default_hooks", None)
    if top is None or rec.hooks_off:
        return False
    try:
        found = top(False)
    except (RuntimeError, TypeError):
        return False
    return found is not None and found[0] == rec.pack


_TRANSFORMS = ("grad_and_value", "grad", "vjp", "jacrev", "jacfwd", "hessian", "vmap", "jvp")


def _what(message: str, spot: Any) -> str:
    """The transform the user's line calls (``torch.func.hessian``), read from its text."""
    import re

    from .places import line_text

    text = line_text(spot)
    for name in _TRANSFORMS:
        if re.search(rf"\b{name}\s*\(", text):
            return f"torch.func.{name}"
    return "torch.func" if "torch.func" in message else "code that refuses saved-tensor hooks"


def wrap(rec: "Recorder", original: Callable) -> Callable:
    @contextlib.contextmanager
    def disable_saved_tensors_hooks(error_message: str) -> Iterator[None]:
        if not _ours_on_top(rec):
            with original(error_message):
                yield
            return
        spot = spot_of(sys._getframe(2))
        rec.note_aside(_what(error_message, spot), spot)
        with rec.stepped_aside():
            with original(error_message):
                yield

    disable_saved_tensors_hooks.__wrapped__ = original  # type: ignore[attr-defined]
    return disable_saved_tensors_hooks


__all__ = ["wrap"]
