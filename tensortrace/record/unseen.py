"""Predictions of what no saved attribute shows: writes that move no version, CopySlices
nodes a backward already ran, and changes to what a CopySlices node's hidden node saved.

``saved.py`` predicts from what PyTorch's unpacking of each saved tensor
says. Three failures it cannot see that way: a write through ``.data`` or a
NumPy array changes a saved tensor's values without a version bump (backward
then runs, on the changed values); a CopySlices node drops the node it
wraps when backward frees the graph (a second backward then raises, though
no attribute shows anything saved); and a tensor that node saved may change
later (backward then raises "modified by an inplace operation"). The first
comes from the values and versions recorded after each step, the second
from the gradient flow. For the third PyTorch gives Python no way in: a
CopySlices node has no ``_saved_*`` attribute, its ``next_functions`` skip
the node it wraps, and ``saved_tensors_hooks`` would turn off the very
version check backward makes. So the tool says, as ``backward_unchecked``,
that backward may fail, naming the tensors that changed since, and never
that it will.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..trace import Prediction
from .predict import CHANGED, FREED, STALE, UNCHECKED, Predictor, short_code, step_name, writes_to
from .saved import Entry, read_node
from .walk import node_key
from .walk import node_name as _node_name


def released_predictions(
    predictor: Predictor, index: int, targets: Sequence[Tuple[str, Any]], made: Sequence[Prediction]
) -> Tuple[Prediction, ...]:
    """Second backwards through a CopySlices node a freeing backward already ran.

    CopySlices (a view written in place) wraps the node of the in-place
    operation; backward drops it, and no attribute shows what it saved, so
    the gradient-flow recording (which saw the node run) tells instead.
    """
    from .walk import MAX_NODES, walk_nodes

    failing = {p.tensor for p in made if p.kind == FREED}
    released = predictor.released
    out: List[Prediction] = []
    alive: Dict[Tuple[int, str], str] = {}
    for name, fn in targets:
        for node in walk_nodes([fn], MAX_NODES)[0]:
            key = node_key(node)
            node_name = released.get(key)
            if node_name is None:
                continue
            alive[key] = node_name
            if name in failing:
                break
            step = predictor.released_since.setdefault(key, index)
            code = short_code(predictor.codes.get(step, ""), [r"\bbackward\(", r"\bgrad\("])
            when = (
                f"at {step_name(step)} (`{code}`)" if step is not None else "by an earlier backward"
            )
            message = (
                f"backward through `{name}` a second time will fail: "
                f"its saved tensors were freed {when}; "
                f"{node_name} no longer holds the in-place operation it wraps."
            )
            out.append(
                Prediction(
                    kind=FREED, tensor=name, node=node_name, changed_at_step=step, message=message
                )
            )
            break
    released.clear()  # forget the dead: a new node may take a dead one's id
    released.update(alive)
    predictor.released_since = {k: v for k, v in predictor.released_since.items() if k in alive}
    return tuple(out)


def silent_predictions(
    predictor: Predictor, targets: Sequence[Tuple[str, Any]], made: Sequence[Prediction], namer: Any
) -> Tuple[Prediction, ...]:
    """Backwards that will run but use values a silent write changed after the node saved them.

    A node saved a named tensor at version v (it still is at v, so backward
    raises nothing), the node was walked at an earlier step than the one whose
    write changed that tensor's values without a version bump: backward
    computes its gradients from the changed values. Only scenarios with such a
    write pay for this walk. A node made and written in the same step is not
    told apart from one made after the write, and predicts nothing.
    """
    from .walk import MAX_NODES, walk_nodes

    failing = {p.tensor for p in made if p.kind == STALE}
    out: List[Prediction] = []
    for name, fn in targets:
        if name in failing:
            continue
        found = _first_silent(predictor, walk_nodes([fn], MAX_NODES)[0], namer)
        if found is not None:
            out.append(_changed(predictor, name, *found, namer))
    return tuple(out)


def _first_silent(
    predictor: Predictor, order: Sequence[Any], namer: Any
) -> Optional[Tuple[Any, Entry, int, int, Optional[bool]]]:
    for node in order:
        first = predictor.node_first.get(node_key(node))
        if first is None:
            continue
        for entry in read_node(node, namer):
            attr, saved, storage, saved_version, version, stale, freed = entry
            if saved is None or stale or freed or saved_version is None or saved_version != version:
                continue
            for step, at_version in predictor.silent.get((saved, storage), ()):
                if step > first and at_version == version:
                    before = predictor.silent_before.get(((saved, storage), step))
                    differ = gradients_differ(node, attr, before)
                    if differ is False:  # the node computes the same gradients: nothing to say
                        continue
                    return node, entry, first, step, differ
    return None


def gradients_differ(node: Any, attr: str, before: Any) -> Optional[bool]:
    """Whether ``node`` computes other gradients from its saved ``attr`` as it is now than from
    its values ``before`` (an exact ``Values`` record); None when that cannot be told.

    PyTorch decides: the node's own backward runs twice on the same gradient
    (not the engine: no hook, no ``.grad``, nothing freed), once on the values
    as they are and once with the old values written back into the saved
    tensor's memory through a ``.data`` alias (its version counter stays),
    then the current values again. Only generated nodes are run this way (a
    custom Function's backward is the user's code), only for a tensor small
    enough to be recorded exactly, and only where the node says what gradient
    it takes (``_input_metadata``).
    """
    import torch

    from ..trace.numbers import decode_number

    if before is None or before.kind != "exact" or hasattr(type(node), "_forward_cls"):
        return None
    try:
        raw = getattr(node, "_raw_saved_" + attr)
        if getattr(raw, "unpack_hook", None) is not None:
            return None
        saved = raw.data
        metadata = node._input_metadata
        old = torch.tensor(_decoded(before.data, decode_number), dtype=saved.dtype)
        if saved is None or old.shape != saved.shape or not metadata:
            return None
        grads = []
        for meta in metadata:
            n = 1
            for size in meta.shape:
                n *= int(size)
            # the same gradient both times, no two elements alike (nor zero)
            grads.append(torch.linspace(1.0, 2.0, n, dtype=meta.dtype).reshape(meta.shape))
        memory = saved.data  # its own version counter: writing it moves none of the node's
        with torch.no_grad():
            now = node(*grads)
            kept = memory.clone()
            try:
                memory.copy_(old)
                then = node(*grads)
            finally:
                memory.copy_(kept)
    except Exception:
        return None
    now = now if isinstance(now, tuple) else (now,)
    then = then if isinstance(then, tuple) else (then,)
    for a, b in zip(now, then):
        if (a is None) != (b is None) or (a is not None and not torch.equal(a, b)):
            return True
    return False


def _decoded(tree: Any, decode: Any) -> Any:
    if isinstance(tree, (list, tuple)):
        return [_decoded(v, decode) for v in tree]
    return decode(tree)


def _changed(
    predictor: Predictor,
    name: str,
    node: Any,
    entry: Entry,
    first: int,
    step: int,
    differ: Optional[bool],
    namer: Any,
) -> Prediction:
    attr, saved, storage, saved_version, version = entry[:5]
    aliases = [saved] + [n for n in predictor.names_on(storage) if n != saved]
    hints = [writes_to(n) for n in aliases] + [  # the line that wrote, through any alias
        rf"(?<![\w.]){re.escape(saved)}\.data\b",
        r"\.numpy\(|\bnp\.|\[.*\]\s*=",
        rf"(?<![\w.]){re.escape(saved)}(?!\w)",
    ]
    code = short_code(predictor.codes.get(step, ""), hints)
    leaves = _leaf_names(node, namer)
    # ``differ`` None: the node could not be run on the old values (too large to have been
    # recorded exactly, a custom Function, a hook)
    will = "will" if differ else "may"
    if len(leaves) == 1:
        wrong = f"the gradients of `{leaves[0]}` {will} be wrong"
    else:
        # which inputs' gradients use the saved tensor depends on the node: say only where they go
        reach = f" (they reach {', '.join(f'`{leaf}`' for leaf in leaves)})" if leaves else ""
        wrong = f"the gradients it computes from `{saved}` {will} be wrong{reach}"
    unseen = predictor.unrecorded_before(step, storage)
    by = (
        f"it changed before {step_name(step)}, in {unseen},"
        if unseen is not None
        else f"{step_name(step)} (`{code}`) changed it"
    )
    message = (
        f"backward through `{name}` will not fail but will use changed values: "
        f"{_node_name(node)} saved "
        f"`{saved}` at {step_name(first)}, and {by} without a version bump; {wrong}."
    )
    return Prediction(
        kind=CHANGED,
        tensor=name,
        node=_node_name(node),
        saved=attr,
        saved_tensor=saved,
        saved_version=saved_version,
        version=version,
        storage=storage,
        changed_at_step=None if unseen is not None else step,
        message=message,
    )


def _leaf_names(node: Any, namer: Any, limit: int = 200) -> List[str]:
    """The named leaves whose gradients flow through ``node``.

    They are the variables of its AccumulateGrad nodes.
    """
    from .walk import next_nodes

    names: List[str] = []
    seen = {id(node)}
    stack = [node]
    while stack and len(seen) < limit:
        current = stack.pop()
        variable = getattr(current, "variable", None)
        if variable is not None:
            leaf = namer(variable)[0]
            if leaf is not None and leaf not in names:
                names.append(leaf)
        for nxt, _ in next_nodes(current):
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return names


Key = Tuple[str, Optional[str]]  # (name, storage label): how Predictor.versions knows a tensor


def unchecked_predictions(
    predictor: Predictor,
    index: int,
    targets: Sequence[Tuple[str, Any]],
    made: Sequence[Prediction],
    slices: Sequence[Any],
    states: Sequence[Any],
    objects: Dict[str, Any],
    ops: Optional[Sequence[Any]] = None,
) -> Tuple[Prediction, ...]:
    """Backwards through a CopySlices node whose hidden node may have saved a tensor changed since.

    CopySlices (a view written in place) keeps the in-place operation's own
    node, whose saved tensors (an argument such as ``w`` in ``v.mul_(w)``,
    or the written view itself, as in ``b[:2].sigmoid_()``) no attribute
    shows. Any named tensor that existed when the node was first seen and
    whose version moved since is one it may have saved: in the step it was
    first seen, a tensor that existed before and moved, or the storage the
    view lies in moving by more than the one write; in a later step, any move.
    Where the step that made the node recorded its ATen operations (``ops``,
    none left out), only tensors on the storages of the operations that wrote
    into the view's storage count: the in-place operation saved nothing else.
    Such a backward is said to be unchecked, never to fail. ``slices`` are
    the CopySlices nodes this step's walk reached.
    """
    from .walk import MAX_NODES, walk_nodes

    known = predictor.slices
    predictor.slices = kept = {}
    for node in slices:
        key = node_key(node)
        got = known.get(key)
        if got is None:
            bases = {name for name, fn in targets if fn is node}
            keys = tuple((s.name, s.storage) for s in states if s.name in bases)
            got = (index, keys, _written_with(ops, keys))
        kept[key] = got
    failing = {p.tensor for p in made if p.kind in (STALE, FREED)}
    moved_by: Dict[Tuple[int, str], List[Tuple[int, Key]]] = {}
    out: List[Prediction] = []
    for name, fn in targets:
        if name in failing:
            continue
        for node in walk_nodes([fn], MAX_NODES)[0] if kept else ():
            key = node_key(node)
            if key not in kept:
                continue
            first, bases, touched = kept[key]
            moved = moved_by.get(key)
            if moved is None:
                moved = moved_by[key] = _moved_since(predictor.versions, first, bases, touched)
            if moved:
                out.append(_unchecked(predictor, name, _node_name(node), first, moved))
                break
    return tuple(out)


def _written_with(ops: Optional[Sequence[Any]], bases: Sequence[Key]) -> Optional[frozenset]:
    """The storages of every ATen operation of the step that wrote into the view's storage
    (its arguments and results): all the in-place operation may have saved. None when the
    step's operations do not tell (not recorded at ATen level, some left out, or none wrote
    there, as for a node first reached in a later step)."""
    storages = {storage for _, storage in bases if storage is not None}
    if not ops or not storages:
        return None
    touched: set = set()
    for op in ops:
        if op.level == "aten" and storages.intersection(op.writes):
            touched.update(op.reads, op.writes, (o for o in op.outputs if o))
    return frozenset(touched) or None


def _moved_since(
    versions: Dict[Key, List[Tuple[int, int]]],
    first: int,
    bases: Sequence[Key],
    touched: Optional[frozenset] = None,
) -> List[Tuple[int, Key]]:
    """(step, key) of each named tensor that existed at step ``first`` and whose version moved
    since, in step order: the tensors the node inside CopySlices may have saved and that changed.

    In step ``first`` itself only the net move is known: the storage the view
    lies in (``bases``'; any tensor's when no named tensor has the node as its
    grad_fn any more) moves once for the write into the view, so more than
    one move counts; any other tensor's move counts. With ``touched``, only
    tensors on those storages count.
    """
    storages = {storage for _, storage in bases if storage is not None}
    out: List[Tuple[int, Key]] = []
    for key, seen in versions.items():
        if seen[0][0] > first:  # named only later
            continue
        if touched is not None and key[1] not in touched:
            continue
        before = 0
        for step, version in seen:
            if step > first:
                out.append((step, key))
                break
            allowed = 1 if not storages or key[1] in storages else 0  # the view's one write
            if step == first and version - before > allowed:
                out.append((step, key))
                break
            before = version
    out.sort()
    return out


def _unchecked(
    predictor: Predictor, name: str, node: str, first: int, moved: List[Tuple[int, Key]]
) -> Prediction:
    step, (saved, storage) = moved[0]
    names = []
    for _, (other, _) in moved:
        if other not in names:
            names.append(other)
    more = f" and {len(names) - 4} more" if len(names) > 4 else ""
    listed = ", ".join(f"`{n}`" for n in names[:4]) + more
    code = short_code(predictor.codes.get(step, ""), [rf"(?<![\w.]){re.escape(saved)}(?!\w)"])
    message = (
        f"backward through `{name}` cannot be checked and may fail: {node} (a view written "
        f"in place, seen at {step_name(first)}) holds the in-place operation's own node, "
        f"whose saved tensors PyTorch does not show, and {listed} changed since (first at "
        f"{step_name(step)}, `{code}`); if that node saved one of them, backward will "
        f'raise "modified by an inplace operation".'
    )
    return Prediction(
        kind=UNCHECKED,
        tensor=name,
        node=node,
        saved_tensor=saved,
        storage=storage,
        changed_at_step=step,
        message=message,
    )


__all__ = ["released_predictions", "silent_predictions", "unchecked_predictions"]
