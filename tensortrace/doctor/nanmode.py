"""The dispatch mode that hands ATen operations to the NaN and Inf watch (``nonfinite.py``).

Doctor's write watch is a function mode (``watch.py``): it sees the functions
the code calls, not the ATen operations they run. Finding the operation that
made the first NaN or Inf needs the operations themselves (the ``log_softmax``
inside ``F.cross_entropy``, the ``div`` inside a normalisation), so the NaN
watch has a dispatch mode of its own. It costs a Python call per operation
it sees, so it keeps the rhythm the write watch once had: on while a saved
tensor is alive (from a forward's first save until a backward frees the last
one), off while backward runs (the gradients are checked by hooks on graph
nodes) and while doctor steps aside (``aside.py``). By default (no ``--nan``)
it is never on. With ``every_op``
(``--nan-all``) it stays on between steps, so that data preparation and the
optimizer's step are checked too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_mode
from torch.utils._python_dispatch import _pop_mode, _pop_mode_temporarily, _push_mode


class NanMode(TorchDispatchMode):
    """Every ATen operation passes through here while the mode is on; the watch is asked only
    about an operation it checks, or while a graph node waits to be hooked."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Not wrapped in torch._disable_dynamo: that costs a call per operation, and dynamo
        # compiles no frame while a dispatch mode is on (docs/doctor.md says so).
        return False

    def __init__(self, nan: Any) -> None:
        super().__init__()
        self.nan = nan

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        nan = self.nan
        if nan.pending is not None or nan.plans.get(id(func)) is not False:
            return nan.call(func, args, kwargs)
        return func(*args, **kwargs)


class Switch:
    """The mode on and off for one watch, at the recorder's moments."""

    def __init__(self, rec: Any, nan: Any) -> None:
        self.rec = rec
        self.mode = NanMode(nan)
        self.on = False  # whether the mode is on the dispatch mode stack now

    def wake(self) -> None:
        """On again: a saved tensor is alive. Only from an empty mode stack (pushing above a
        mode of the code's own would break its exit), never inside a backward or aside."""
        rec = self.rec
        if not self.on and rec.current is None and not rec.hooks_off and _current_mode() is None:
            self.mode.__enter__()
            self.on = True

    def rest(self, every_op: bool) -> None:
        """Off while no saved tensor is alive, unless every operation is checked."""
        if self.on and not every_op and not self.rec.index and _current_mode() is self.mode:
            self.mode.__exit__(None, None, None)
            self.on = False

    def off(self) -> Any:
        """Off for a while (a backward, a region doctor steps aside for), when innermost."""
        if self.on and _current_mode() is self.mode:
            return _pop_mode_temporarily()
        return contextlib.nullcontext()

    def stop(self) -> None:
        """Off for good; from under modes of the code's own still on, if any."""
        if not self.on:
            return
        self.on = False
        if _current_mode() is self.mode:
            self.mode.__exit__(None, None, None)
            return
        above = []
        while _current_mode() is not None and _current_mode() is not self.mode:
            above.append(_pop_mode())
        if _current_mode() is self.mode:
            self.mode.__exit__(None, None, None)
        for mode in reversed(above):
            _push_mode(mode)


__all__ = ["NanMode", "Switch"]
