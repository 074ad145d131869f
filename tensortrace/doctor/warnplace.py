"""A warning raised under doctor's watch, shown at the line that made it, as without doctor.

PyTorch raises many warnings from C++ ("the .grad attribute of a Tensor that
is not a leaf Tensor is being accessed"), and Python puts such a warning at
the innermost Python frame: under doctor, that is the watch's own handler
(``watch.py``'s ``return func(...)``), not the caller's line. Python also
shows a warning once per line, so the same warning from several of the
caller's lines would show once, at the watch's.

``Redirect`` stands in for ``warnings.showwarning`` while doctor watches. A
warning put at a line of doctor's (any module here but ``session``, whose own
warnings are doctor's to place) is issued again at the first frame outside
doctor beyond that line (``warnings.warn_explicit``, with that frame's
module, registry and globals: the filters and the once-per-line rule act on
it as they would without doctor), and the watch module's registry forgets it,
so that the next one, from another line, is not taken for it. Any other
warning goes to the ``showwarning`` that was in place.

The same holds for a warning that Python code of PyTorch's puts a few frames up
(``stacklevel``), which under a mode lands in ``torch/overrides.py``.

A warning that a filter ignores or turns into an error for doctor's module is
decided before it reaches ``showwarning``: a ``DeprecationWarning`` from C++
under a script's own ``__main__`` is one (Python's default filters show those
for ``__main__`` only).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Callable, Optional

import torch
import torch.utils._python_dispatch

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_OWN = os.path.join(_HERE, "session.py")  # doctor's own warnings: placed where they are
# PyTorch's frames between a call and a mode's handler
_MACHINERY = frozenset(
    (torch.overrides.__file__, torch.utils._python_dispatch.__file__, warnings.__file__)
)


def _ours(filename: str) -> bool:
    return filename.startswith(_HERE) and filename != _OWN


class Redirect:
    """``warnings.showwarning`` while doctor watches (see the module's docstring)."""

    def __init__(self, previous: Callable[..., Any]) -> None:
        self.previous = previous

    def __call__(
        self,
        message: Any,
        category: Any,
        filename: str,
        lineno: int,
        file: Any = None,
        line: Optional[str] = None,
    ) -> None:
        if _ours(filename) or filename in _MACHINERY:
            frame = _caller(filename, lineno)
            if frame is not None:
                globs = frame.f_globals
                warnings.warn_explicit(
                    message,
                    category,
                    frame.f_code.co_filename,
                    frame.f_lineno,
                    module=globs.get("__name__"),
                    registry=globs.setdefault("__warningregistry__", {}),
                    module_globals=globs,
                )
                return
        self.previous(message, category, filename, lineno, file, line)


def _caller(filename: str, lineno: int) -> Any:
    """The frame a warning put at doctor's line (or at PyTorch's mode machinery, from under
    doctor's handler) belongs to without doctor, or None for any other warning; the module
    it was put at forgets it (its once-per-line registry is cleared).

    Outward from that line, past doctor's and the machinery's frames: the first other one.
    When the way in was ``handle_torch_function`` (a Python function of PyTorch's that passes
    itself to the modes and runs again inside them), the frame that called it is that same
    function's first run, which the run inside stands for: its caller is the frame.
    """
    frame: Any = sys._getframe(2)
    under_ours = False
    while frame is not None and not (
        frame.f_code.co_filename == filename and frame.f_lineno == lineno
    ):
        under_ours = under_ours or _ours(frame.f_code.co_filename)
        frame = frame.f_back
    if frame is None or not (_ours(filename) or (filename in _MACHINERY and under_ours)):
        return None
    registry = frame.f_globals.get("__warningregistry__")
    if isinstance(registry, dict):
        registry.clear()
    last = ""
    while frame is not None and (
        frame.f_code.co_filename.startswith(_HERE) or frame.f_code.co_filename in _MACHINERY
    ):
        last = frame.f_code.co_name
        frame = frame.f_back
    if last == "handle_torch_function" and frame is not None:
        frame = frame.f_back
    return frame


__all__ = ["Redirect"]
