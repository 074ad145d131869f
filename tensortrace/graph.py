"""Walk an autograd graph into plain ``GraphNode`` records, iteratively.

The walk follows ``grad_fn.next_functions`` with an explicit stack, so a
100,000-node graph neither hits Python's recursion limit nor takes long. Node
objects are held only for the duration of the walk (identity by ``id`` is
only valid while they are alive) and dropped before returning.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .model import Graph, GraphNode

MAX_NODES = 250_000


def walk_graph(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], *, max_nodes: int = MAX_NODES) -> Graph:
    """The graph behind a tensor whose ``grad_fn`` is given (None: no graph)."""
    if grad_fn is None:
        return Graph(tensor=tensor_name, root=None)
    ids: Dict[int, str] = {}
    keep: List[Any] = []  # keeps node objects alive so their ids stay unique
    order: List[Any] = []
    truncated = False

    def ident(node: Any) -> str:
        key = id(node)
        if key not in ids:
            ids[key] = f"N{len(ids) + 1}"
            keep.append(node)
            order.append(node)
        return ids[key]

    ident(grad_fn)
    stack = [grad_fn]
    edges: Dict[str, List[str]] = {}
    while stack:
        node = stack.pop()
        node_id = ids[id(node)]
        children: List[str] = []
        for nxt, _ in getattr(node, "next_functions", ()) or ():
            if nxt is None:
                continue
            fresh = id(nxt) not in ids
            if fresh and len(ids) >= max_nodes:
                truncated = True
                continue
            children.append(ident(nxt))
            if fresh:
                stack.append(nxt)
        edges[node_id] = children
    nodes = []
    for node in order:
        node_id = ids[id(node)]
        nodes.append(
            GraphNode(
                id=node_id,
                name=_node_name(node),
                leaf=_leaf_name(node, names_by_id),
                next=tuple(edges.get(node_id, ())),
            )
        )
    del keep, order
    return Graph(tensor=tensor_name, root="N1", nodes=tuple(nodes), truncated=truncated)


def _node_name(node: Any) -> str:
    try:
        name = str(node.name())
    except Exception:
        name = type(node).__name__
    return name.rsplit("::", 1)[-1]  # "torch::autograd::AccumulateGrad" → "AccumulateGrad"


def _leaf_name(node: Any, names_by_id: Dict[int, str]) -> Optional[str]:
    variable = getattr(node, "variable", None)  # AccumulateGrad's leaf tensor
    if variable is None:
        return None
    return names_by_id.get(id(variable), "(unnamed leaf)")
