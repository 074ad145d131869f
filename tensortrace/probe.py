"""Read one tensor's facts without disturbing it, and label storages stably.

Nothing here keeps a tensor alive, hooks it, retains its grad or copies more
than a few elements of it: values of large tensors are summarised chunk by
chunk, so the extra memory is bounded by the chunk size, not the tensor,
and at the cost of the distinct elements in memory order (an expanded
tensor costs its storage). Each fact is read on its own, around any
``__torch_function__`` of a subclass: a fact PyTorch refuses to give is
recorded as unavailable with PyTorch's reason, and the rest still are.
Storage labels follow allocations (overlapping byte ranges), not addresses.
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .graph import node_name
from .model import Summary, TensorState, Values, encode_number_tree, freeze
from .stats import moments

EXACT_LIMIT = 64  # tensors with at most this many elements are recorded exactly
HEAD = 8  # elements shown at the start of a summary
CHUNK = 1 << 18  # elements summarised at a time for large tensors (bounds the extra memory: 2 MiB, in cache)

try:  # NumPy is optional: torch works without it
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None


def is_ndarray(obj: Any) -> bool:
    return _np is not None and isinstance(obj, _np.ndarray)


# --- storage labels ------------------------------------------------------------


@dataclass
class _Allocation:
    label: str
    device: str
    ptr: int
    nbytes: int
    owners: List[weakref.ref] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    ident: Optional[int] = None  # for storages without an address (meta): the storage's own identity

    def alive(self) -> bool:
        return any(ref() is not None for ref in self.owners)


class StorageRegistry:
    """Gives each storage allocation a label, S1, S2, ... in order of first sight.

    A label is tied to the allocation, not the address: the registry keeps a
    weak reference to each owner (the ``UntypedStorage``, or the NumPy array
    that owns its memory), and when every owner seen at an address has died,
    a new owner at that address is a new allocation with a new label.

    Sharing is decided from byte ranges, never from a start address alone:
    live allocations cannot overlap, so a storage whose bytes overlap a live
    allocation's bytes is that allocation (a tensor made from a NumPy slice
    that starts part-way into an array writes into the array's memory). A
    storage without an address (a meta tensor's: every one reports 0) is told
    apart by its identity, ``ident``.
    """

    def __init__(self) -> None:
        self._by_key: Dict[Tuple[str, int], _Allocation] = {}
        self._live: List[_Allocation] = []
        self._pruned = 64  # the size of _live after it was last pruned (at least 64)
        self.allocations: List[_Allocation] = []

    def label(self, device: str, ptr: int, nbytes: int, owner: Any, ident: Optional[int] = None) -> str:
        alloc = self._find(device, ptr, nbytes, ident)
        if alloc is not None:
            if not any(ref() is owner for ref in alloc.owners):
                alloc.owners.append(_weak(owner))
            if ident is None:  # widen to the union of the ranges seen
                end = max(alloc.ptr + alloc.nbytes, ptr + nbytes)
                alloc.ptr = min(alloc.ptr, ptr)
                alloc.nbytes = end - alloc.ptr
            return alloc.label
        alloc = _Allocation(f"S{len(self.allocations) + 1}", device, ptr, nbytes, [_weak(owner)], ident=ident)
        self.allocations.append(alloc)
        self._live.append(alloc)
        self._by_key[(device, ptr) if ident is None else (device + "#id", ident)] = alloc
        return alloc.label

    def _find(self, device: str, ptr: int, nbytes: int, ident: Optional[int]) -> Optional[_Allocation]:
        key = (device, ptr) if ident is None else (device + "#id", ident)
        alloc = self._by_key.get(key)
        if alloc is not None and alloc.alive():
            return alloc
        if ident is not None:
            return None
        end = ptr + nbytes
        for alloc in self._live:  # the byte ranges first: asking whether an owner lives costs more
            if alloc.ident is None and alloc.device == device and ptr < alloc.ptr + alloc.nbytes and alloc.ptr < end and alloc.alive():
                return alloc
        if len(self._live) >= 2 * self._pruned:  # forget dead allocations, in amortised constant time
            self._live = [a for a in self._live if a.alive()]
            self._pruned = max(64, len(self._live))
        return None

    def live(self) -> List[_Allocation]:
        """Every allocation with a live owner; the dead are forgotten here for good (they never come back)."""
        self._live = [a for a in self._live if a.alive()]
        self._pruned = max(64, len(self._live))
        return self._live

    def lookup(self, device: str, ptr: int, nbytes: int) -> Optional[str]:
        """The label of the live allocation these bytes lie in, if one was seen; never makes one."""
        alloc = self._find(device, ptr, nbytes, None)
        return alloc.label if alloc is not None else None

    def label_gone(self, device: str, ptr: int, nbytes: int) -> str:
        """A new label for an allocation that lived and died between two snapshots.

        It has no live owner, so no later storage at its address is taken for it.
        """
        alloc = _Allocation(f"S{len(self.allocations) + 1}", device, ptr, nbytes, [])
        self.allocations.append(alloc)
        return alloc.label

    def note_name(self, label: str, name: str) -> None:
        alloc = self.allocations[int(label[1:]) - 1]
        if name not in alloc.names:
            alloc.names.append(name)


def _weak(owner: Any) -> weakref.ref:
    try:
        return weakref.ref(owner)
    except TypeError:  # an owner that cannot be weakly referenced: treat as always alive
        return lambda: owner  # type: ignore[return-value]


# --- tensors -------------------------------------------------------------------

MAX_REASON = 300  # characters of PyTorch's reason kept for an unavailable fact


def reason_of(exc: BaseException) -> str:
    """PyTorch's reason for refusing a fact: the first line of its message, bounded."""
    try:
        text = str(exc)
    except Exception:
        text = ""
    line = (text.strip().splitlines() or [""])[0]
    if not line:
        line = type(exc).__name__
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "\u2026"


class _Reader:
    """Reads facts one at a time; a fact PyTorch refuses is noted with its reason, never raised."""

    def __init__(self) -> None:
        self.unavailable: List[Tuple[str, str]] = []

    def read(self, fact: str, get: Callable[[], Any], placeholder: Any = None) -> Any:
        try:
            return get()
        except Exception as exc:
            self.refuse(fact, reason_of(exc))
            return placeholder

    def refuse(self, fact: str, reason: str) -> None:
        if not any(name == fact for name, _ in self.unavailable):
            self.unavailable.append((fact, reason))


def plain_reads() -> Any:
    """Reads that bypass a tensor subclass's ``__torch_function__`` (the user's code never sees them)."""
    return torch._C.DisableTorchFunctionSubclass()


def probe_tensor(
    name: str,
    t: torch.Tensor,
    registry: StorageRegistry,
    names_by_id: Dict[int, str],
    *,
    kind: str = "tensor",
    values: bool = True,
    cache: Optional[Dict[Any, Any]] = None,
    memo: Any = None,
) -> TensorState:
    """The facts of tensor ``t`` right now, as a record.

    Every fact is read on its own: one that PyTorch refuses to give (the
    ``grad_fn`` of a view changed under no_grad, the strides of a CSR tensor,
    the shape of a lazy module's parameter) is recorded in ``unavailable``
    with PyTorch's reason, and the others are still read.
    """
    with warnings.catch_warnings(), plain_reads():
        warnings.simplefilter("ignore")  # the probe's own reads never count as the step's
        r = _Reader()
        lazy = _lazy_reason(t)
        if lazy is not None:
            for fact in ("shape", "stride", "storage", "storage_offset", "data_ptr", "values"):
                r.refuse(fact, lazy)
            shape: Tuple[int, ...] = ()
            stride: Tuple[int, ...] = ()
            storage, ptr, nbytes, offset, data_ptr = None, None, None, 0, None
        else:
            shape = r.read("shape", lambda: _sizes(t.shape), ())
            stride = r.read("stride", lambda: _sizes(t.stride()), ())
            storage, ptr, nbytes = _storage_of(t, registry, r)
            offset = r.read("storage_offset", lambda: int(t.storage_offset()), 0)
            data_ptr = r.read("data_ptr", lambda: int(t.data_ptr()))
        version = r.read("version", lambda: int(t._version))
        requires_grad = r.read("requires_grad", lambda: bool(t.requires_grad))
        is_leaf = r.read("is_leaf", lambda: bool(t.is_leaf))
        retains_grad = r.read("retains_grad", lambda: bool(t.retains_grad))
        grad_fn = r.read("grad_fn", lambda: t.grad_fn)
        grad = r.read("grad", lambda: t.grad)
        try:
            base = t._base
        except Exception:
            base = None
        is_view = r.read("is_view", lambda: bool(t._is_view()), False)
        if lazy is not None:
            recorded = Values(kind="unavailable", reason=lazy)
        elif values:
            recorded = tensor_values(t, cache, memo)
        else:
            recorded = Values(kind="unavailable", reason="values not recorded")
        return TensorState(
            name=name,
            kind=kind,
            shape=shape,
            stride=stride,
            dtype=_dtype_name(t.dtype),
            device=str(t.device),
            storage=storage,
            storage_ptr=ptr,
            storage_nbytes=nbytes,
            storage_offset=offset,
            data_ptr=data_ptr,
            version=version,
            requires_grad=requires_grad,
            is_leaf=is_leaf,
            retains_grad=retains_grad,
            grad_fn=node_name(grad_fn) if grad_fn is not None else None,
            grad=r.read("grad", lambda: tensor_values(grad, cache, memo)) if (grad is not None and values) else None,
            is_view=is_view,
            base=names_by_id.get(id(base)) if base is not None else None,
            values=recorded,
            unavailable=tuple(r.unavailable),
        )


def _lazy_reason(t: torch.Tensor) -> Optional[str]:
    """Why an uninitialised parameter or buffer of a lazy module has no shape or data yet."""
    try:
        from torch.nn.parameter import is_lazy

        if is_lazy(t):
            return "an uninitialized parameter of a lazy module: its shape and values are set by the module's first call"
    except Exception:
        pass
    return None


def _sizes(dims: Any) -> Tuple[int, ...]:
    """Sizes or strides as plain ints; a ragged (symbolic) one is refused with a reason."""
    out = []
    for i, d in enumerate(dims):
        if type(d) is int:
            out.append(d)
            continue
        try:
            out.append(int(d))
        except Exception:
            raise ValueError(f"dimension {i} is {d}, which has no single size (it differs between the nested tensor's components)") from None
    return tuple(out)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _storage_of(t: torch.Tensor, registry: StorageRegistry, r: _Reader) -> Tuple[Optional[str], Optional[int], Optional[int]]:
    """The storage's label, address and size.

    A tensor with no elements gets no label: it addresses no bytes, so it
    shares memory with nothing (``same_storage`` says the same).
    """
    try:
        storage = t.untyped_storage()
        ptr = int(storage.data_ptr())
        nbytes = int(storage.nbytes())
    except Exception as exc:  # sparse, nested and other storage-less tensors
        r.refuse("storage", reason_of(exc))
        return None, None, None
    try:
        empty = t.numel() == 0
    except Exception:
        empty = False
    if nbytes == 0 or empty:
        return None, ptr, nbytes
    ident = int(storage._cdata) if ptr == 0 else None
    return registry.label(str(t.device), ptr, nbytes, storage, ident=ident), ptr, nbytes


def tensor_values(t: torch.Tensor, cache: Optional[Dict[Any, Any]] = None, memo: Any = None) -> Values:
    """Exact values of a small tensor, a summary of a large one.

    ``cache`` (one per snapshot) lets tensors over the same elements, such as
    ``a`` and ``a.t()``, share one pass over their memory; ``memo`` (a
    ``reuse.SnapshotCache``) reuses a summary across steps while the memory's
    fingerprint holds.
    """
    try:
        if t.is_meta:
            return Values(kind="unavailable", reason="a meta tensor has no data")
        if t.layout != torch.strided:
            t = t.to_dense() if t.numel() <= EXACT_LIMIT else t
            if t.layout != torch.strided:
                return Values(kind="unavailable", reason=f"{t.layout} layout")
        if t.is_quantized:
            t = t.dequantize() if t.numel() <= EXACT_LIMIT else t
            if t.is_quantized:
                return Values(kind="unavailable", reason="quantized tensor")
        with torch.no_grad():
            if t.numel() <= EXACT_LIMIT:
                return Values(kind="exact", data=freeze(encode_number_tree(t.detach().cpu().tolist())))
            return Values(kind="summary", summary=_summarise(t.detach(), cache, memo))
    except Exception as exc:  # an exotic tensor: say so rather than fail the trace
        return Values(kind="unavailable", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])


def iter_chunks(t: Any, limit: int) -> Iterator[Any]:
    """Views (never copies) of ``t`` in row-major order, each at most ``limit`` elements.

    Lazy: only one view per level of nesting exists at a time, so walking a
    tensor of 10^8 elements costs a handful of small view objects.
    """
    stack = [_parts(t, limit)]
    while stack:
        cur = next(stack[-1], None)
        if cur is None:
            stack.pop()
            continue
        n = cur.size if is_ndarray(cur) else cur.numel()
        if n <= limit or cur.ndim == 0:
            if n:
                yield cur
        else:
            stack.append(_parts(cur, limit))


def _parts(t: Any, limit: int) -> Iterator[Any]:
    n = t.size if is_ndarray(t) else t.numel()
    if n <= limit or t.ndim == 0:
        yield t
        return
    rows = t.shape[0]
    per_row = n // rows
    if per_row > limit:
        for i in range(rows):
            yield t[i]
    else:
        take = max(1, limit // per_row)
        for i in range(0, rows, take):
            yield t[i : i + take]


def _distinct(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """A view of ``t``'s distinct elements in memory order, and how often each repeats.

    An expanded tensor (stride 0) repeats every element of its storage the
    same number of times, so its statistics follow from the storage's: a
    ``torch.ones(1).expand(10**12)`` costs one element, not 10^12. Ordering
    the dimensions by stride reads memory front to back, so a transposed
    view costs what its base costs.
    """
    repeat = 1
    kept: List[Tuple[int, int]] = []
    for n, s in zip(t.shape, t.stride()):
        if n == 1:
            continue
        if s == 0:
            repeat *= n
        else:
            kept.append((abs(s), n))
    if repeat == 1 and kept == sorted(kept, reverse=True):
        return t, 1
    kept.sort(reverse=True)
    view = t.as_strided([n for _, n in kept], [s for s, _ in kept], t.storage_offset())
    return view, repeat


def _summarise(t: torch.Tensor, cache: Optional[Dict[Any, Any]] = None, memo: Any = None) -> Summary:
    numel = t.numel()
    head: List[Any] = []
    for chunk in iter_chunks(t, HEAD):
        head.extend(chunk.reshape(-1).cpu().tolist())
        if len(head) >= HEAD:
            break
    head = head[:HEAD]
    if t.is_complex():
        return Summary(numel=numel, head=freeze(encode_number_tree(head)))
    distinct, repeat = _distinct(t)
    key = None
    if cache is not None:
        try:
            key = (str(t.device), t.dtype, distinct.data_ptr(), tuple(distinct.shape), tuple(distinct.stride()))
        except Exception:
            key = None
    stats = cache.get(key) if key is not None else None
    if stats is None:
        if memo is not None and key is not None:
            stats = memo.summary_stats(key, distinct, lambda: _moments(distinct))
        else:
            stats = _moments(distinct)
        if key is not None:
            cache[key] = stats
    count, mean, m2, lo, hi, nan_count, inf_count = stats
    count, m2 = count * repeat, m2 * repeat
    std = math.sqrt(m2 / (count - 1)) if count > 1 else (0.0 if count == 1 else None)
    return Summary(
        numel=numel,
        min=lo,
        max=hi,
        mean=mean if count else None,
        std=std,
        nan_count=nan_count * repeat,
        inf_count=inf_count * repeat,
        head=freeze(encode_number_tree(head)),
    )


def _moments(t: torch.Tensor) -> Tuple[int, float, float, Optional[float], Optional[float], int, int]:
    """(count, mean, M2, min, max) of the finite elements, and the NaN and infinity counts (``stats.moments``)."""
    return moments(t, iter_chunks(t, CHUNK), CHUNK)


# --- NumPy arrays --------------------------------------------------------------


def probe_named(named: Sequence[Tuple[str, Any, str]], registry: StorageRegistry, *, values: bool = True,
                memo: Any = None) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
    """One snapshot of ``named`` ((name, object, kind), in binding order): each one's state, and name -> object.

    A name bound to an object already named records ``same_as``; each storage
    notes the names seen on it. ``memo`` (a ``reuse.SnapshotCache``) reuses the
    record of a tensor provably unchanged since its previous snapshot.
    """
    names_by_id: Dict[int, str] = {}
    for name, obj, _ in named:
        names_by_id.setdefault(id(obj), name)
    # a view's base may be unnamed under its own name but named elsewhere: fine, None
    states: List[TensorState] = []
    objects: Dict[str, Any] = {}
    summaries: Dict[Any, Any] = {}  # a and a.t() read their memory once per snapshot
    for name, obj, kind in (memo.snapshot_of(named) if memo is not None else named):
        if kind == "ndarray":
            state = probe_ndarray(name, obj, registry, names_by_id, values=values)
        else:
            state = memo.reuse(name, obj, kind, names_by_id) if memo is not None else None
            if state is None:
                state = probe_tensor(name, obj, registry, names_by_id, kind=kind, values=values, cache=summaries, memo=memo)
                if memo is not None:
                    memo.keep(obj, state)
        first = names_by_id.get(id(obj))
        if first != name:
            state = replace(state, same_as=first)
        if state.storage is not None:
            registry.note_name(state.storage, name)
        states.append(state)
        objects[name] = obj
    return tuple(states), objects


def probe_ndarray(name: str, arr: Any, registry: StorageRegistry, names_by_id: Dict[int, str], *, values: bool = True) -> TensorState:
    """A NumPy array, so that memory shared with tensors (``.numpy()``, ``from_numpy``) shows."""
    data_ptr = int(arr.__array_interface__["data"][0])
    owner: Any = arr
    while is_ndarray(owner) and owner.base is not None:
        owner = owner.base
    storage = ptr = nbytes = None
    device = "cpu"
    if isinstance(owner, torch.Tensor):
        storage, ptr, nbytes = _storage_of(owner, registry, _Reader())
    elif is_ndarray(owner) and owner.nbytes:
        ptr = int(owner.__array_interface__["data"][0])
        nbytes = int(owner.nbytes)
        storage = registry.label(device, ptr, nbytes, owner)
    elif arr.nbytes:
        ptr, nbytes = data_ptr, int(arr.nbytes)
        storage = registry.label(device, ptr, nbytes, arr)
    itemsize = arr.itemsize or 1
    offset = (data_ptr - ptr) // itemsize if ptr is not None else 0
    base = arr.base
    return TensorState(
        name=name,
        kind="ndarray",
        shape=tuple(arr.shape),
        stride=tuple(s // itemsize for s in arr.strides),
        dtype=str(arr.dtype),
        device=device,
        storage=storage,
        storage_ptr=ptr,
        storage_nbytes=nbytes,
        storage_offset=offset,
        data_ptr=data_ptr,
        version=None,
        requires_grad=None,
        is_leaf=None,
        retains_grad=None,
        grad_fn=None,
        grad=None,
        is_view=base is not None,
        base=names_by_id.get(id(base)) if base is not None else None,
        values=ndarray_values(arr) if values else Values(kind="unavailable", reason="values not recorded"),
    )


def ndarray_values(arr: Any) -> Values:
    try:
        if arr.dtype.kind not in "biufc":
            return Values(kind="unavailable", reason=f"dtype {arr.dtype}")
        if arr.size <= EXACT_LIMIT:
            return Values(kind="exact", data=freeze(encode_number_tree(arr.tolist())))
        head: List[Any] = []
        for chunk in iter_chunks(arr, HEAD):
            head.extend(chunk.reshape(-1).tolist())
            if len(head) >= HEAD:
                break
        if arr.dtype.kind == "c":
            return Values(kind="summary", summary=Summary(numel=int(arr.size), head=freeze(encode_number_tree(head[:HEAD]))))
        nan_count = inf_count = count = 0
        lo = hi = None
        total = 0.0
        sq = 0.0
        for chunk in iter_chunks(arr, CHUNK):
            c = chunk.astype(_np.float64).reshape(-1)
            finite = _np.isfinite(c)
            nan_count += int(_np.isnan(c).sum())
            inf_count += int(_np.isinf(c).sum())
            c = c[finite]
            if not c.size:
                continue
            lo = float(c.min()) if lo is None else min(lo, float(c.min()))
            hi = float(c.max()) if hi is None else max(hi, float(c.max()))
            total += float(c.sum())
            sq += float((c * c).sum())
            count += int(c.size)
        mean = total / count if count else None
        std = math.sqrt(max(0.0, (sq - count * mean * mean) / (count - 1))) if count > 1 else None
        summary = Summary(
            numel=int(arr.size), min=lo, max=hi, mean=mean, std=std,
            nan_count=nan_count, inf_count=inf_count, head=freeze(encode_number_tree(head[:HEAD])),
        )
        return Values(kind="summary", summary=summary)
    except Exception as exc:
        return Values(kind="unavailable", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
