"""Record what a step ran: the calls its code made and the ATen operations under them.

Two PyTorch modes wrap a step's own code, one object of each per step:

* a ``torch.overrides.TorchFunctionMode`` sees the calls the user wrote
  (``a.detach()``, ``a.data``, which is ``Tensor.data.__get__``, ``x[1] = 0``,
  ``y.backward()``); calls made inside one are not seen again;
* a ``torch.utils._python_dispatch.TorchDispatchMode`` sees every ATen
  operation those calls ran (``aten::detach``, ``aten::zero_``), each with
  the call it ran under as its ``parent``.

Which arguments an ATen operation writes comes from its schema's alias
annotations (``Tensor(a!)``: ``alias_info.is_write``), read once per
``OpOverload``. While the step runs an operation costs a few weak references
and version reads: no tensor is copied or kept alive, and no name, label or
string is made. ``OpsRecorder.finish`` does that after the step: names come
from the namespace at the start of the step (inputs) and at its end
(results), storage labels from the run's ``storages.StorageRegistry``, so an
allocation first seen inside an operation keeps its label when a snapshot
sees it later. A step records at most ``MAX_OPS`` operations, both levels
together; the rest are only counted (``Step.ops_omitted``). At the first call
past that limit the dispatch mode leaves the stack for the rest of the step
(``_take_off``; ``_Both.__exit__`` puts it back), so the ATen operations of
later calls are neither recorded nor counted: passing each one through a
Python dispatch mode costs about 20 µs, which a loop of 100,000 operations
would pay for nothing but a count.

A step calling ``.backward()``, ``torch.autograd.backward`` or
``torch.autograd.grad`` arms ``flow.FlowRecorder`` around that call.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .flow import BACKWARD_CALLS, FlowRecorder, with_hook_notes
from ..trace import Flow, OpRecord, OpTensors, VersionBump
from .identity import mark as _mark
from .recordability import UNRECORDABLE, recordable  # noqa: F401 - part of this module's interface
from .storages import StorageRegistry
from .oplog import OpEntry, call_name, existed_before as _existed  # noqa: F401 - call_name is part of this module's interface

MAX_OPS = (
    2000  # operations (calls and ATen operations together) recorded per step; the rest are counted
)

_Tensor = torch.Tensor
_plain = torch._C.DisableTorchFunctionSubclass
_HERE = frozenset(
    {__file__, torch.utils._python_dispatch.__file__, torch._ops.__file__}
)  # frames the modes add
# (id of the tensor, (its identity.mark, the mark's generation), storage key or None); the key is
# (device, address, bytes, weak reference to the storage, identity for addressless storages)
Grabbed = Tuple[int, Any, Optional[Tuple[Any, int, int, Any, Optional[int]]]]


def _grab(t: Any) -> Grabbed:
    """What an operation needs of a tensor, taken now: identity and storage, no copy."""
    if type(t) is not _Tensor:  # a subclass's __torch_function__ never sees the tool's reads
        with _plain():
            return _grab_plain(t)
    return _grab_plain(t)


def _grab_plain(t: Any) -> Grabbed:
    ref = _mark(t)
    try:
        s = t.untyped_storage()
        n = s.nbytes()
        if n:
            ptr = s.data_ptr()
            key = (t.device, ptr, n, _weakref(s), s._cdata if ptr == 0 else None)
        else:
            key = None
    except Exception:  # sparse, nested and other storage-less tensors
        key = None
    return (id(t), ref, key)


def _storage_is(key: Any, t: Any) -> bool:
    """Whether ``t``'s storage is the one ``key`` was read from: a dead tensor of the step may
    have had ``t``'s identity and mark (addresses are reused), never its live storage."""
    if key is None:
        return True
    try:
        if type(t) is not _Tensor:
            with _plain():
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


_weakref = (
    weakref.ref
)  # storages only: a weak reference to a tensor blocks torch.utils.swap_tensors


def _version(t: Any) -> Optional[int]:
    try:
        if type(t) is not _Tensor:
            with _plain():
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
    if isinstance(value, _Tensor):
        into.append(value)
    elif type(value) in (list, tuple):
        for item in value:
            if isinstance(item, _Tensor):
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


class _Plan:
    """What one ``OpOverload``'s schema says: which arguments it writes, its name."""

    __slots__ = ("positions", "keywords", "name", "overload", "restrides")

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


class _Calls(TorchFunctionMode):
    def __init__(self, rec: "OpsRecorder") -> None:
        super().__init__()
        self.rec = rec
        self.aten: Optional[_Aten] = None  # the dispatch mode entered with it (``_Both``)

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
            if isinstance(a, _Tensor):
                tensors.append(a)
            elif type(a) in _SEQUENCES:
                _tensors_in(a, tensors)
        if kwargs:
            for a in kwargs.values():
                _tensors_in(a, tensors)
        grab = rec.light if rec.aten else rec.take
        before = [_version(t) for t in tensors] if tensors else tensors
        entry = OpEntry("call", func, None, [grab(t) for t in tensors] if tensors else [])
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
                    now = _version(t)
                    if now != before[i]:
                        bumps.append((i, before[i], now))
        produced: List[Any] = []
        if isinstance(out, _Tensor):
            produced.append(out)
        elif type(out) in _SEQUENCES:
            _tensors_in(out, produced)
        if produced:
            entry.outs = [grab(t) for t in produced]
            if rec.aten:
                _complete(rec, entry.outs, produced)
        return out


def _take_off(aten: "_Aten") -> bool:
    """Take the dispatch mode ``aten`` off the stack if it is the top; whether it was.

    Called between calls, where the stack is the step's own. A mode the
    scenario entered above it stays, and the ATen operations then reach both
    and are counted as before.
    """
    n = _stack_len()
    if not n or _stack_at(n - 1) is not aten:
        return False
    _stack_pop(None)
    return True


_stack_len, _stack_at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at
_stack_pop, _stack_push = torch._C._pop_torch_dispatch_stack, torch._C._push_on_torch_dispatch_stack
_SEQUENCES = (list, tuple)
_BACKWARD, _AUTOGRAD_BACKWARD, _GRAD = BACKWARD_CALLS  # flow.is_backward, compared inline


class _Aten(TorchDispatchMode):
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
            plan = rec.plans[func] = _Plan(func)
        ins: List[Any] = []
        written: List[int] = []
        positions = plan.positions
        for i, a in enumerate(args):
            if isinstance(a, _Tensor):
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
                pending.append((entry, i, ins[i], _version(ins[i])))
        out = func(*args, **kwargs)
        if isinstance(out, _Tensor):
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


class OpsSession:
    """A run's recording: the level its scenario can be recorded at, and the names its last snapshot saw."""

    def __init__(
        self,
        scenario: Any,
        *,
        on: bool = True,
        values: bool = True,
        notices: Optional[List[str]] = None,
    ) -> None:
        self.level: Optional[str] = None
        if on:
            self.level, why = recordable("\n".join(code.text for _, code, _ in scenario.all_code()))
            if why is not None and notices is not None:
                notices.append(why)
        self.values = values
        self.names: Dict[int, Tuple[str, Any]] = {}
        self.released: Dict[int, str] = {}  # flow.FlowRecorder.released, for the whole run
        self.now: Optional[OpsRecorder] = None
        self.known = 0  # storages the registry had labelled when the last step's recording finished
        self._modes: Optional[_Both] = (
            None  # one object of each mode for the run, pointed at each step's recorder
        )

    def modes(self, caught: List[Any]) -> Any:
        """The modes that record one step's code, or nothing."""
        if self.level is None:
            return contextlib.nullcontext()
        rec = self.now = OpsRecorder(
            self.names,
            values=self.values,
            aten=self.level == "aten",
            caught=caught,
            released=self.released,
        )
        both = self._modes
        if both is None:
            both = self._modes = rec.modes()
        else:
            both.calls.rec = rec
            if both.aten is not None:
                both.aten.rec = rec
        return both

    def finish(
        self, registry: StorageRegistry, objects: Dict[str, Any]
    ) -> Tuple[Tuple[OpRecord, ...], int, Tuple[Flow, ...]]:
        """The step's operations and flows, named by the namespace now that the step is over."""
        recorder, self.now = self.now, None
        if self.level is None:
            return (), 0, ()
        self.names = name_index(objects)
        if recorder is None:
            self.known = len(registry.allocations)
            return (), 0, ()
        try:
            ops, omitted, flows = recorder.finish(registry, self.names, before=self.known)
            return ops, omitted, with_hook_notes(flows, objects)
        finally:
            self.known = len(registry.allocations)
            recorder.flow.owner = (
                None  # no cycle left for the garbage collector: the step's recording is freed now
            )


class OpsRecorder:
    """One step's recording: enter ``modes()`` around the step's code, then ``finish``."""

    def __init__(
        self,
        start_names: Dict[int, Tuple[str, Any]],
        *,
        values: bool = True,
        aten: bool = True,
        caught: Optional[List[Any]] = None,
        released: Optional[Dict[int, str]] = None,
    ) -> None:
        self.released = released if released is not None else {}
        self.aten = aten
        self.caught = (
            caught if caught is not None else []
        )  # the step's recorded warnings (catch_warnings(record=True))
        self.start_names = start_names
        self.raw: List[OpEntry] = []
        self.count = 0
        self.aten_off = False  # the dispatch mode left the stack past the limit (``_take_off``)
        self.parent: Optional[int] = None
        self.paused = False
        self.dispatching = 0  # ATen operations now running under the dispatch mode
        self.pending: List[
            Tuple[OpEntry, int, Any, Optional[int]]
        ] = []  # written tensors until the next operation
        self.seen: Dict[
            int, Grabbed
        ] = {}  # id → what was read of a tensor this step (checked by its ref)
        # mark → how many new tensors had it this step: a mark is a TensorImpl's address, which a
        # new tensor can only have once the one before it died (``born``)
        self.generations: Dict[int, int] = {}
        self.plans: Dict[Any, _Plan] = _PLANS
        self.flow = FlowRecorder(self, values=values)

    def ref(self, t: Any) -> Optional[Tuple[int, int]]:
        """Who ``t`` is now: its ``identity.mark`` and that mark's generation in this step."""
        m = _mark(t)
        return None if m is None else (m, self.generations.get(m, 0))

    def take(self, t: Any) -> Grabbed:
        """``_grab(t)``, its mark made a ``ref``."""
        g = _grab(t)
        return (g[0], None if g[1] is None else (g[1], self.generations.get(g[1], 0)), g[2])

    def light(self, t: Any) -> Grabbed:
        """Identity only: a call's tensors, whose storages ``_complete`` reads after the call."""
        return (id(t), self.ref(t), None)

    def born(self, out: Any, ins: List[Grabbed]) -> None:
        """Note an ATen operation's result: unless it is one of its inputs (an in-place
        operation returns its input), it is a new tensor, and any earlier one with its mark is dead."""
        m = _mark(out)
        if m is None or any(g[1] is not None and g[1][0] == m for g in ins):
            return
        self.generations[m] = self.generations.get(m, 0) + 1

    def modes(self) -> "_Both":
        return _Both(_Calls(self), _Aten(self) if self.aten else None)

    def settle(self) -> None:
        """Read, now that they have moved, the versions of what the last ATen operations wrote."""
        pending, self.pending = self.pending, []
        for entry, i, t, before in pending:
            after = _version(t)
            if after != before:
                entry.bumps.append((i, before, after))

    def finish(
        self,
        registry: StorageRegistry,
        end_names: Dict[int, Tuple[str, Any]],
        before: int = 0,
    ) -> Tuple[Tuple[OpRecord, ...], int, Tuple[Flow, ...]]:
        """The step's operations as records, how many more were not recorded, and its backward flows.

        ``before`` is how many storages the registry had labelled before the step: labels are
        numbered in order of first sight, so S1..S``before`` existed before any of its operations.
        """
        if self.pending:
            self.settle()
        start, end = self.start_names, end_names
        raw = self.raw
        labels: Dict[int, Optional[str]] = {}

        def label(g: Grabbed) -> Optional[str]:
            key = g[2]
            if key is None:  # a storage-less tensor (``_complete`` read every call's tensor)
                return None
            sref = key[3]
            found = labels.get(id(sref))
            if found is None:
                owner = sref()
                if owner is not None:
                    found = registry.label(
                        _device_name(key[0]), key[1], key[2], owner, ident=key[4]
                    )
                else:
                    found = registry.label_gone(_device_name(key[0]), key[1], key[2])
                labels[id(sref)] = found
            return found

        generations = self.generations

        def name(
            g: Grabbed, first: Dict[Any, Tuple[str, Any]], second: Dict[Any, Tuple[str, Any]]
        ) -> Optional[str]:
            ref = g[1]
            if ref is None:
                return None
            key = g[2]
            sref = key[3] if key is not None else None
            if sref is not None and sref() is None:  # its storage died, so did it
                return None
            mark, generation = ref
            # the start's names are the tensors before any new one; the end's, those after the last
            # (asked for a result first, the end comes first)
            pairs = ((start, 0), (end, generations.get(mark, 0)))
            for index, current in pairs if first is start else pairs[::-1]:
                hit = index.get(mark)
                if (
                    hit is not None
                    and generation == current
                    and (sref is None or hit[1] is None or hit[1] is sref)
                ):
                    return hit[0]
            return None

        # Labels are made in this order (every input, then every output), so that
        # storages first seen here are numbered in the order the step used them.
        rows = []
        child_writes: Dict[int, List[str]] = {}
        for entry in raw:
            level, what, parent, ins, written = (
                entry.level,
                entry.what,
                entry.parent,
                entry.ins,
                entry.written,
            )
            in_names = []
            reads: List[str] = []
            writes: List[str] = []
            for i, g in enumerate(ins):
                in_names.append(name(g, start, end))
                found = label(g)
                if found is not None:
                    into = (
                        writes
                        if i in written and not (level == "aten" and what.restrides)
                        else reads
                    )
                    if found not in into:
                        into.append(found)
            if parent is not None and writes:
                if parent in child_writes:
                    child_writes[parent].extend(writes)
                else:
                    child_writes[parent] = list(writes)
            rows.append((level, what, reads, writes, tuple(in_names), (*reads, *writes)))
        fields = []
        for index, entry in enumerate(raw):
            level, what, reads, writes, in_names, _ = rows[index]
            if level == "call":
                title, overload = call_name(what), None
                extra = child_writes.get(index)
                if extra:  # a call writes what the ATen operations under it wrote
                    for w in extra:
                        if w not in writes:
                            writes.append(w)
                    reads = [r for r in reads if r not in writes]
            else:
                title, overload = what.name, what.overload
            outs, bumps = entry.outs, entry.bumps
            if len(outs) == 1:
                outputs, out_names = (label(outs[0]),), (name(outs[0], end, start),)
            else:
                outputs, out_names = (
                    tuple([label(g) for g in outs]),
                    tuple([name(g, end, start) for g in outs]),
                )
            fields.append(
                dict(
                    level=level,
                    name=title,
                    overload=overload,
                    parent=entry.parent,
                    reads=tuple(reads),
                    writes=tuple(writes),
                    outputs=outputs,
                    tensors=OpTensors(in_=in_names, out=out_names),
                    version_bumps=tuple(
                        [VersionBump(name=in_names[i], from_=b, to=a) for i, b, a in bumps]
                    )
                    if bumps
                    else (),
                )
            )
        existed = _existed(fields, rows, before)
        records = [OpRecord(existed=e, **f) for f, e in zip(fields, existed)]
        flows = self.flow.finish(start, end, call_name) if self.flow.calls else ()
        return tuple(records), max(0, self.count - len(records)), flows


_DEVICE_NAMES: Dict[Any, str] = {}


def _device_name(device: Any) -> str:
    """``str(device)``, made once per device."""
    found = _DEVICE_NAMES.get(device)
    if found is None:
        found = _DEVICE_NAMES[device] = str(device)
    return found


_PLANS: Dict[Any, _Plan] = {}  # OpOverload → what its schema says, for the whole run


class _Both:
    """Both modes, entered in order and left in reverse, even when the step raises."""

    def __init__(self, calls: _Calls, aten: Optional[_Aten]) -> None:
        self.calls, self.aten = calls, aten
        calls.aten = aten

    def __enter__(self) -> None:
        self.calls.__enter__()
        try:
            if self.aten is not None:
                self.aten.__enter__()
        except BaseException:
            self.calls.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.aten is not None:
                if self.calls.rec.aten_off:  # back on the stack, for its own __exit__ to take off
                    self.calls.rec.aten_off = False
                    _stack_push(self.aten)
                self.aten.__exit__(*exc)
        finally:
            self.calls.__exit__(*exc)
            rec = self.calls.rec
            if rec.pending:
                rec.settle()


def name_index(objects: Dict[str, Any]) -> Dict[Any, Tuple[str, Any]]:
    """Names of the tensors bound now (and ``NAME.grad`` of leaves), keyed by their ``identity.mark``,
    with a weak reference to their storage (None for a tensor without one).

    A mark, never a weak reference to the tensor: a weak reference to a tensor
    makes ``torch.utils.swap_tensors`` refuse it. A mark is the address of the
    tensor's ``TensorImpl``, which a dead temporary of the step may have had;
    its storage tells them apart.
    """
    index: Dict[Any, Tuple[str, Any]] = {}
    for name, obj in objects.items():
        if not isinstance(obj, _Tensor):
            continue
        _index_one(index, name, obj)
        try:
            grad = obj.grad if obj.is_leaf else None
        except Exception:
            grad = None
        if grad is not None:
            _index_one(index, f"{name}.grad", grad)
    return index


def _index_one(index: Dict[Any, Tuple[str, Any]], name: str, t: Any) -> None:
    _, ref, key = _grab(t)
    if ref is not None and ref not in index:
        index[ref] = (name, key[3] if key is not None else None)


__all__ = ["MAX_OPS", "OpsRecorder", "OpsSession", "call_name", "name_index", "recordable"]
