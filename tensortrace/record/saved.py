"""What autograd nodes saved for backward, and the backward failures that predicts.

Every fact here is read from PyTorch, never run: a node's saved tensors are its
``_raw_saved_*`` attributes (``torch._C._autograd.SavedTensor``, one per
tensor a generated ``grad_fn`` or a ``ctx.save_for_backward`` kept). For each:

- ``SavedTensor.data`` is the tensor itself, with no version check (``None``
  when nothing was saved under that attribute, or after backward freed it);
- unpacking it, as backward itself does (through the node's ``_saved_<attr>``
  property, which passes the node a saved output needs; an element of a saved
  list through ``SavedTensor.unpack()``), raises PyTorch's "modified by an
  inplace operation: ... is at version N; expected version M" error for a
  stale tensor, which gives both versions, and the "backward through the
  graph a second time" error for a freed one.

Nothing is unpacked on a tensor saved under
``torch.autograd.graph.saved_tensors_hooks`` (it would run the user's unpack
hook); such a tensor is recorded with unknown versions and predicts nothing.
Reading changes no version, grad or graph (``tests/record/test_saved.py`` and the
differential tests check it). Backward is never run to find anything out.

This module reads one node. After each step, ``scan.scan`` walks the graphs
behind every named tensor that requires grad (one walk for all of them, in
this process, which ``walk.walk_nodes`` makes safe for any length) to find
which backward will fail, and ``predict.Predictor`` says why, naming the step
that changed the saved tensor from the versions recorded after each step. The
predictor and its kinds are importable from here too, where callers knew them.
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..trace import SavedTensor, TensorState
from .predict import CHANGED, FREED, STALE, UNCHECKED, Predictor  # noqa: F401 - re-exported

_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+) instead")
_TWICE = "Trying to backward through the graph a second time"

# node type -> ((attribute, raw attribute name, property name), ...): dir() once per kind of node
_ATTRS: Dict[type, Tuple[Tuple[str, str, str], ...]] = {}


def saved_attributes(node: Any) -> Tuple[Tuple[str, str, str], ...]:
    """The names a node's kind saves tensors under.

    For example ``("self", "_raw_saved_self", "_saved_self")``, one triple per attribute.
    """
    cls = type(node)
    attrs = _ATTRS.get(cls)
    if attrs is None:
        try:
            names = dir(node)
        except Exception:
            names = []
        attrs = _ATTRS[cls] = tuple(
            (a[len("_raw_saved_") :], a, "_saved_" + a[len("_raw_saved_") :])
            for a in names
            if a.startswith("_raw_saved_")
        )
    return attrs


# a named tensor's (shape, stride, version, name), by its data address
_Candidate = Tuple[Tuple[int, ...], Tuple[int, ...], Optional[int], str]


class Namer:
    """Which named tensor and storage label a saved tensor is, from one step's snapshot.

    A saved input is the very object (identity); a saved output comes back as
    another tensor object on the same memory and version counter, so it is
    matched by (address, shape, stride) and version. The storage label is the live
    allocation, among those the registry labelled, whose bytes hold the
    tensor's first element; labels are only looked up, never made. Each
    lookup is a dictionary probe and a bisection, so a 100,000-node graph
    costs little more to name than to walk.
    """

    def __init__(
        self, objects: Dict[str, Any], states: Sequence[TensorState], registry: Any
    ) -> None:
        # indexed at the first question: a step whose tensors have no graph asks none
        self._made_from: Optional[Tuple[Any, ...]] = (objects, states, registry)

    def _index(self) -> None:
        objects, states, registry = self._made_from
        self._made_from = None
        self.by_id: Dict[int, str] = {}
        self.by_ptr: Dict[int, List[_Candidate]] = {}
        by_name = {s.name: s for s in states}
        for name, obj in objects.items():
            self.by_id.setdefault(id(obj), name)
            state = by_name.get(name)
            if state is not None and state.kind != "ndarray" and state.data_ptr:
                self.by_ptr.setdefault(state.data_ptr, []).append(
                    (state.shape, state.stride, state.version, name)
                )
        # the live allocations, not every label ever made
        spans = sorted((a.ptr, a.ptr + a.nbytes, a.label) for a in registry.live() if a.ptr)
        self.starts = [start for start, _, _ in spans]
        self.spans = spans

    def __call__(self, t: Any) -> Tuple[Optional[str], Optional[str]]:
        if self._made_from is not None:
            self._index()
        name = self.by_id.get(id(t))
        try:
            ptr = t.data_ptr()
            if type(ptr) is not int:
                ptr = int(ptr)
        except Exception:
            return name, None
        if name is None:
            for shape, stride, version, candidate in self.by_ptr.get(ptr, ()):
                # the same version too: a .data alias has its own counter, so it is another tensor
                try:
                    if (
                        tuple(t.shape) == shape
                        and tuple(t.stride()) == stride
                        and int(t._version) == version
                    ):
                        name = candidate
                        break
                except Exception:
                    break
        label = None
        if ptr:
            at = bisect.bisect_right(self.starts, ptr) - 1
            if at >= 0 and ptr < self.spans[at][1]:
                label = self.spans[at][2]
        return name, label


Entry = List[Any]  # [attr, tensor name, storage, saved_version, version, stale, freed]: JSON-ready


# (attribute, SavedTensor, node, the node's _saved_ property or None)
Item = Tuple[str, Any, Any, Optional[str]]


def saved_items(node: Any) -> List[Item]:
    """A node's saved tensors; a saved list gives ``attr[i]``.

    A single saved tensor is unpacked through the node's own ``_saved_<attr>``
    property, as backward does: it passes the node, which a saved *output*
    needs (``SavedTensor.unpack()`` alone refuses one, as if it had been
    detached in place). An element of a saved list is unpacked on its own.
    """
    out: List[Item] = []
    for attr, raw, prop in raw_saved(node):
        if type(raw) is tuple or type(raw) is list:
            out.extend((f"{attr}[{i}]", item, None, None) for i, item in enumerate(raw))
        else:
            out.append((attr, raw, node, prop))
    return out


class _Freed:
    """Stands for a saved tensor whose very attribute refuses to be read because backward
    freed it (a custom ``autograd.Function``'s ``_raw_saved_tensors`` raises then)."""

    data = None
    unpack_hook = None


FREED_RAW = _Freed()


def raw_saved(node: Any) -> Iterator[Tuple[str, Any, str]]:
    """Each saved attribute of ``node`` that can be read.

    As (name, its raw saved value, its ``_saved_`` property).
    """
    for attr, raw_name, prop in saved_attributes(node):
        try:
            raw = getattr(node, raw_name)
        except RuntimeError as exc:
            if _TWICE in str(exc):
                yield attr, FREED_RAW, prop
            continue
        except Exception:
            continue
        yield attr, raw, prop


def read_node(node: Any, namer: Any) -> List[Entry]:
    """What ``node`` saved, one plain entry per tensor."""
    items = saved_items(node)
    out = read_items(items, namer)
    if any(item[2] is None for item in items):  # a list was saved
        _whole_list(node, items, out)
    return out


def read_items(items: Sequence[Item], namer: Any) -> List[Entry]:
    """One plain entry per saved tensor of ``items`` (nothing for an attribute that saved none)."""
    out: List[Entry] = []
    for item in items:
        entry = _read_one(item, namer)
        if entry is not None:
            out.append(entry)
    return out


def _whole_list(node: Any, items: List[Item], out: List[Entry]) -> None:
    """Elements of a saved list whose saved version is unknown, read by unpacking the whole list.

    An output saved in a list (``ctx.save_for_backward(result)``) unpacks only
    with its node, and before torch 2.13 no element unpacks on its own at all
    (``SavedTensor.unpack`` is new in 2.13): PyTorch unpacks the whole list at
    once, as backward does. When none is stale or hooked, that tells: it
    succeeds (every element is at its saved version), or raises the in-place
    error for one element, whose versions it gives, and which is the one
    element of those not known whose version is the one it names.
    """
    unknown = [e for e in out if e[3] is None and not e[6]]
    if (
        not unknown
        or any(e[5] for e in out)
        or any(getattr(i[1], "unpack_hook", None) is not None for i in items)
    ):
        return
    attr = unknown[0][0].split("[", 1)[0]
    prop = (
        "saved_tensors"
        if attr == "tensors" and not hasattr(node, "_saved_tensors")
        else "_saved_" + attr
    )
    try:
        getattr(node, prop)
    except RuntimeError as exc:
        found = _VERSIONS.search(str(exc))
        if found is not None:
            now, saved = int(found.group(1)), int(found.group(2))
            at_now = [e for e in unknown if e[4] == now] if len(unknown) > 1 else unknown
            if len(at_now) == 1:
                entry = at_now[0]
                entry[4], entry[3] = now, saved
                entry[5] = saved != now
        return
    except Exception:
        return
    for entry in unknown:
        entry[3] = entry[4]


def unpack_saved(item: Item) -> Tuple[Any, Optional[Tuple[str, Optional[int], Optional[int]]]]:
    """What backward's own unpacking of one saved tensor gives: (tensor, None) when it is fine
    (tensor None: nothing was saved), else (None, problem): ("stale", version, saved version),
    ("freed", None, None), ("refused", None, None), or ("hooked", None, None) when unpacking
    would run the user's hook, so it is not done."""
    _, raw, node, prop = item
    if raw is FREED_RAW:
        return None, ("freed", None, None)
    if getattr(raw, "unpack_hook", None) is not None:
        return None, ("hooked", None, None)
    try:
        return (getattr(node, prop) if prop is not None else raw.unpack()), None
    except RuntimeError as exc:
        text = str(exc)
        found = _VERSIONS.search(text)
        if found is not None:
            return None, ("stale", int(found.group(1)), int(found.group(2)))
        if _TWICE in text:
            return None, ("freed", None, None)
        return None, ("refused", None, None)
    except Exception:
        return None, ("refused", None, None)


def _read_one(item: Item, namer: Any) -> Optional[Entry]:
    attr, raw = item[0], item[1]
    data, problem = unpack_saved(item)
    if problem is None:
        if data is None:  # nothing was saved under this attribute
            return None
        try:
            version: Optional[int] = int(data._version)
        except Exception:
            version = None
        name, storage = namer(data) if namer is not None else (None, None)
        return [attr, name, storage, version, version, False, False]
    kind, version, saved_version = problem
    if kind == "freed":
        return [attr, None, None, None, None, False, True]
    # the tensor itself, read without the version check (not for hooked ones: that is the
    # hook's object)
    try:
        data = raw.data if kind != "hooked" else None
    except Exception:
        data = None
    if data is not None and version is None:
        try:
            version = int(data._version)
        except Exception:
            version = None
    name, storage = namer(data) if namer is not None and data is not None else (None, None)
    stale = kind == "stale" and saved_version != version
    return [attr, name, storage, saved_version, version, stale, False]


def read_cached(node: Any, namer: Any, reads: Optional[Dict[int, Any]]) -> List[Entry]:
    """``read_node``, once per node within one observation.

    ``reads`` keeps the node alive meanwhile.
    """
    if reads is None:
        return read_node(node, namer)
    got = reads.get(id(node))
    if got is None:
        got = reads[id(node)] = (node, read_node(node, namer))
    return got[1]


def saved_table(
    order: Sequence[Any], namer: Any, reads: Optional[Dict[int, Any]] = None
) -> Tuple[List[Entry], List[List[int]]]:
    """Each node's saved entries as indices into a table of distinct entries.

    A long chain repeats a few entries, so each is kept once.
    """
    table: List[Entry] = []
    at: Dict[Tuple[Any, ...], int] = {}
    per_node: List[List[int]] = []
    for node in order:
        indices = []
        for entry in read_cached(node, namer, reads):
            key = tuple(entry)
            i = at.get(key)
            if i is None:
                i = at[key] = len(table)
                table.append(entry)
            indices.append(i)
        per_node.append(indices)
    return table, per_node


def saved_records(
    table: Optional[Sequence[Entry]], per_node: Optional[Sequence[Sequence[int]]]
) -> Optional[List[Tuple[SavedTensor, ...]]]:
    """The records ``saved_table`` describes; equal entries share one (immutable) record."""
    if table is None or per_node is None:
        return None
    records = [
        SavedTensor(
            attr=a, tensor=n, storage=s, saved_version=sv, version=v, stale=bool(st), freed=bool(fr)
        )
        for a, n, s, sv, v, st, fr in table
    ]
    shared: Dict[Tuple[int, ...], Tuple[SavedTensor, ...]] = {}
    out = []
    for indices in per_node:
        key = tuple(indices)
        kept = shared.get(key)
        if kept is None:
            kept = shared[key] = tuple(records[i] for i in indices)
        out.append(kept)
    return out
