"""Predictions of what no saved attribute shows: writes that move no version, and CopySlices
nodes a backward already ran.

``saved.py`` predicts from what PyTorch's unpacking of each saved tensor
says. Two failures it cannot see that way: a write through ``.data`` or a
NumPy array changes a saved tensor's values without a version bump (backward
then runs, on the changed values), and a CopySlices node drops the node it
wraps when backward frees the graph (a second backward then raises, though
no attribute shows anything saved). The first comes from the values and
versions recorded after each step, the second from the gradient flow.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..trace import Prediction
from .saved import CHANGED, FREED, STALE, Entry, Predictor, _node_name, _step_name, read_node, short_code


def released_predictions(predictor: Predictor, index: int, targets: Sequence[Tuple[str, Any]],
                         made: Sequence[Prediction]) -> Tuple[Prediction, ...]:
    """Second backwards through a CopySlices node a freeing backward already ran.

    CopySlices (a view written in place) wraps the node of the in-place
    operation; backward drops it, and no attribute shows what it saved, so
    the gradient-flow recording (which saw the node run) tells instead.
    """
    from .walk import MAX_NODES, walk_nodes

    failing = {p.tensor for p in made if p.kind == FREED}
    released = predictor.released
    out: List[Prediction] = []
    alive: Dict[int, str] = {}
    for name, fn in targets:
        for node in walk_nodes([fn], MAX_NODES)[0]:
            node_name = released.get(id(node))
            if node_name is None or _node_name(node) != node_name:
                continue
            alive[id(node)] = node_name
            if name in failing:
                break
            step = predictor.released_since.setdefault(id(node), index)
            code = short_code(predictor.codes.get(step, ""), [r"\bbackward\(", r"\bgrad\("])
            when = f"at {_step_name(step)} (`{code}`)" if step is not None else "by an earlier backward"
            message = (f"backward through `{name}` a second time will fail: its saved tensors were freed {when}; "
                       f"{node_name} no longer holds the in-place operation it wraps.")
            out.append(Prediction(kind=FREED, tensor=name, node=node_name, changed_at_step=step, message=message))
            break
    released.clear()  # forget the dead: a new node may take a dead one's id
    released.update(alive)
    predictor.released_since = {k: v for k, v in predictor.released_since.items() if k in alive}
    return tuple(out)


def silent_predictions(predictor: Predictor, targets: Sequence[Tuple[str, Any]], made: Sequence[Prediction],
                       namer: Any) -> Tuple[Prediction, ...]:
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


def _first_silent(predictor: Predictor, order: Sequence[Any], namer: Any) -> Optional[Tuple[Any, Entry, int, int]]:
    for node in order:
        first = predictor.node_first.get((id(node), type(node).__name__))
        if first is None:
            continue
        for entry in read_node(node, namer):
            attr, saved, storage, saved_version, version, stale, freed = entry
            if saved is None or stale or freed or saved_version is None or saved_version != version:
                continue
            for step, at_version in predictor.silent.get((saved, storage), ()):
                if step > first and at_version == version:
                    return node, entry, first, step
    return None


def _changed(predictor: Predictor, name: str, node: Any, entry: Entry, first: int, step: int, namer: Any) -> Prediction:
    attr, saved, storage, saved_version, version = entry[:5]
    hints = [rf"(?<![\w.]){re.escape(saved)}\.data\b", r"\.numpy\(|\bnp\.|\[.*\]\s*=", rf"(?<![\w.]){re.escape(saved)}(?!\w)"]
    code = short_code(predictor.codes.get(step, ""), hints)
    leaves = _leaf_names(node, namer)
    if len(leaves) == 1:
        wrong = f"the gradients of `{leaves[0]}` will be wrong"
    else:  # which inputs' gradients use the saved tensor depends on the node: say only where they go
        reach = f" (they reach {', '.join(f'`{leaf}`' for leaf in leaves)})" if leaves else ""
        wrong = f"the gradients it computes from `{saved}` will be wrong{reach}"
    message = (f"backward through `{name}` will not fail but will use changed values: {_node_name(node)} saved "
               f"`{saved}` at {_step_name(first)}, and {_step_name(step)} (`{code}`) changed it without a "
               f"version bump; {wrong}.")
    return Prediction(kind=CHANGED, tensor=name, node=_node_name(node), saved=attr, saved_tensor=saved,
                      saved_version=saved_version, version=version, storage=storage,
                      changed_at_step=step, message=message)


def _leaf_names(node: Any, namer: Any, limit: int = 200) -> List[str]:
    """The named leaves whose gradients flow through ``node`` (its AccumulateGrad nodes' variables)."""
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


__all__ = ["released_predictions", "silent_predictions"]
