"""Reuse what the previous snapshot read, while a tensor is provably unchanged.

Most tensors are untouched by most steps, yet every step's snapshot used to
read each one again, element by element. ``SnapshotCache`` keeps, per
tensor, the record of the last snapshot and the facts it was read from: the
tensor object itself (its ``identity.mark``: a weak reference to a tensor
would make ``torch.utils.swap_tensors`` refuse it), its
version counter, address, shape, stride, offset, dtype, flags, ``grad_fn``,
its storage (identity and label) and its ``grad`` (object, version, address).

The version counter alone does not prove the values unchanged: ``x.data``,
a NumPy array over the same memory, or ``torch.frombuffer`` write without
counting. So the values are checked too, exactly: a small tensor's bytes are
compared with the bytes read last time (at most ``EXACT_LIMIT`` elements),
a large one's by a CRC-32 of each block of its memory, computed on a
bounded number of threads. Only CPU tensors of plain ``torch.Tensor`` or
``Parameter`` type qualify; anything else is read in full every time.

The same fingerprints let a large tensor's summary be reused across steps
and across tensors over the same memory (``a`` and ``c = a.detach()``).

Reading memory to fingerprint it still costs its size. When the tracer
proves, from the operations a step ran, that a storage was not written since
the previous snapshot (``writes.Window``, set as ``window`` before a
snapshot), a span of it larger than ``SMALL`` keeps the mark it had then, unread;
a span written, or seen for the first time, in such a window gets a fresh
mark (``_Fresh``, equal only to itself) without being read: its records and
summaries are read again. Without a window every span is fingerprinted.
"""

from __future__ import annotations

import ctypes
import os
import warnings
import weakref
import zlib
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

import torch

from .identity import mark
from ..trace import TensorState, evolve
from .writes import UNWRITTEN

SMALL = 64 * 16  # bytes compared directly (64 complex128 elements)
BLOCK = 16 << 20  # bytes per CRC block of a large tensor
THREADS = max(1, min(4, os.cpu_count() or 1))  # threads that checksum a large tensor's blocks

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_pool: Any = None


def _threads() -> Any:
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="tensortrace-crc")
    return _pool


def fingerprint(ptr: int, nbytes: int) -> Any:
    """An exact copy of a small span of memory, or the CRC-32 of each block of a large one."""
    if nbytes <= SMALL:
        return ctypes.string_at(ptr, nbytes)
    starts = range(0, nbytes, BLOCK)

    def crc(start: int) -> int:  # zlib releases the GIL over large buffers
        size = min(BLOCK, nbytes - start)
        return zlib.crc32((ctypes.c_char * size).from_address(ptr + start))

    if len(starts) == 1 or THREADS == 1:
        return (nbytes, tuple(crc(s) for s in starts))
    return (nbytes, tuple(_threads().map(crc, starts)))


class _Fresh:
    """The mark of memory read afresh in this snapshot: equal to itself only."""

    __slots__ = ()


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference to a storage (never to a tensor), or one that is always dead."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None  # cannot be watched: never reused


class _Entry:
    __slots__ = (
        "ref",
        "key",
        "grad_ref",
        "values",
        "grad_values",
        "state",
        "span",
        "grad_span",
    )

    def __init__(
        self,
        ref: Any,
        key: Tuple,
        grad_ref: Any,
        values: Any,
        grad_values: Any,
        state: TensorState,
        span: Tuple[int, int],
        grad_span: Optional[Tuple[int, int]],
    ) -> None:
        self.ref, self.key, self.grad_ref = ref, key, grad_ref
        self.values, self.grad_values, self.state = values, grad_values, state
        # the bytes the fingerprints cover, fixed by the key
        self.span, self.grad_span = span, grad_span


class SnapshotCache:
    """Per run: the last snapshot's records and summaries, and this snapshot's fingerprints."""

    def __init__(self) -> None:
        self._records: Dict[int, _Entry] = {}
        self._seen: Dict[int, _Entry] = {}
        self._prints: Dict[Tuple[int, int], Any] = {}  # this snapshot's marks by (address, bytes)
        self._owners: Dict[
            Tuple[int, int], Any
        ] = {}  # this snapshot's spans -> weak reference to their storage
        self._last: Dict[
            Tuple[int, int], Tuple[Any, Any]
        ] = {}  # the previous snapshot's (mark, storage reference)
        self.window: Any = (
            None  # the next snapshot's proof of what was not written (writes.Window), or None
        )
        # (device, dtype, address, shape, stride) -> (fingerprint, statistics), kept while the
        # memory is seen
        self._summaries: Dict[Any, Tuple[Any, Any]] = {}
        self._summaries_now: Dict[Any, Tuple[Any, Any]] = {}
        self._facts_of: Any = None  # the tensor whose facts reuse() read last, and those facts
        self._facts: Tuple[Any, Any, Any] = (None, None, None)

    def snapshot_of(self, items: Iterable[Any]) -> Iterator[Any]:
        """``items``, read as one snapshot: the tool's own reads never warn, and what the
        snapshot did not see is forgotten after it, so the cache never outgrows one snapshot."""
        self._seen, self._prints, self._owners, self._summaries_now = {}, {}, {}, {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield from items
        finally:
            self._facts_of = self._facts = None  # never keeps a tensor alive past the snapshot
            live = {
                ptr for ptr, _ in self._prints
            }  # memory this snapshot saw: its summaries may serve again
            kept = {k: v for k, v in self._summaries.items() if k[2] in live}
            kept.update(self._summaries_now)
            self._last = {
                span: (mark, self._owners.get(span))
                for span, mark in self._prints.items()
                if span[1] > SMALL
            }
            self._records, self._summaries, self._prints, self._owners, self.window = (
                self._seen,
                kept,
                {},
                {},
                None,
            )

    def fingerprint_of(self, t: torch.Tensor) -> Any:
        """The fingerprint of a CPU tensor's memory, computed once per snapshot; None when
        unsupported."""
        if not t.is_cpu or t.layout != _STRIDED:
            return None
        return self._values_mark(t)

    # summaries ----------------------------------------------------------------
    def summary_stats(self, key: Any, distinct: torch.Tensor, compute: Callable[[], Any]) -> Any:
        """Statistics of ``distinct`` (``compute()``), reused while its memory's fingerprint
        holds."""
        try:
            mark = self.fingerprint_of(distinct)
        except Exception:
            mark = None
        if mark is None:
            return compute()
        for table in (self._summaries_now, self._summaries):
            known = table.get(key)
            if known is not None and known[0] == mark:
                self._summaries_now[key] = known
                return known[1]
        stats = compute()
        self._summaries_now[key] = (mark, stats)
        return stats

    # records ------------------------------------------------------------------
    def reuse(
        self, name: str, t: Any, kind: str, names_by_id: Dict[int, str]
    ) -> Optional[TensorState]:
        """The last record of ``t`` when nothing about it changed (renamed as now), else None.

        The storage label stands with the key: the key holds the storage's
        identity, and the registry keeps a label while its storage lives.
        Only a tensor kept by the last snapshot is read here: it qualified
        then, and a tensor whose storage, address and dtype are still the
        ones it had is still the same kind of tensor, so the cheap facts of
        the key are all this reads before comparing its memory.
        """
        entry = self._records.get(id(t))
        if entry is None or type(t) not in _PLAIN_TYPES or entry.ref != mark(t):
            return None
        try:
            facts = key, grad, base = _facts(t)
            if key != entry.key:
                self._facts_of, self._facts = t, facts  # keep() reads them again otherwise
                return None
            if entry.grad_ref != (mark(grad) if grad is not None else None):
                return None
            if self._print(entry.span, t) != entry.values:
                return None
            if grad is not None and self._print(entry.grad_span, grad) != entry.grad_values:
                return None
        except Exception:
            return None
        state = entry.state
        base_name = names_by_id.get(id(base)) if base is not None else None
        if state.name != name or state.kind != kind or state.base != base_name:
            state = evolve(state, name=name, kind=kind, base=base_name)
            entry.state = state
        self._seen[id(t)] = entry
        return state

    def keep(self, t: Any, state: TensorState) -> None:
        """Remember ``state``, just read in full, for the next snapshot (when ``t`` qualifies)."""
        if state.unavailable:
            return
        try:
            if not _qualifies(t):
                return
            # read by reuse() just before, for a tensor the last snapshot kept (the probe
            # between only read)
            key, grad, _ = self._facts if self._facts_of is t else _facts(t)
            if key is None:
                return
            span = _span(t.data_ptr(), tuple(t.shape), t.stride(), t.element_size())
            grad_span = (
                _span(grad.data_ptr(), tuple(grad.shape), grad.stride(), grad.element_size())
                if grad is not None
                else None
            )
            values = self._print(span, t)
            grad_values = self._print(grad_span, grad) if grad_span is not None else None
        except Exception:
            return
        ref = mark(t)
        grad_ref = mark(grad) if grad is not None else None
        self._seen[id(t)] = _Entry(ref, key, grad_ref, values, grad_values, state, span, grad_span)

    def _print(self, span: Tuple[int, int], t: torch.Tensor) -> Any:
        """The mark of ``t``'s memory ``span``, made once per snapshot."""
        found = self._prints.get(span)
        if found is None:
            found = self._prints[span] = self._read_mark(span, t)
        return found

    def _values_mark(self, t: torch.Tensor) -> Any:
        return self._print(_span(t.data_ptr(), tuple(t.shape), t.stride(), t.element_size()), t)

    def _read_mark(self, span: Tuple[int, int], t: torch.Tensor) -> Any:
        """The mark of a span's memory now: kept, fresh or read (see the module's docstring)."""
        window = self.window
        if window is None or span[1] <= SMALL:
            return fingerprint(*span)
        storage = t.untyped_storage()
        state = window.state(storage)
        ref = _weak(storage)
        self._owners[span] = ref  # a mark read now may stand at the next snapshot, unread
        if not state:
            return fingerprint(*span)
        if state == UNWRITTEN:
            last = self._last.get(span)
            if last is not None and last[1] is not None and last[1]() is storage:
                return last[0]
        return _Fresh()


def _qualifies(t: Any) -> bool:
    """A plain dense CPU tensor, whose memory the fingerprints may read."""
    return (
        type(t) in _PLAIN_TYPES
        and t.is_cpu
        and t.layout == _STRIDED
        and not t.is_quantized
        and not t.is_nested
    )


# The parts of ``_facts``' key, in order.
KEY_PARTS = (
    "version",
    "data_ptr",
    "shape",
    "stride",
    "storage_offset",
    "dtype",
    "requires_grad",
    "is_leaf",
    "retains_grad",
    "grad_fn",
    "base",
    "conj_neg",
    "storage",
    "storage_nbytes",
    "grad",
)

# What keeps each field of a reused ``TensorState`` true: parts of the key, or
# "values" (the memory's fingerprint), "grad values" (the grad's), "qualifies"
# (only plain CPU tensors are kept), "renamed" (``reuse`` sets it as now) or
# "tracer" (the probe sets it after ``reuse``, on reused and fresh records alike).
# A new field of ``TensorState`` must be added here, and to the key if a fact of
# the tensor decides it: ``tests/record/test_reuse.py`` fails until it is, since a field
# no part covers would be served stale by a reused record.
COVERED_BY = {
    "name": ("renamed",),
    "kind": ("renamed",),
    "shape": ("shape",),
    "stride": ("stride",),
    "dtype": ("dtype",),
    "device": ("qualifies",),
    "storage": ("storage",),  # the registry keeps a label while its storage lives
    "storage_ptr": ("storage", "data_ptr", "storage_offset"),
    "storage_nbytes": ("storage_nbytes",),
    "storage_offset": ("storage_offset",),
    "data_ptr": ("data_ptr",),
    "version": ("version",),
    "requires_grad": ("requires_grad",),
    "is_leaf": ("is_leaf",),
    "retains_grad": ("retains_grad",),
    "grad_fn": ("grad_fn",),
    "grad": ("grad", "grad values"),
    "is_view": ("base",),
    "base": ("base", "renamed"),
    "values": ("values", "conj_neg"),
    "same_as": ("tracer",),
    "unavailable": ("qualifies",),  # a record with one is never kept (``keep``)
}


def _facts(t: Any) -> Tuple[Optional[Tuple], Any, Any]:
    """What must be equal for a record to stand (None: never reuse), the grad it names, and
    the base (``KEY_PARTS`` names the key's parts).

    Cheap reads only: this runs for every tensor at every step.
    """
    grad = t.grad
    grad_key = None
    if grad is not None:
        if (
            type(grad) is not torch.Tensor
            or not grad.is_cpu
            or grad.layout != _STRIDED
            or grad.is_quantized
        ):
            return None, None, None
        grad_key = (
            grad._version,
            grad.data_ptr(),
            grad.shape,
            grad.stride(),
            grad.dtype,
            _bits(grad),
        )
    storage = t.untyped_storage()
    grad_fn = t.grad_fn
    base = t._base  # a view has a base, and only a view
    key = (
        t._version,
        t.data_ptr(),
        t.shape,
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.requires_grad,
        t.is_leaf,
        t.retains_grad,
        id(grad_fn) if grad_fn is not None else None,
        id(base) if base is not None else None,
        _bits(t),
        storage._cdata,
        storage.nbytes(),
        grad_key,
    )
    return key, grad, base


_STRIDED = torch.strided


def _bits(t: torch.Tensor) -> Any:
    """The conjugate and negative bits, which only complex tensors carry."""
    return (t.is_conj(), t.is_neg()) if t.dtype.is_complex else None


def _span(
    ptr: int, shape: Tuple[int, ...], stride: Tuple[int, ...], itemsize: int
) -> Tuple[int, int]:
    last = 0  # the offset of the last element, in elements
    for n, s in zip(shape, stride):
        if n == 0:
            return ptr, 0
        last += (n - 1) * s
    return ptr, (last + 1) * itemsize
