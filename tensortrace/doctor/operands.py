"""What an ATen operation reads, and whether the NaN and Inf watch checks it.

``plan_of`` decides once per operation: the risky ones by default (``RISKY``:
those that make NaN or infinities from ordinary finite numbers), every one
with ``--nan``, never a view (its values are its base's) nor an operation
that makes uninitialised memory (``empty``). ``operands`` lists what can
explain a NaN or an infinity (floating tensors, numbers; not ``dim=1``), by
the schema's argument names; ``ref`` and ``alive`` keep them weakly, with
their version, for a look later.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ..trace.nonfinite import Made
from .places import Spot

# operations that make NaN or infinities from ordinary finite numbers (a pole, a domain
# edge, an overflow at moderate inputs, a count of zero); their in-place forms too
RISKY = frozenset(
    """log log2 log10 log1p div true_divide reciprocal rsqrt sqrt pow float_power exp exp2
    expm1 sinh cosh tan acos asin atanh acosh arccos arcsin arctanh arccosh logit erfinv
    lgamma digamma polygamma mvlgamma xlogy special_xlog1py var std var_mean std_mean mean
    nanmean remainder fmod nll_loss_forward nll_loss2d_forward nll_loss_nd _softmax
    _log_softmax cumprod prod logdet _cdist_forward""".split()
)
_SDPA = "_scaled_dot_product"  # attention kernels: a row that masks every key is NaN
_UNINITIALISED = ("empty", "new_empty", "_empty", "empty_like", "empty_strided", "set_", "resize_")


class Plan:
    """How one ATen operation is checked: which arguments it writes in place (checked before)."""

    __slots__ = ("inplace", "risky")

    def __init__(self, inplace: Tuple[int, ...], risky: bool) -> None:
        self.inplace, self.risky = inplace, risky


class Pending:
    """A checked operation whose output's graph node is not attached yet (autograd attaches it
    after the dispatch mode returns): hooked at the next operation or backward call."""

    __slots__ = ("out", "op", "spot", "inputs")

    def __init__(self, out: Any, op: str, spot: Optional[Spot], inputs: Tuple[Any, ...]) -> None:
        self.out, self.op, self.spot, self.inputs = out, op, spot, inputs


class Origin:
    """An origin or a first read, with what the rules and fixes need beyond its record."""

    __slots__ = ("made", "spot", "producers")

    def __init__(self, made: Made, spot: Optional[Spot], producers: Dict[str, str]) -> None:
        self.made = made
        self.spot = spot
        self.producers = producers  # operand name -> the graph node that made it (SoftmaxBackward0)


def plan_of(func: Any, every_op: bool) -> Optional[Plan]:
    """How ``func`` is checked, or None when it is not."""
    try:
        name = func.overloadpacket.__name__
        schema = func._schema
    except AttributeError:
        return None
    base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
    risky = base in RISKY or base.startswith(_SDPA)
    if not (risky or every_op) or base.startswith(_UNINITIALISED):
        return None
    writes = [
        i
        for i, arg in enumerate(schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write and not arg.kwarg_only
    ]
    views = schema.returns and all(r.alias_info is not None for r in schema.returns)
    if views and not writes:
        return None  # a view shows its base's values: finite when its base is
    return Plan(tuple(writes), risky)


def argument_names(func: Any) -> List[str]:
    """The schema's names of an operation's arguments, in order."""
    try:
        return [a.name for a in func._schema.arguments]
    except AttributeError:
        return []


_NUMBERS = ("self", "other", "exponent", "alpha", "value", "scalar")  # ints that are operands


def counted(name: str, value: Any) -> bool:
    """Whether an argument can explain a NaN or an infinity: a tensor of floating or complex
    numbers, a float, or an integer operand (``x ** 2``, ``x / 0``; not ``dim=1``)."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    if isinstance(value, bool):
        return False
    if isinstance(value, (float, complex)):
        return True
    return isinstance(value, int) and name.split("[")[0] in _NUMBERS


def operands(func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """(argument name, value) of each operand that can explain a NaN or an infinity (floating
    tensors, numbers), lists flattened."""
    names = argument_names(func)
    found: List[Tuple[str, Any]] = []
    items = [(names[i] if i < len(names) else f"arg{i}", a) for i, a in enumerate(args)]
    items += [(k, v) for k, v in kwargs.items() if k != "out"]
    for name, value in items:
        if isinstance(value, (list, tuple)):
            found += [(f"{name}[{i}]", v) for i, v in enumerate(value) if counted(name, v)]
        elif counted(name, value):
            found.append((name, value))
    return found


def read_only(func: Any, pairs: List[Tuple[str, Any]], plan: Plan) -> List[Tuple[str, Any]]:
    """The operands an operation does not write in place."""
    if not plan.inplace:
        return pairs
    names = argument_names(func)
    written = {names[i] for i in plan.inplace if i < len(names)}
    return [(n, v) for n, v in pairs if n.split("[")[0] not in written]


def needs_grad(args: Sequence[Any]) -> bool:
    """Whether autograd will make a graph node for an operation on ``args``."""
    if not torch.is_grad_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.requires_grad:
                return True
        elif isinstance(a, (list, tuple)):
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in a):
                return True
    return False


def node_op(name: str) -> str:
    """The operation a graph node is the backward of: ``SqrtBackward0`` -> ``sqrt``."""
    stem = name.split("Backward")[0]
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(stem))


def op_name(func: Any) -> str:
    """``aten.log`` for ``aten.log.default``."""
    try:
        return f"{func.namespace}.{func.overloadpacket.__name__}"
    except AttributeError:
        return str(func)


def local_name(frame: Any, value: Any) -> Optional[str]:
    """The name a frame's locals give the very tensor ``value``."""
    if frame is None or not isinstance(value, torch.Tensor):
        return None
    for name, v in list(frame.f_locals.items()):
        if v is value and not name.startswith("__"):
            return name
    return None


def ref(value: Any) -> Any:
    """A weak reference to a tensor with its version (facts are read later only if unchanged);
    a number as itself."""
    if isinstance(value, torch.Tensor):
        return (weakref.ref(value), value._version)
    return value


def inputs(func: Any, args: Any, kwargs: Any) -> Tuple[Any, ...]:
    """The operands, each tensor held weakly (``ref``)."""
    return tuple((n, ref(v)) for n, v in operands(func, args, kwargs))


def alive(refs: Sequence[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """The (name, value) of each operand, the value None where a tensor is gone or has changed
    since it was read (its facts then are not known)."""
    found = []
    for name, held in refs:
        if isinstance(held, tuple):
            t = held[0]()
            found.append((name, t if t is not None and t._version == held[1] else None))
        else:
            found.append((name, held))
    return found


def producers(pairs: Sequence[Tuple[str, Any]]) -> Dict[str, str]:
    """Operand name -> the name of the graph node that made it (``SoftmaxBackward0``)."""
    found = {}
    for name, value in pairs:
        g = getattr(value, "grad_fn", None)
        if g is not None:
            found[name] = g.name()
    return found


_SPOTS: Dict[Tuple[Any, int], Spot] = {}  # (code, instruction offset) -> its spot


def spot_at(frame: Any) -> Optional[Spot]:
    """(file, line, function) of exactly this frame, or None.

    Kept by code object and instruction offset: a frame's line number is worked out from its
    code's line table each time it is read, and the same calls recur every iteration."""
    if frame is None:
        return None
    key = (frame.f_code, frame.f_lasti)
    found = _SPOTS.get(key)
    if found is None:
        if len(_SPOTS) > 4096:
            _SPOTS.clear()
        found = _SPOTS[key] = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    return found
