"""What the doctor keeps of a run, and the dispatch mode that sees writes.

A ``SavedTensor`` per tensor autograd saved, a ``WriteSeen`` per in-place write
into one, a ``Call`` per backward; ``Watch`` is the ``TorchDispatchMode`` that
hands each ATen operation that writes (``Tensor(a!)`` in its schema) to the
``Recorder`` (``recorder.py``), which decides what it hit.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from torch.utils._python_dispatch import TorchDispatchMode

from .places import Spot

if TYPE_CHECKING:
    from .recorder import Recorder


class SavedTensor:
    """What the pack hook hands autograd for one saved tensor; the graph keeps it alive."""

    __slots__ = (
        "tensor",
        "original",
        "version",
        "fp",
        "key",
        "spot",
        "grad_fn",
        "output_nr",
        "is_output",
        "writes",
        "__weakref__",
    )

    def __init__(
        self,
        t: Any,
        keep: Any,
        fp: Optional[int],
        key: Optional[int],
        spot: Optional[Spot],
        grad_fn: Any,
        is_output: bool,
    ) -> None:
        self.tensor = keep
        self.original = weakref.ref(t)
        self.version = t._version
        self.fp = fp
        self.key = key
        self.spot = spot
        # the name of the node that saved an output (holding the node itself would make a
        # cycle through its C++ side); an input is named by its own grad_fn when asked
        self.grad_fn = grad_fn.name() if is_output else None
        self.output_nr = t.output_nr if is_output else 0
        self.is_output = is_output
        self.writes: List["WriteSeen"] = []


class WriteSeen:
    """One in-place write into a saved tensor's memory."""

    __slots__ = ("op", "spot", "alias", "version", "via")

    def __init__(
        self,
        op: str,
        spot: Optional[Spot],
        alias: Optional[str],
        version: Optional[int],
        via: Optional[str],
    ) -> None:
        self.op, self.spot, self.alias, self.version, self.via = op, spot, alias, version, via


class Call:
    """One backward or autograd.grad call."""

    __slots__ = ("index", "kind", "spot", "retain", "mark")

    def __init__(
        self, index: int, kind: str, spot: Optional[Spot], retain: bool, mark: int
    ) -> None:
        self.index, self.kind, self.spot, self.retain, self.mark = index, kind, spot, retain, mark


def _written(func: Any) -> Tuple[Tuple[int, str], ...]:
    """(position, name) of the arguments an ATen operation writes into."""
    found = []
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is not None and info.is_write:
            found.append((-1 if arg.kwarg_only else i, arg.name))
    return tuple(found)


_PLANS: Dict[Any, Tuple[Tuple[int, str], ...]] = {}


class Watch(TorchDispatchMode):
    """The write watch: every ATen operation passes through here while the recorder runs."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Not wrapped in torch._disable_dynamo: that costs a call per operation, and dynamo
        # compiles no frame while a dispatch mode is on (docs/doctor.md says so).
        return False

    def __init__(self, rec: "Recorder") -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        rec = self.rec
        if rec.pending:
            rec.settle_writes()
        if not rec.busy:
            plan = _PLANS.get(func)
            if plan is None:
                plan = _PLANS[func] = _written(func)
            if plan and rec.index:
                rec.note_writes(func, plan, args, kwargs)
        if rec.nonfinite is not None:  # checked for NaN and Inf (nonfinite.py)
            return rec.nonfinite.call(func, args, kwargs)
        return func(*args, **kwargs)
