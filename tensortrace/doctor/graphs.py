"""Walking an autograd graph from its roots: breadth first, bounded, each node once.

A node's ``next_functions`` stay readable after a backward freed its saved
tensors, so these walks work on a freed graph too; a node that raises when
read is passed over. ``AccumulateGrad`` nodes hold the leaves (``variable``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple

import torch

from .places import storage_key

MAX_NODES = 100_000  # nodes one walk visits at most


def walk(starts: Iterable[Any], stop: Any = None) -> Iterator[Tuple[Any, Any]]:
    """(the node it was reached from, node) for every node under ``starts``, not going past
    ``stop`` (nor yielding it)."""
    todo: deque = deque((None, n) for n in starts)
    seen = set()
    while todo and len(seen) < MAX_NODES:
        parent, node = todo.popleft()
        if node is None or node is stop or id(node) in seen:
            continue
        seen.add(id(node))
        yield parent, node
        if isinstance(getattr(node, "variable", None), torch.Tensor):
            continue
        try:
            todo.extend((node, child) for child, _ in node.next_functions)
        except RuntimeError:
            continue


def root_nodes(roots: Iterable[Any]) -> List[Any]:
    return [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def order_and_parents(roots: Iterable[Any]) -> Tuple[List[Any], Dict[int, Any]]:
    """The nodes from the roots' ``grad_fn`` (breadth first) and each one's parent on the way."""
    order: List[Any] = []
    parent: Dict[int, Any] = {}
    for up, node in walk(root_nodes(roots)):
        parent[id(node)] = up
        order.append(node)
    return order, parent


def leaves_under(nodes: Iterable[Any], stop: Any = None) -> List[Any]:
    """The leaf tensors (``AccumulateGrad.variable``) under ``nodes``."""
    found = []
    for _, node in walk(nodes, stop):
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(variable)
    return found


def leaf_keys(node: Any) -> FrozenSet[Optional[int]]:
    """The memory of every leaf (a parameter) under ``node``."""
    return frozenset(storage_key(t) for t in leaves_under([node]))


def sequence_nr(node: Any) -> int:
    try:
        return node._sequence_nr()
    except RuntimeError:
        return -1


def find(roots: Iterable[Any], seq: int) -> Any:
    """The node whose sequence number is ``seq``, under the roots, or None."""
    for _, node in walk(root_nodes(roots)):
        if sequence_nr(node) == seq:
            return node
    return None


__all__ = ["find", "leaf_keys", "leaves_under", "order_and_parents", "sequence_nr", "walk"]
