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
        "seq",
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
        seq: int,
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
        self.seq = seq  # the sequence number of the graph node that saved it


class WriteSeen:
    """One in-place write into a saved tensor's memory.

    ``via``: the torch file and function between the write and the user's line
    (``torch/nn/modules/activation.py:forward``, ``torch/optim/adam.py:step``);
    ``module``: a weak reference to the ``nn.Module`` whose forward wrote, if one did."""

    __slots__ = ("op", "spot", "alias", "version", "via", "module")

    def __init__(
        self,
        op: str,
        spot: Optional[Spot],
        alias: Optional[str],
        version: Optional[int],
        via: Optional[str],
        module: Any = None,
    ) -> None:
        self.op, self.spot, self.alias, self.version, self.via = op, spot, alias, version, via
        self.module = module


class Call:
    """One backward or autograd.grad call: ``run`` is which call of its line it is (1 for the
    first); ``mark`` the sequence number the next graph node would get as it started.

    While it runs (and for a few calls after, ``Recorder.history``), ``nodes`` maps the
    sequence number of each graph node whose saved tensors it read to the line that saved
    them and (weak reference, version) of each; ``uses`` holds (sequence number of an input's
    own node, line) for each saved input that came from another node."""

    __slots__ = ("index", "kind", "spot", "retain", "mark", "run", "nodes", "uses")

    def __init__(
        self, index: int, kind: str, spot: Optional[Spot], retain: bool, mark: int, run: int = 1
    ) -> None:
        self.index, self.kind, self.spot, self.retain, self.mark = index, kind, spot, retain, mark
        self.run = run
        self.nodes: Dict[int, Tuple[Optional[Spot], List[Tuple[Any, int]]]] = {}
        self.uses: List[Tuple[int, Optional[Spot]]] = []


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
        nan = rec.nonfinite  # checked for NaN and Inf (nonfinite.py), when it is one to check
        if nan is not None and (nan.pending is not None or nan.plans.get(id(func)) is not False):
            return nan.call(func, args, kwargs)
        return func(*args, **kwargs)
