"""Walk an autograd graph into plain ``GraphNode`` records, iteratively.

The walk follows ``grad_fn.next_functions`` with an explicit stack, so a
100,000-node graph neither hits Python's recursion limit nor takes long. Node
objects are held only for the duration of the walk (identity by ``id`` is
only valid while they are alive) and dropped before returning.

Observing must not disturb: in PyTorch, once a Python object has been made
for an autograd node, it lives as long as the node, and freeing a long chain
of such nodes later recurses once per node and can overflow the C stack (a
crash the untraced program would not have). So only small graphs are walked
in this process; a larger one is walked in a forked copy of the process,
which sends the records back and exits without freeing anything.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from .model import Graph, GraphNode, record_from_dict, record_to_dict

MAX_NODES = 250_000
INLINE_NODES = 2_000  # a chain this long of node objects frees safely


def walk_graph(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], *, max_nodes: int = MAX_NODES) -> Graph:
    """The graph behind a tensor whose ``grad_fn`` is given (None: no graph)."""
    graph = _walk(tensor_name, grad_fn, names_by_id, max_nodes=min(max_nodes, INLINE_NODES))
    if not graph.truncated or max_nodes <= INLINE_NODES:
        return graph
    if hasattr(os, "fork"):
        walked = _walk_in_fork(tensor_name, grad_fn, names_by_id, max_nodes)
        if walked is not None:
            return walked
    return _walk(tensor_name, grad_fn, names_by_id, max_nodes=max_nodes)


def _walk_in_fork(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], max_nodes: int) -> Optional[Graph]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked copy
        try:
            os.close(read_fd)
            graph = _walk(tensor_name, grad_fn, names_by_id, max_nodes=max_nodes)
            data = json.dumps(record_to_dict(graph)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)  # leave without freeing the nodes this copy touched
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not chunks:
        return None
    return record_from_dict(Graph, json.loads(b"".join(chunks)))


def _walk(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], *, max_nodes: int) -> Graph:
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
                name=node_name(node),
                leaf=_leaf_name(node, names_by_id),
                next=tuple(edges.get(node_id, ())),
            )
        )
    del keep, order
    return Graph(tensor=tensor_name, root="N1", nodes=tuple(nodes), truncated=truncated)


def node_name(node: Any) -> str:
    """A grad_fn's name as users see it: "CopyBackwards", not "torch::autograd::CopyBackwards"."""
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
