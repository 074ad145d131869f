"""One step's observation of autograd: the graphs to draw and the predictions, each node read once.

It sits above ``graph`` (drawing), ``saved`` (what a node saved and what backward will
do with it) and ``unseen`` (what no error will report), so that none of them imports
another's caller: the predictor keeps the run's memory, this module walks and asks it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from ..trace import Prediction, TensorState
from ..trace.collector import paused_gc
from .graph import MAX_NODES, graph_of
from .predict import Predictor
from .scan import scan
from .walk import node_key
from .unseen import released_predictions, silent_predictions, unchecked_predictions


def observe(
    predictor: Predictor,
    index: int,
    drawn: Sequence[Tuple[str, Any]],
    states: Sequence[TensorState],
    objects: Dict[str, Any],
    namer: Any,
    names_by_id: Dict[int, str],
    ops: Optional[Sequence[Any]] = None,
) -> Tuple[Tuple[Any, ...], Tuple[Prediction, ...]]:
    """The graphs to draw (``(name, grad_fn)`` each) and the step's predictions.

    Each node is read once for both. ``ops``: the step's operations, when every one
    was recorded.
    """
    targets = predictor.targets(states, objects)
    if not targets and not drawn:
        # no graph behind any named tensor: nothing saved, nothing to predict
        predictor.freed_since = {}
        return (), ()
    roots = [fn for _, fn in targets]
    reads: Dict[int, Any] = {}  # each node's saved tensors, read once for drawing and predicting
    # each drawn graph's walk, by its root's id: the scan of that root alone reuses it
    walks: Dict[int, Any] = {}
    try:
        # what is made here lives until it returns: collecting meanwhile would find nothing
        with paused_gc():
            walked = [
                graph_of(
                    name,
                    fn,
                    names_by_id,
                    max_nodes=MAX_NODES,
                    namer=namer,
                    reads=reads,
                    walks=walks,
                )
                for name, fn in drawn
            ]
            again = walks.get(id(roots[0])) if len(roots) == 1 else None
            found = scan(roots, namer, MAX_NODES, reads, again) if roots else None
    finally:
        reads.clear()
    if any(stopped for _, stopped in walked) or (found is not None and found["unanchored"]):
        predictor.unanchored = True
    if found is not None:
        first = predictor.node_first
        keys = [node_key(n) for n in found["order"]]
        # reached at the step before too (every walk since a node's first keeps it)
        predictor.reached_before = (
            {key for key in keys if key in first} if predictor.walked == index - 1 else set()
        )
        predictor.walked = index
        predictor.node_first = {key: first.get(key, index) for key in keys}
        slices = [n for n in found["order"] if type(n).__name__ == "CopySlices"]
        found["order"] = None  # keeps no node alive past this call
    else:
        slices = []
    predictions = predictor.predictions(index, targets, found, states)
    if predictor.released:
        predictions += released_predictions(predictor, index, targets, predictions)
    if predictor.silent:
        predictions += silent_predictions(predictor, targets, predictions, namer)
    if slices or predictor.slices:
        predictions += unchecked_predictions(
            predictor, index, targets, predictions, slices, states, objects, ops
        )
    return tuple(graph for graph, _ in walked), predictions
