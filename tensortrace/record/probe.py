"""Read one tensor's facts without disturbing it.

Nothing here keeps a tensor alive, hooks it, retains its grad or copies more
than a few elements of it: values of large tensors are summarised chunk by
chunk (``values.py``), so the extra memory is bounded by the chunk size, not
the tensor, and at the cost of the distinct elements in memory order (an
expanded tensor costs its storage). Each fact is read on its own, around any
``__torch_function__`` of a subclass: a fact PyTorch refuses to give is
recorded as unavailable with PyTorch's reason, and the rest still are.
Storage labels come from ``storages.StorageRegistry`` (re-exported here).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..trace import TensorState, Values, evolve
from .storages import StorageRegistry  # noqa: F401 (callers import it from here too)
from .values import EXACT_LIMIT, is_ndarray, ndarray_values, tensor_values
from .walk import node_name


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
    """Reads that bypass a tensor subclass's ``__torch_function__``.

    The user's code never sees them.
    """
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
        quick = (
            _probe_plain(name, t, registry, names_by_id, kind, values, cache, memo)
            if type(t) in _PLAIN
            else None
        )
        if quick is not None:
            return quick
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
            grad=r.read("grad", lambda: tensor_values(grad, cache, memo))
            if (grad is not None and values)
            else None,
            is_view=is_view,
            base=names_by_id.get(id(base)) if base is not None else None,
            values=recorded,
            unavailable=tuple(r.unavailable),
        )


_NO_CONTEXT = contextlib.nullcontext()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# exact types: no __torch_function__ of a subclass, never lazy
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
_STRIDED = torch.strided
_DTYPES: Dict[torch.dtype, str] = {}


def _probe_plain(
    name: str,
    t: torch.Tensor,
    registry: StorageRegistry,
    names_by_id: Dict[int, str],
    kind: str,
    values: bool,
    cache: Optional[Dict[Any, Any]],
    memo: Any,
) -> Optional[TensorState]:
    """``probe_tensor``'s record of a plain dense CPU tensor, its facts read in one go.

    None when that is not such a tensor or PyTorch refuses any fact (the caller
    then reads them one by one, with reasons). Call with warnings ignored
    (``.grad`` of a non-leaf warns).
    """
    try:
        if not t.is_cpu or t.layout is not _STRIDED or t.is_quantized or t.is_nested:
            return None
        shape = tuple(t.shape)
        stride = t.stride()
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        empty = t.numel() == 0
        offset, data_ptr, version = t.storage_offset(), t.data_ptr(), t._version
        requires_grad, is_leaf, retains_grad = t.requires_grad, t.is_leaf, t.retains_grad
        grad_fn, grad, base, is_view = t.grad_fn, t.grad, t._base, t._is_view()
        dtype = t.dtype
    except Exception:
        return None
    if grad is not None and type(grad) not in _PLAIN:  # read under plain_reads(), by probe_tensor
        return None
    label = (
        None
        if nbytes == 0 or empty
        else registry.label("cpu", ptr, nbytes, storage, ident=None if ptr else storage._cdata)
    )
    dtype_name = _DTYPES.get(dtype)
    if dtype_name is None:
        dtype_name = _DTYPES[dtype] = _dtype_name(dtype)
    no_values = None if values else Values(kind="unavailable", reason="values not recorded")
    return TensorState(
        name=name,
        kind=kind,
        shape=shape,
        stride=stride,
        dtype=dtype_name,
        device="cpu",
        storage=label,
        storage_ptr=ptr,
        storage_nbytes=nbytes,
        storage_offset=offset,
        data_ptr=data_ptr,
        version=version,
        requires_grad=requires_grad,
        is_leaf=is_leaf,
        retains_grad=retains_grad,
        grad_fn=node_name(grad_fn) if grad_fn is not None else None,
        grad=(_quick_values(grad) or tensor_values(grad, cache, memo))
        if (grad is not None and values)
        else None,
        is_view=is_view,
        base=names_by_id.get(id(base)) if base is not None else None,
        values=no_values or _quick_values(t) or tensor_values(t, cache, memo),
    )


def _quick_values(t: torch.Tensor) -> Optional[Values]:
    """``tensor_values`` of a small plain dense real CPU tensor of at most one dimension.

    Read directly; None: take the general path (the same record, with checks
    for every other kind of tensor).
    """
    try:
        if (
            type(t) not in _PLAIN
            or not t.is_cpu
            or t.layout is not _STRIDED
            or t.dim() > 1
            or t.numel() > EXACT_LIMIT
        ):
            return None
        dtype = t.dtype
        if dtype.is_complex or t.is_quantized:
            return None
        data = t.tolist()
    except Exception:
        return None
    if dtype.is_floating_point:  # NaN and infinities are spelled out by the general path
        if t.dim() == 0:
            return Values(kind="exact", data=data) if math.isfinite(data) else None
        for x in data:
            if not math.isfinite(x):
                return None
    return Values(kind="exact", data=tuple(data) if type(data) is list else data)


def _lazy_reason(t: torch.Tensor) -> Optional[str]:
    """Why an uninitialised parameter or buffer of a lazy module has no shape or data yet."""
    try:
        from torch.nn.parameter import is_lazy

        if is_lazy(t):
            return (
                "an uninitialized parameter of a lazy module: "
                "its shape and values are set by the module's first call"
            )
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
            raise ValueError(
                f"dimension {i} is {d}, which has no single size "
                "(it differs between the nested tensor's components)"
            ) from None
    return tuple(out)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _storage_of(
    t: torch.Tensor, registry: StorageRegistry, r: _Reader
) -> Tuple[Optional[str], Optional[int], Optional[int]]:
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


# --- NumPy arrays --------------------------------------------------------------


def probe_named(
    named: Sequence[Tuple[str, Any, str]],
    registry: StorageRegistry,
    *,
    values: bool = True,
    memo: Any = None,
) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
    """One snapshot of ``named``: each one's state, and name -> object.

    ``named`` holds (name, object, kind), in binding order.

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
    # the probe's own reads never warn (the memo's snapshot_of makes them quiet too)
    quiet = _quiet() if memo is None else _NO_CONTEXT
    with quiet:
        for name, obj, kind in memo.snapshot_of(named) if memo is not None else named:
            if kind == "ndarray":
                state = probe_ndarray(name, obj, registry, names_by_id, values=values)
            else:
                state = memo.reuse(name, obj, kind, names_by_id) if memo is not None else None
                if state is None:
                    if type(obj) in _PLAIN:
                        state = _probe_plain(
                            name, obj, registry, names_by_id, kind, values, summaries, memo
                        )
                    if state is None:
                        state = probe_tensor(
                            name,
                            obj,
                            registry,
                            names_by_id,
                            kind=kind,
                            values=values,
                            cache=summaries,
                            memo=memo,
                        )
                    if memo is not None:
                        memo.keep(obj, state)
            first = names_by_id.get(id(obj))
            if first != name:
                state = evolve(state, same_as=first)
            if state.storage is not None:
                registry.note_name(state.storage, name)
            states.append(state)
            objects[name] = obj
    return tuple(states), objects


def probe_ndarray(
    name: str,
    arr: Any,
    registry: StorageRegistry,
    names_by_id: Dict[int, str],
    *,
    values: bool = True,
) -> TensorState:
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
        values=ndarray_values(arr)
        if values
        else Values(kind="unavailable", reason="values not recorded"),
    )
