"""Record what a step ran: the calls its code made and the ATen operations under them.

Two PyTorch modes (``opmodes.py``) wrap a step's own code, one object of each per step:

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
(``opmodes._take_off``; ``BothModes.__exit__`` puts it back), so the ATen operations of
later calls are neither recorded nor counted: passing each one through a
Python dispatch mode costs about 20 µs, which a loop of 100,000 operations
would pay for nothing but a count.

A step calling ``.backward()``, ``torch.autograd.backward`` or
``torch.autograd.grad`` arms ``flow.FlowRecorder`` around that call.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .flow import FlowRecorder, with_hook_notes
from ..trace import CallSite, Flow, Loop, OpRecord, OpTensors, VersionBump
from .identity import mark as _mark
from .recordability import UNRECORDABLE, recordable  # noqa: F401 - part of this module's interface
from .sites import SiteReader
from .storages import StorageRegistry
from .oplog import Grabbed, OpEntry, call_name  # noqa: F401 - call_name: this module's interface
from .oplog import existed_before as _existed
from .opmodes import (
    PLANS,
    MAX_OPS,
    AtenMode,
    BothModes,
    CallMode,
    plain_view,
    Plan,
    TensorClass,
    version_of,
)


def _grab(t: Any) -> Grabbed:
    """What an operation needs of a tensor, taken now: identity and storage, no copy."""
    if type(t) is not TensorClass:  # a subclass's __torch_function__ never sees the tool's reads
        with plain_view():
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


_weakref = (
    weakref.ref
)  # storages only: a weak reference to a tensor blocks torch.utils.swap_tensors


class OpsSession:
    """A run's recording: the level its scenario can be recorded at, and the names its last
    snapshot saw."""

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
        # flow.FlowRecorder.released, for the whole run
        self.released: Dict[Tuple[int, str], str] = {}
        # flow.FlowRecorder.freed (every node a freeing backward ran) and the last step's
        # flow.FlowRecorder.carried
        self.freed: Dict[Tuple[int, str], None] = {}
        self.carried: Optional[Tuple[Tuple[int, str], Tuple[int, str]]] = None
        self.now: Optional[OpsRecorder] = None
        self.known = 0  # storages the registry had labelled when the last step's recording finished
        # modules whose forward the call mode stepped aside for (``fastpaths``), run-wide
        self.aside: Dict[str, None] = {}
        self._modes: Optional[BothModes] = (
            None  # one object of each mode for the run, pointed at each step's recorder
        )
        # which code objects are the user's code, and how their expressions are read back
        # (``sites``); None: every call is said as the call it is
        self.users: Optional[Callable[[Any], bool]] = None
        self.reader: Optional[SiteReader] = None

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
            users=self.users if self.reader is not None else None,
        )
        rec.flow.freed = self.freed
        both = self._modes
        if both is None:
            both = self._modes = rec.modes()
        else:
            both.calls.rec = rec
            if both.aten is not None:
                both.aten.rec = rec
        return both

    def finish(self, registry: StorageRegistry, objects: Dict[str, Any]) -> "Finished":
        """The step's operations and flows, named by the namespace now that the step is over."""
        recorder, self.now = self.now, None
        self.carried = recorder.flow.carried if recorder is not None else None
        if self.level is None:
            return NOTHING
        self.names = name_index(objects)
        if recorder is not None:
            self.aside.update(recorder.aside)
        if recorder is None:
            self.known = len(registry.allocations)
            return NOTHING
        try:
            done = recorder.finish(registry, self.names, before=self.known, reader=self.reader)
            return done._replace(flows=with_hook_notes(done.flows, objects))
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
        released: Optional[Dict[Tuple[int, str], str]] = None,
        users: Optional[Callable[[Any], bool]] = None,
    ) -> None:
        self.released = released if released is not None else {}
        self.users = users  # which code is the user's: a call's site is read (``sites``)
        self.loop: Any = None  # the step's ``loops.LoopMarks``, once its loop is marked
        self.aten = aten
        self.caught = (
            caught if caught is not None else []
        )  # the step's recorded warnings (catch_warnings(record=True))
        self.start_names = start_names
        self.raw: List[OpEntry] = []
        self.count = 0
        self.aten_off = False  # the dispatch mode left the stack past the limit (``_take_off``)
        # modules whose forward the call mode stepped aside for (``fastpaths``), in order
        self.aside: Dict[str, None] = {}
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
        self.plans: Dict[Any, Plan] = PLANS
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
        operation returns its input), it is a new tensor, and any earlier one with its mark
        is dead."""
        m = _mark(out)
        if m is None or any(g[1] is not None and g[1][0] == m for g in ins):
            return
        self.generations[m] = self.generations.get(m, 0) + 1

    def modes(self) -> "BothModes":
        return BothModes(CallMode(self), AtenMode(self) if self.aten else None)

    def settle(self) -> None:
        """Read, now that they have moved, the versions of what the last ATen operations wrote."""
        pending, self.pending = self.pending, []
        for entry, i, t, before in pending:
            after = version_of(t)
            if after != before:
                entry.bumps.append((i, before, after))

    def finish(
        self,
        registry: StorageRegistry,
        end_names: Dict[int, Tuple[str, Any]],
        before: int = 0,
        reader: Optional[SiteReader] = None,
    ) -> "Finished":
        """The step's operations as records, how many more were not recorded, its backward
        flows, the expressions its calls ran under and its loop's marks.

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
                    found = registry.label_gone(_device_name(key[0]), key[1], key[2], sref)
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
        sites: List[CallSite] = []
        if reader is not None and any(entry.site is not None for entry in raw):
            at, sites = reader.records([entry.site for entry in raw])
            records = [OpRecord(existed=e, site=a, **f) for f, e, a in zip(fields, existed, at)]
        else:
            records = [OpRecord(existed=e, **f) for f, e in zip(fields, existed)]
        flows = self.flow.finish(start, end, call_name) if self.flow.calls else ()
        loop = self.loop.record(len(records), len(flows)) if self.loop is not None else None
        return Finished(
            tuple(records), max(0, self.count - len(records)), flows, tuple(sites), loop
        )


class Finished(NamedTuple):
    """What a step's recording of operations gives: its ``Step`` fields of the same names."""

    ops: Tuple[OpRecord, ...] = ()
    omitted: int = 0
    flows: Tuple[Flow, ...] = ()
    sites: Tuple[CallSite, ...] = ()
    loop: Optional[Loop] = None


NOTHING = Finished()


_DEVICE_NAMES: Dict[Any, str] = {}


def _device_name(device: Any) -> str:
    """``str(device)``, made once per device."""
    found = _DEVICE_NAMES.get(device)
    if found is None:
        found = _DEVICE_NAMES[device] = str(device)
    return found


def name_index(objects: Dict[str, Any]) -> Dict[Any, Tuple[str, Any]]:
    """Names of the tensors bound now (and ``NAME.grad`` of leaves), keyed by their
    ``identity.mark``, with a weak reference to their storage (None for a tensor without one).

    A mark, never a weak reference to the tensor: a weak reference to a tensor
    makes ``torch.utils.swap_tensors`` refuse it. A mark is the address of the
    tensor's ``TensorImpl``, which a dead temporary of the step may have had;
    its storage tells them apart.
    """
    index: Dict[Any, Tuple[str, Any]] = {}
    for name, obj in objects.items():
        if not isinstance(obj, TensorClass):
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


__all__ = [
    "MAX_OPS",
    "Finished",
    "OpsRecorder",
    "OpsSession",
    "call_name",
    "name_index",
    "recordable",
]
