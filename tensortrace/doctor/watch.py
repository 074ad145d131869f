"""What the doctor keeps of a run, and the dispatch mode that sees writes.

A ``SavedTensor`` per tensor autograd saved, a ``WriteSeen`` per in-place write
into one, a ``Call`` per backward; ``Watch`` is the ``TorchFunctionMode`` that
hands each torch function the code calls that writes into a tensor (an
in-place method, an augmented or item assignment, ``inplace=True``,
``out=``) to the ``Recorder`` (``recorder.py``), which decides what it hit.

The watch is at the level of the functions the code calls, not of ATen
operations: a ``TorchDispatchMode`` sees every ATen operation, but costs a
Python call of ~24 µs each on a CPU, which made small models 1.3x to 2.2x
slower; a ``TorchFunctionMode`` costs about a fifth of that, is called once
per function (not per operation it decomposes into), and names the write as
the code spelled it. What it cannot see is a write made inside C++ code that
no Python call led to directly (a C++ extension); the version check at
backward still catches those, without their line (docs/doctor.md).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

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


# Augmented assignments and item assignment write their left side, as the user wrote it.
OPERATORS = {
    "__iadd__": "+=",
    "__isub__": "-=",
    "__imul__": "*=",
    "__itruediv__": "/=",
    "__ifloordiv__": "//=",
    "__imod__": "%=",
    "__ipow__": "**=",
    "__imatmul__": "@=",
    "__iand__": "&=",
    "__ior__": "|=",
    "__ixor__": "^=",
    "__ilshift__": "<<=",
    "__irshift__": ">>=",
    "__setitem__": "[...] =",
}
# Methods named like in-place operations that change a tensor's metadata, not its values.
_METADATA = {"requires_grad_", "share_memory_", "rename_", "retain_grad", "record_stream"}


class Plan:
    """How a torch function writes: its first argument always (``x.add_``, ``x += y``,
    ``torch._foreach_mul_``), or when its ``inplace`` argument is true (``F.relu``)."""

    __slots__ = ("first", "inplace")

    def __init__(self, first: bool, inplace: Optional[int]) -> None:
        self.first, self.inplace = first, inplace


NO_WRITE = Plan(False, None)


def plan_of(func: Any) -> Plan:
    """Read once per function: PyTorch names what writes its input with a trailing ``_`` (and
    the augmented assignments); a Python function that takes ``inplace`` writes when it is
    true. Which writes landed is settled by the version counter afterwards."""
    name = getattr(func, "__name__", "") or ""
    if name in OPERATORS or (
        name.endswith("_") and not name.startswith("__") and name not in _METADATA
    ):
        return Plan(True, None)
    code = getattr(func, "__code__", None)
    if code is not None and "inplace" in code.co_varnames[: code.co_argcount]:
        return Plan(False, code.co_varnames.index("inplace"))
    return NO_WRITE


def written(plan: Plan, args: Any, kwargs: Any) -> List[Any]:
    """The tensors a call writes into: its first argument (or the list it is), ``out=``."""
    found: List[Any] = []
    first = plan.first
    if not first and plan.inplace is not None:
        value = kwargs.get("inplace", args[plan.inplace] if len(args) > plan.inplace else False)
        first = value is True
    if first and args:
        found.extend(args[0] if isinstance(args[0], (list, tuple)) else (args[0],))
    out = kwargs.get("out") if kwargs else None
    if out is not None:
        found.extend(out if isinstance(out, (list, tuple)) else (out,))
    return found


def op_name(func: Any, kwargs: Any) -> str:
    """How the code spelled the write: ``+=``, ``.mul_()``, ``F.relu(inplace=True)``."""
    name = getattr(func, "__name__", "") or repr(func)
    if name in OPERATORS:
        return OPERATORS[name]
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.nn.functional"):
        return f"F.{name}(inplace=True)"
    qualified = getattr(func, "__qualname__", "") or ""
    if qualified.startswith(("TensorBase.", "Tensor.")):
        return f".{name}()"
    return f"torch.{name}" if not module or module.startswith("torch") else f"{module}.{name}"


_PLANS: Dict[Any, Plan] = {}
_ATTRIBUTE = type(torch.Tensor.shape.__get__)  # a property's getter or setter: method-wrapper
# True while dynamo traces a function for torch.compile, which traces this mode too: the graph
# it makes must hold the code's calls only (what a compiled function writes is left to the
# version check at backward).
_COMPILING = torch.compiler.is_compiling


class Watch(TorchFunctionMode):
    """The write watch: every torch function the code calls passes through here (a Python
    call each, a fifth of what a dispatch mode costs); it notes only while a saved tensor is
    alive and no backward runs. It stays on from start to stop: a torch function mode is
    off while its own handler runs (a backward is called through it), so it cannot rest
    between steps the way a dispatch mode could."""

    def __init__(self, rec: "Recorder") -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if type(func) is _ATTRIBUTE or _COMPILING():  # .shape, .grad, ...; or dynamo tracing
            return func(*args, **kwargs)
        rec = self.rec
        if rec.pending:
            rec.settle_writes()
        if not rec.busy and rec.index and rec.current is None:
            plan = _PLANS.get(func)
            if plan is None:
                if len(_PLANS) > 20_000:
                    _PLANS.clear()
                plan = _PLANS[func] = plan_of(func)
            if plan is not NO_WRITE or "out" in kwargs:
                targets = written(plan, args, kwargs)
                if targets:
                    rec.note_writes(func, targets, kwargs)
        return func(*args, **kwargs)
