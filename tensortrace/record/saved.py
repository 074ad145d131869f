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

After each step, ``Predictor.observe`` walks the graphs behind every named
tensor that requires grad (one walk for all of them, in this process, which
``graph.walk_nodes`` makes safe for any length), and says which backward will
fail and why, naming the step that changed the saved tensor from the versions
recorded after each step.
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..trace import Prediction, SavedTensor, TensorState

STALE = "backward_will_fail"  # a saved tensor's version moved: backward raises the in-place error
FREED = "backward_freed"  # backward freed the saved tensors: a second backward raises
CHANGED = (
    "backward_uses_changed_values"  # values changed without a version bump: backward runs, wrongly
)
UNCHECKED = "backward_unchecked"  # CopySlices hides what its node saved; a tensor changed since
MAX_CODE = 60  # characters of a step's code quoted in a prediction

_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+) instead")
_TWICE = "Trying to backward through the graph a second time"
_IN_PLACE = r"\.\w+_\(|[-+*/@]=|\]\s*=[^=]|\.data\s*=[^=]"  # a line that writes into a tensor

# node type -> ((attribute, raw attribute name, property name), ...): dir() once per kind of node
_ATTRS: Dict[type, Tuple[Tuple[str, str, str], ...]] = {}


def saved_attributes(node: Any) -> Tuple[Tuple[str, str, str], ...]:
    """The names a node's kind saves tensors under: ("self", "_raw_saved_self", "_saved_self"), ..."""
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
        self._made_from: Optional[Tuple[Any, ...]] = (
            objects,
            states,
            registry,
        )  # indexed at the first question:
        # a step whose tensors have no graph asks none

    def _index(self) -> None:
        objects, states, registry = self._made_from
        self._made_from = None
        self.by_id: Dict[int, str] = {}
        self.by_ptr: Dict[
            int, List[Tuple[Tuple[int, ...], Tuple[int, ...], Optional[int], str]]
        ] = {}
        by_name = {s.name: s for s in states}
        for name, obj in objects.items():
            self.by_id.setdefault(id(obj), name)
            state = by_name.get(name)
            if state is not None and state.kind != "ndarray" and state.data_ptr:
                self.by_ptr.setdefault(state.data_ptr, []).append(
                    (state.shape, state.stride, state.version, name)
                )
        spans = sorted(
            (a.ptr, a.ptr + a.nbytes, a.label) for a in registry.live() if a.ptr
        )  # not every label ever made
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
                try:  # the same version too: a .data alias has its own counter, so it is another tensor
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


Item = Tuple[
    str, Any, Any, Optional[str]
]  # (attribute, SavedTensor, node, the node's _saved_ property or None)


def _saved_items(node: Any) -> List[Item]:
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
    """Each saved attribute of ``node`` that can be read: (name, its raw saved value, its ``_saved_`` property)."""
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
    out: List[Entry] = []
    items = _saved_items(node)
    for item in items:
        entry = _read_one(item, namer)
        if entry is not None:
            out.append(entry)
    if any(item[2] is None for item in items):  # a list was saved
        _whole_list(node, items, out)
    return out


def _whole_list(node: Any, items: List[Item], out: List[Entry]) -> None:
    """An output saved in a list (``ctx.save_for_backward(result)``) unpacks only with its node,
    which PyTorch does for the whole list at once: when it is the one element left unknown
    and no other is stale or hooked, unpacking the list tells its versions."""
    unknown = [e for e in out if e[3] is None and not e[6]]
    if (
        len(unknown) != 1
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
    entry = unknown[0]
    try:
        getattr(node, prop)
    except RuntimeError as exc:
        found = _VERSIONS.search(str(exc))
        if found is not None:
            entry[4], entry[3] = int(found.group(1)), int(found.group(2))
            entry[5] = entry[3] != entry[4]
        return
    except Exception:
        return
    entry[3] = entry[4]


def _unpack(item: Item) -> Tuple[Any, Optional[Tuple[str, Optional[int], Optional[int]]]]:
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
    data, problem = _unpack(item)
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
    try:  # the tensor itself, read without the version check (not for hooked ones: that is the hook's object)
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
    """``read_node``, once per node within one observation (``reads`` keeps the node alive meanwhile)."""
    if reads is None:
        return read_node(node, namer)
    got = reads.get(id(node))
    if got is None:
        got = reads[id(node)] = (node, read_node(node, namer))
    return got[1]


def saved_table(
    order: Sequence[Any], namer: Any, reads: Optional[Dict[int, Any]] = None
) -> Tuple[List[Entry], List[List[int]]]:
    """Each node's saved entries as indices into a table of distinct entries (a long chain repeats a few)."""
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


# --- the combined walk behind every named tensor -----------------------------------


def scan(
    roots: Sequence[Any],
    namer: Any,
    max_nodes: int,
    reads: Optional[Dict[int, Any]] = None,
    walked: Any = None,
) -> Dict[str, Any]:
    """For each root ``grad_fn``, the first stale and the first freed saved tensor it reaches.

    One walk gives every root's nodes (shared nodes once; ``walked``, when
    given, is that walk, already made). Then each root is
    searched in walk order, reading a node's saved tensors only while that root
    still lacks an answer, and asking PyTorch's unpacking (whose errors are
    costly) only where the cheap facts allow the answer: a tensor at version 0
    cannot be stale, and one whose data is still there cannot be freed. Nodes
    the drawing walk read (``reads``) are not read again; when it read them all
    and none is stale or freed, no root has an answer. Returns plain data:
    ``{"stale": [...], "freed": [...], "truncated": bool, "unanchored": bool}``, one
    ``[node name, entry, node id]`` or None per root.
    """
    from .walk import walk_nodes

    order, nexts, root_at, truncated, unanchored = (
        walked if walked is not None else walk_nodes(roots, max_nodes)
    )
    if reads and _all_read_and_fine(order, reads):
        return {
            "stale": [None] * len(root_at),
            "freed": [None] * len(root_at),
            "truncated": truncated,
            "unanchored": unanchored,
            "order": order,
        }
    facts = _Facts(order, namer, reads)
    stale_out: List[Any] = []
    freed_out: List[Any] = []
    for at in root_at:
        stale = freed = None
        if at >= 0:
            seen = bytearray(len(order))
            seen[at] = 1
            stack = [at]
            while stack and (stale is None or freed is None):
                i = stack.pop()
                if stale is None:
                    stale = facts.stale(i)
                if freed is None:
                    freed = facts.freed(i)
                for j in reversed(nexts[i]):
                    if not seen[j]:
                        seen[j] = 1
                        stack.append(j)
        stale_out.append(stale)
        freed_out.append(freed)
    return {
        "stale": stale_out,
        "freed": freed_out,
        "truncated": truncated,
        "unanchored": unanchored,
        "order": order,
    }


def _all_read_and_fine(order: Sequence[Any], reads: Dict[int, Any]) -> bool:
    """Every node was read already, and none saved a stale or a freed tensor."""
    for node in order:
        got = reads.get(id(node))
        if got is None:
            return False
        for entry in got[1]:
            if entry[5] or entry[6]:
                return False
    return True


class _Facts:
    """Per walked node, read lazily and once: its first stale and its first freed saved tensor."""

    def __init__(self, order: List[Any], namer: Any, reads: Optional[Dict[int, Any]]) -> None:
        self.order, self.namer, self.reads = order, namer, reads or {}
        self._stale: Dict[int, Any] = {}
        self._freed: Dict[int, Any] = {}
        self._quick_facts: Dict[int, Tuple[bool, bool]] = {}

    def _quick(self, i: int) -> Tuple[bool, bool]:
        """(some saved tensor is past version 0, all are gone), from the cheap facts, once per node.

        Backward frees a node's saved tensors all at once, so a node with any
        still there was not freed; "all gone" may also be a node that saved
        nothing under those names, which only unpacking tells apart.
        """
        got = self._quick_facts.get(i)
        if got is None:
            changed = missing = present = False
            for item in _saved_items(self.order[i]):
                raw = item[1]
                try:
                    if getattr(raw, "unpack_hook", None) is not None:
                        continue
                    data = raw.data
                except Exception:
                    continue
                if data is None:
                    missing = True
                else:
                    present = True
                    if int(data._version) != 0:
                        changed = True
            got = self._quick_facts[i] = (changed, missing and not present)
        return got

    def _cached(self, i: int, column: int) -> Any:
        node = self.order[i]
        got = self.reads.get(id(node))
        if got is None:
            return False
        for entry in got[1]:
            if entry[column]:
                return [_node_name(node), entry, id(node)]
        return None

    def stale(self, i: int) -> Any:
        if i in self._stale:
            return self._stale[i]
        found = self._cached(i, 5)
        if found is False:
            found = None
            if self._quick(i)[0]:  # only a tensor past version 0 can be stale: read the node fully
                for entry in read_node(self.order[i], self.namer):
                    if entry[5]:
                        found = [_node_name(self.order[i]), entry, id(self.order[i])]
                        break
        self._stale[i] = found
        return found

    def freed(self, i: int) -> Any:
        if i in self._freed:
            return self._freed[i]
        found = self._cached(i, 6)
        if found is False:
            found = None
            if self._quick(i)[1]:  # a tensor is gone: freed, or never saved under that name
                for item in _saved_items(self.order[i]):
                    if getattr(item[1], "unpack_hook", None) is not None:
                        continue
                    problem = _unpack(item)[1]
                    if problem is not None and problem[0] == "freed":
                        found = [
                            _node_name(self.order[i]),
                            [item[0], None, None, None, None, False, True],
                            id(self.order[i]),
                        ]
                        break
        self._freed[i] = found
        return found


def _node_name(node: Any) -> str:
    from .walk import node_name

    return node_name(node)


# --- per-step history and the predictions ------------------------------------------


def _writes_to(name: str) -> str:
    """A regex for a line that writes in place into ``name`` (``name.add_(``, ``name[0] =``, ``name +=``)."""
    return (
        rf"(?<![\w.]){re.escape(name)}(?:\.data)?(?:(?:\[[^\]]*\])*\s*(?:\.\w+_\(|[-+*/@]=)"
        rf"|(?:\[[^\]]*\])+\s*=[^=])"
    )


def short_code(code: str, hints: Sequence[str] = ()) -> str:
    """A step's code on one line, bounded: of a longer step, the last line a hint (a regex) finds."""
    lines = [line.strip() for line in code.strip().splitlines() if line.strip()]
    text = "; ".join(lines)
    if len(lines) > 1:
        for hint in hints:  # the first hint that finds a line wins
            picked = [line for line in lines if re.search(hint, line)]
            if picked:
                text = picked[-1]
                break
    return text if len(text) <= MAX_CODE else text[: MAX_CODE - 1] + "\u2026"


class Predictor:
    """Keeps the per-step versions it needs and makes each step's predictions."""

    def __init__(self) -> None:
        self.versions: Dict[Tuple[str, Optional[str]], List[Tuple[int, int]]] = {}
        self.codes: Dict[int, str] = {}
        self.freed_since: Dict[
            int, int
        ] = {}  # id of a node seen freed -> the step it was first seen so
        self.unanchored = False  # a walk stopped at nodes that could not anchor their next ones (graph.UNANCHORED)
        self._last: Dict[int, TensorState] = {}  # the last step's records, by identity
        # (name, storage) -> (version, values) last noted; and the steps that changed the values
        # without moving the version (``.data``, NumPy): autograd cannot see those writes
        self._values: Dict[Tuple[str, Optional[str]], Tuple[int, Any]] = {}
        self.silent: Dict[Tuple[str, Optional[str]], List[Tuple[int, int]]] = {}
        self.node_first: Dict[
            Tuple[int, str], int
        ] = {}  # (id, name) of a walked node -> the step first seen
        self.released: Dict[
            int, str
        ] = {}  # CopySlices nodes a freeing backward ran (flow.FlowRecorder.released)
        self.released_since: Dict[
            int, int
        ] = {}  # such a node -> the step its prediction was first made
        # (id, sequence number) of a CopySlices node walked -> (the step first seen, its base's
        # (name, storage) keys): what it wraps saved tensors no attribute shows (unseen.py)
        self.slices: Dict[Tuple[int, int], Tuple[int, Tuple[Tuple[str, Optional[str]], ...]]] = {}

    def note(self, index: int, code: str, states: Sequence[TensorState]) -> None:
        """Step ``index``'s code, and each tensor's version where it differs from the one last noted
        (``changed_at`` looks for the first step past a version, which is always such a step)."""
        self.codes[index] = code
        versions = self.versions
        last, self._last = (
            self._last,
            {id(s): s for s in states},
        )  # a record kept from the last step (the
        for s in (
            states
        ):  # snapshot reuses the very record) has the name, storage and version noted then
            if last.get(id(s)) is s:
                continue
            version = s.version
            if version is not None:
                self._note_values(index, s)
                seen = versions.get((s.name, s.storage))
                if seen is None:
                    versions[(s.name, s.storage)] = [(index, version)]
                elif seen[-1][1] != version:
                    seen.append((index, version))

    def _note_values(self, index: int, s: TensorState) -> None:
        """Note a step that changed ``s``'s values while its version stayed (a silent write)."""
        key = (s.name, s.storage)
        before = self._values.get(key)
        values = s.values
        if values is None or values.kind == "unavailable":
            return
        self._values[key] = (s.version, values)
        if before is not None and before[0] == s.version and before[1] != values:
            self.silent.setdefault(key, []).append((index, s.version))

    def changed_at(
        self,
        name: Optional[str],
        storage: Optional[str],
        saved_version: int,
        version: int,
        states: Sequence[TensorState],
    ) -> Optional[int]:
        """The first step after which the saved tensor's version was past ``saved_version``."""
        keys = (
            [(name, storage)]
            if name is not None
            else [
                (s.name, s.storage)
                for s in states
                if storage is not None and s.storage == storage and s.version == version
            ]
        )
        steps = []
        for key in keys:
            for index, seen in self.versions.get(key, ()):
                if seen > saved_version:
                    steps.append(index)
                    break
        return min(steps) if steps else None

    @staticmethod
    def targets(states: Sequence[TensorState], objects: Dict[str, Any]) -> List[Tuple[str, Any]]:
        """Each named tensor that requires grad and has a grad_fn (an alias ``b = a`` once)."""
        import torch

        targets: List[Tuple[str, Any]] = []
        for state in states:
            if state.same_as is not None or not state.requires_grad or state.grad_fn is None:
                continue
            obj = objects.get(state.name)
            if not isinstance(obj, torch.Tensor):
                continue
            try:
                fn = obj.grad_fn
            except Exception:
                continue
            if fn is not None:
                targets.append((state.name, fn))
        return targets

    def predictions(
        self,
        index: int,
        targets: Sequence[Tuple[str, Any]],
        found: Optional[Dict[str, Any]],
        states: Sequence[TensorState],
    ) -> Tuple[Prediction, ...]:
        freed_now: Dict[int, int] = {}
        out: List[Prediction] = []
        for (name, _), stale, freed in zip(
            targets, (found or {}).get("stale", ()), (found or {}).get("freed", ())
        ):
            if stale is not None:
                out.append(self._stale(name, stale, states))
            if freed is not None:
                node, entry, node_id = freed
                step = freed_now[node_id] = self.freed_since.get(node_id, index)
                out.append(self._freed(name, node, entry[0], step))
        self.freed_since = freed_now
        return tuple(out)

    def _stale(self, name: str, found: list, states: Sequence[TensorState]) -> Prediction:
        node, (attr, saved, storage, saved_version, version, _, _), _ = found
        step = self.changed_at(saved, storage, saved_version, version, states)
        what = f"`{saved}`" if saved is not None else "an unnamed tensor"
        # an unnamed one at the version of the named tensors on its storage shares their counter (a view)
        partners = [
            s.name
            for s in states
            if saved is None
            and storage
            and s.storage == storage
            and s.version == version
            and s.kind != "ndarray"
        ]
        shared = f", in the storage of {', '.join(f'`{n}`' for n in partners)}" if partners else ""
        where = f" ({storage}{shared})" if storage else ""
        now = f"`{saved}` is" if saved is not None else "it is"
        writers = [saved] if saved is not None else partners
        hints = (
            [_writes_to(n) for n in writers]
            + [_IN_PLACE]
            + [rf"(?<![\w.]){re.escape(n)}(?!\w)" for n in writers]
        )
        when = (
            f" (changed by `{short_code(self.codes.get(step, ''), hints)}` at {_step_name(step)})"
            if step is not None
            else ""
        )
        message = (
            f"backward through `{name}` will fail: {node} saved {what}{where} at version {saved_version}, "
            f"and {now} now at version {version}{when}."
        )
        return Prediction(
            kind=STALE,
            tensor=name,
            node=node,
            saved=attr,
            saved_tensor=saved,
            saved_version=saved_version,
            version=version,
            storage=storage,
            changed_at_step=step,
            message=message,
        )

    def _freed(self, name: str, node: str, attr: str, step: Optional[int]) -> Prediction:
        code = short_code(self.codes.get(step, ""), [r"\bbackward\(", r"\bgrad\("])
        when = f"at {_step_name(step)} (`{code}`)" if step is not None else "by an earlier backward"
        message = (
            f"backward through `{name}` a second time will fail: its saved tensors were freed {when}; "
            f"{node} needs its saved `{attr}`."
        )
        return Prediction(
            kind=FREED, tensor=name, node=node, saved=attr, changed_at_step=step, message=message
        )


def _step_name(index: int) -> str:
    return "setup" if index == 0 else f"step {index}"
