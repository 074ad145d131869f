"""The two PyTorch modes that see a step's code run: the calls it makes, the ATen operations
under them (``ops.py`` says what is recorded and why).

``CallMode`` (a ``TorchFunctionMode``) sees the calls the user wrote; ``AtenMode`` (a
``TorchDispatchMode``) every ATen operation they ran, with the arguments its schema writes
(``Plan``). Both add an ``oplog.OpEntry`` per operation to the step's ``OpsRecorder``;
``BothModes`` puts them on the mode stacks together, below the user's modes (``modestack``). Past
``MAX_OPS`` operations the dispatch mode leaves the stack (``_take_off``) for the rest of the step.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .flow import BACKWARD_CALLS
from .fastpaths import FastPaths
from .modestack import DISPATCH, FUNCTION, insert, remove
from .oplog import Grabbed, OpEntry
from .sites import call_site

if TYPE_CHECKING:  # pragma: no cover
    from .ops import OpsRecorder

MAX_OPS = (
    2000  # operations (calls and ATen operations together) recorded per step; the rest are counted
)

TensorClass = torch.Tensor
plain_view = torch._C.DisableTorchFunctionSubclass
_HERE = frozenset(
    {__file__, torch.utils._python_dispatch.__file__, torch._ops.__file__}
)  # frames the modes add


def _storage_is(key: Any, t: Any) -> bool:
    """Whether ``t``'s storage is the one ``key`` was read from: a dead tensor of the step may
    have had ``t``'s identity and mark (addresses are reused), never its live storage."""
    if key is None:
        return True
    try:
        if type(t) is not TensorClass:
            with plain_view():
                return key[3]() is t.untyped_storage()
        return key[3]() is t.untyped_storage()
    except Exception:
        return False


def _complete(rec: "OpsRecorder", grabbed: List[Grabbed], tensors: List[Any]) -> None:
    """Read, after the call, the storage of each of its tensors.

    The tool holds no reference to a tensor after its call (``identity``), so
    its storage is read while the call still holds it, never looked up later
    by a mark a dead temporary may have shared.
    """
    for i, t in enumerate(tensors):
        if grabbed[i][2] is None:
            grabbed[i] = rec.take(t)


def version_of(t: Any) -> Optional[int]:
    try:
        if type(t) is not TensorClass:
            with plain_view():
                return t._version
        return t._version
    except Exception:  # inference tensors have no version counter
        return None


def _from_caller(caught: List[Any], start: int, frame: Any) -> None:
    """Warnings PyTorch raised from inside the modes, placed where plain PyTorch places them.

    A warning from C++ is attributed to the innermost Python frame, which
    under the modes is theirs; without them it is the frame that made the
    call, which is this handler's caller.
    """
    for w in caught[start:]:
        if w.filename in _HERE:
            w.filename, w.lineno = frame.f_code.co_filename, frame.f_lineno


def _tensors_in(value: Any, into: List[Any]) -> None:
    if isinstance(value, TensorClass):
        into.append(value)
    elif type(value) in (list, tuple):
        for item in value:
            if isinstance(item, TensorClass):
                into.append(item)


#: In-place ATen operations that change a tensor's sizes and strides only: PyTorch moves
#: its version, but they write no byte of its storage, so they are not said to write it.
RESTRIDING = frozenset(
    f"aten::{n}"
    for n in (
        "t_",
        "transpose_",
        "swapdims_",
        "swapaxes_",
        "unsqueeze_",
        "squeeze_",
        "as_strided_",
        "detach_",
    )
)


class Plan:
    """What one ``OpOverload``'s schema says: which arguments it writes, its name."""

    __slots__ = ("positions", "keywords", "name", "overload", "restrides", "views_only")

    def __init__(self, func: Any) -> None:
        schema = func._schema
        written = [
            (i, a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        ]
        self.positions = frozenset(i for i, _ in written)
        self.keywords = frozenset(name for _, name in written)
        self.name = schema.name
        self.overload = schema.overload_name or None
        # changes only the tensor's shape and strides (its version moves, no byte is written)
        self.restrides = self.name in RESTRIDING
        # a view: every tensor argument is one its result aliases, unwritten (``Tensor(a)``);
        # its kernel makes new sizes and strides over the same memory and touches no byte
        tensors = [a for a in schema.arguments if "Tensor" in str(a.type)]
        self.views_only = bool(tensors) and all(
            a.alias_info is not None and not a.alias_info.is_write for a in tensors
        )


class CallMode(TorchFunctionMode):
    def __init__(self, rec: "OpsRecorder") -> None:
        super().__init__()
        self.rec = rec
        self.aten: Optional[AtenMode] = None  # the dispatch mode entered with it (``BothModes``)

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Optional[dict] = None
    ) -> Any:
        rec = self.rec
        if kwargs is None:
            kwargs = {}
        if (
            rec.paused or rec.dispatching
        ):  # PyTorch's own calls while an ATen operation runs in the mode
            return func(*args, **kwargs)
        flow = (
            rec.flow.arm(func, args, kwargs)
            if (func is _BACKWARD or func is _AUTOGRAD_BACKWARD or func is _GRAD)
            else None
        )
        if rec.count >= MAX_OPS:
            rec.count += 1
            if not rec.aten_off and self.aten is not None:
                rec.aten_off = _take_off(self.aten)
            try:
                return func(*args, **kwargs)
            finally:
                if flow is not None:
                    rec.flow.disarm(flow)
        rec.count += 1
        if rec.pending:
            rec.settle()
        tensors: List[Any] = []
        for a in args:
            if isinstance(a, TensorClass):
                tensors.append(a)
            elif type(a) in _SEQUENCES:
                _tensors_in(a, tensors)
        if kwargs:
            for a in kwargs.values():
                _tensors_in(a, tensors)
        grab = rec.light if rec.aten else rec.take
        before = [version_of(t) for t in tensors] if tensors else tensors
        entry = OpEntry("call", func, None, [grab(t) for t in tensors] if tensors else [])
        if rec.users is not None:  # which expression of the user's code it ran under
            entry.site = call_site(sys._getframe(1), func, rec.users)
        index = len(rec.raw)
        rec.raw.append(entry)
        rec.parent = index
        caught = rec.caught
        seen = len(caught)
        try:
            out = func(*args, **kwargs)
        finally:
            rec.parent = None
            if len(caught) > seen:
                _from_caller(caught, seen, sys._getframe(1))
            if rec.pending:
                rec.settle()
            if flow is not None:
                rec.flow.disarm(flow)
            if tensors and rec.aten:
                _complete(rec, entry.ins, tensors)
            if tensors:
                bumps = entry.bumps
                for i, t in enumerate(tensors):
                    now = version_of(t)
                    if now != before[i]:
                        bumps.append((i, before[i], now))
        produced: List[Any] = []
        if isinstance(out, TensorClass):
            produced.append(out)
        elif type(out) in _SEQUENCES:
            _tensors_in(out, produced)
        if produced:
            entry.outs = [grab(t) for t in produced]
            if rec.aten:
                _complete(rec, entry.outs, produced)
        return out


def _take_off(aten: "AtenMode") -> bool:
    """Take the dispatch mode ``aten`` off the stack; whether it was on it.

    Called between calls, where the stack is the step's own. A mode the
    scenario entered above it stays, and the ATen operations then reach it as before.
    """
    return remove(DISPATCH, aten)


_SEQUENCES = (list, tuple)
_BACKWARD, _AUTOGRAD_BACKWARD, _GRAD = BACKWARD_CALLS  # flow.is_backward, compared inline


class AtenMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Not wrapped in torch._disable_dynamo: that would import torch._dynamo
        # (seconds) at the first operation, and cost a call per operation. No
        # scenario that compiles is recorded (UNRECORDABLE).
        return False

    def __init__(self, rec: "OpsRecorder") -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Optional[dict] = None
    ) -> Any:
        # The call mode stays on the stack under this one: the tool's own reads here, and the
        # calls PyTorch makes back into Python meanwhile (lift_fresh), are not the code's calls.
        rec = self.rec
        rec.dispatching += 1
        try:
            return self._dispatch(func, args, kwargs)
        finally:
            rec.dispatching -= 1

    def _dispatch(self, func: Any, args: Sequence[Any], kwargs: Optional[dict]) -> Any:
        rec = self.rec
        if kwargs is None:
            kwargs = {}
        if rec.paused:
            return func(*args, **kwargs)
        if rec.count >= MAX_OPS:
            rec.count += 1
            return func(*args, **kwargs)
        rec.count += 1
        if rec.pending:
            rec.settle()
        plan = rec.plans.get(func)
        if plan is None:
            plan = rec.plans[func] = Plan(func)
        ins: List[Any] = []
        written: List[int] = []
        positions = plan.positions
        for i, a in enumerate(args):
            if isinstance(a, TensorClass):
                if i in positions:
                    written.append(len(ins))
                ins.append(a)
            elif type(a) in _SEQUENCES:
                start = len(ins)
                _tensors_in(a, ins)
                if i in positions:
                    written.extend(range(start, len(ins)))
        if kwargs:
            keywords = plan.keywords
            for k, a in kwargs.items():
                start = len(ins)
                _tensors_in(a, ins)
                if k in keywords:
                    written.extend(range(start, len(ins)))
        seen = rec.seen
        grabbed = []
        for i in (
            written
        ):  # what is written is read afresh: `x.data = y` gives x y's storage without any operation
            seen.pop(id(ins[i]), None)
        for t in ins:  # a tensor seen before in this step (an earlier result) is not read again
            g = seen.get(id(t))
            if g is None or g[1] is None or g[1] != rec.ref(t) or not _storage_is(g[2], t):
                g = seen[id(t)] = rec.take(t)
            grabbed.append(g)
        for i in written:  # set_ and the like may give it another storage
            seen.pop(id(ins[i]), None)
        entry = OpEntry("aten", plan, rec.parent, grabbed, written)
        rec.raw.append(entry)
        if written:
            # The version counter moves above this mode (ADInplaceOrView), after this
            # function returns: the next operation, the end of the call or of the step reads it.
            # The tensor is held until then (a temporary view would otherwise be gone).
            pending = rec.pending
            for i in written:
                pending.append((entry, i, ins[i], version_of(ins[i])))
        out = func(*args, **kwargs)
        if isinstance(out, TensorClass):
            rec.born(out, grabbed)
            g = seen[id(out)] = rec.take(out)
            entry.outs = [g]
        elif type(out) in _SEQUENCES:
            produced: List[Any] = []
            _tensors_in(out, produced)
            for t in produced:
                rec.born(t, grabbed)
            entry.outs = [rec.take(t) for t in produced]
        return out


PLANS: Dict[Any, Plan] = {}  # OpOverload → what its schema says, for the whole run


class BothModes:
    """Both modes, put below the user's own modes and taken out again, even when the step
    raises (``modestack``: a mode the user enters in one statement and leaves in another
    must find its own on top of the stack)."""

    def __init__(self, calls: CallMode, aten: Optional[AtenMode]) -> None:
        self.calls, self.aten = calls, aten
        calls.aten = aten
        self.fast = FastPaths(calls, MAX_OPS)

    def __enter__(self) -> None:
        insert(FUNCTION, self.calls)
        if self.aten is not None:
            insert(DISPATCH, self.aten)
        self.fast.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.fast.__exit__(*exc)
            if self.aten is not None:
                if self.calls.rec.aten_off:  # past the limit it left the stack already
                    self.calls.rec.aten_off = False
                else:
                    remove(DISPATCH, self.aten)
        finally:
            remove(FUNCTION, self.calls)
            rec = self.calls.rec
            if rec.pending:
                rec.settle()
