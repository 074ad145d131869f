"""Storage labels (S1, S2, ...): which allocation a tensor's or array's memory belongs to.

Labels follow allocations (overlapping byte ranges), not addresses: the
registry keeps a weak reference to each owner, so a new allocation at the
address of one that died gets a new label, and nothing here keeps an owner
alive. ``probe.py`` labels what a snapshot sees, ``ops.py`` what an
operation touched, both through one registry per run.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class _Allocation:
    label: str
    device: str
    ptr: int
    nbytes: int
    owners: List[weakref.ref] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    # for storages without an address (meta): the storage's own identity
    ident: Optional[int] = None

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
        # label -> the names seen on it (its allocation's list)
        self._names: Dict[str, List[str]] = {}
        # id of an owner's weak reference -> its allocation; the allocation holds the reference,
        # so the id stays its own for the run
        self._by_ref: Dict[int, _Allocation] = {}

    def label(
        self, device: str, ptr: int, nbytes: int, owner: Any, ident: Optional[int] = None
    ) -> str:
        alloc = self._by_key.get((device, ptr) if ident is None else (device + "#id", ident))
        # the common case, an owner seen before: it lives (the caller holds it), so does its
        # allocation
        if alloc is not None:
            for ref in alloc.owners:
                if ref() is owner:
                    if ident is None and (
                        ptr < alloc.ptr or ptr + nbytes > alloc.ptr + alloc.nbytes
                    ):
                        end = max(alloc.ptr + alloc.nbytes, ptr + nbytes)
                        alloc.ptr = min(alloc.ptr, ptr)
                        alloc.nbytes = end - alloc.ptr
                    return alloc.label
        alloc = self._find(device, ptr, nbytes, ident)
        if alloc is not None:
            if not any(ref() is owner for ref in alloc.owners):
                self._own(alloc, owner)
            if ident is None:  # widen to the union of the ranges seen
                end = max(alloc.ptr + alloc.nbytes, ptr + nbytes)
                alloc.ptr = min(alloc.ptr, ptr)
                alloc.nbytes = end - alloc.ptr
            return alloc.label
        alloc = _Allocation(f"S{len(self.allocations) + 1}", device, ptr, nbytes, [], ident=ident)
        self._own(alloc, owner)
        self.allocations.append(alloc)
        self._names[alloc.label] = alloc.names
        self._live.append(alloc)
        self._by_key[(device, ptr) if ident is None else (device + "#id", ident)] = alloc
        return alloc.label

    def _find(
        self, device: str, ptr: int, nbytes: int, ident: Optional[int]
    ) -> Optional[_Allocation]:
        key = (device, ptr) if ident is None else (device + "#id", ident)
        alloc = self._by_key.get(key)
        if alloc is not None and alloc.alive():
            return alloc
        if ident is not None:
            return None
        end = ptr + nbytes
        for alloc in self._live:  # the byte ranges first: asking whether an owner lives costs more
            if (
                alloc.ident is None
                and alloc.device == device
                and ptr < alloc.ptr + alloc.nbytes
                and alloc.ptr < end
                and alloc.alive()
            ):
                return alloc
        # forget dead allocations, in amortised constant time
        if len(self._live) >= 2 * self._pruned:
            self._live = [a for a in self._live if a.alive()]
            self._pruned = max(64, len(self._live))
        return None

    def live(self) -> List[_Allocation]:
        """Every allocation with a live owner.

        The dead are forgotten here for good (they never come back).
        """
        self._live = [a for a in self._live if a.alive()]
        self._pruned = max(64, len(self._live))
        return self._live

    def lookup(self, device: str, ptr: int, nbytes: int) -> Optional[str]:
        """The label of the live allocation these bytes lie in, if one was seen; never makes one."""
        alloc = self._find(device, ptr, nbytes, None)
        return alloc.label if alloc is not None else None

    def _own(self, alloc: _Allocation, owner: Any) -> None:
        ref = _weak(owner)
        alloc.owners.append(ref)
        self._by_ref[id(ref)] = alloc

    def label_gone(self, device: str, ptr: int, nbytes: int, ref: Any = None) -> str:
        """The label of an owner that died since an operation read it (``ref``: the weak
        reference taken then).

        An owner labelled before it died keeps its label: ``weakref.ref`` gives one object the
        same reference each time, so ``ref`` is the one the registry holds for it. Any other is
        an allocation that lived and died between two snapshots, with a new label; it has no
        live owner, so no later storage at its address is taken for it.
        """
        known = self._by_ref.get(id(ref)) if ref is not None else None
        if known is not None and any(r is ref for r in known.owners):
            return known.label
        alloc = _Allocation(f"S{len(self.allocations) + 1}", device, ptr, nbytes, [])
        self.allocations.append(alloc)
        self._names[alloc.label] = alloc.names
        return alloc.label

    def note_name(self, label: str, name: str) -> None:
        names = self._names[label]
        if name not in names:
            names.append(name)


def _weak(owner: Any) -> weakref.ref:
    try:
        return weakref.ref(owner)
    except TypeError:  # an owner that cannot be weakly referenced: treat as always alive
        return lambda: owner  # type: ignore[return-value]
