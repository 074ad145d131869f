"""Walk an autograd graph's nodes, iteratively, each node anchoring its next nodes.

The walk follows ``grad_fn.next_functions`` with an explicit stack, so a
100,000-node graph neither hits Python's recursion limit nor takes long. The
walk holds node objects only while it runs (identity by ``id`` is only valid
while they are alive); what outlives it is each node's anchor (below).

Observing must not disturb, and reading ``next_functions`` gives every node it
reaches a Python object. Since PyTorch 2.13 that object lives as long as its
node does (it holds the node, and the node keeps it alive while anything else
holds the node), and it changes how the graph is freed: PyTorch frees a chain
of nodes iteratively only while each next node is held by its edge alone;
a node that has a Python object is freed through that object instead, one
nested call per node, so freeing a chain of some 45,000 walked nodes
overflows an 8 MiB C stack (a crash the untraced program would not have).
So each walked node *anchors* its next nodes: its ``metadata`` dictionary (the
one anomaly mode uses, owned by the node) holds them under ``ANCHOR``. Then a
next node's object outlives the edge and goes with the dictionary, after the
node's edges, and Python frees nested dictionaries iteratively (its
"trashcan" defers those more than a few dozen levels deep), so freeing a
walked graph of any length takes a bounded stack. Nothing lives longer than
it did: the anchored nodes were held by the anchoring node's edges anyway.
Where a node cannot anchor (no ``metadata``), the walk stops after
``UNANCHORED_NODES`` such nodes, and says so (``UNANCHORED``).

But ``metadata`` is the user's too (``grad_fn.metadata``), and a key the tool
writes there is one plain PyTorch would not show. A short chain of walked
nodes frees safely through their objects (1,200 nested frees fit a 256 KiB
thread stack, measured; a walk's own graph is then at most ``ANCHOR_PAST``
nodes), so a walk anchors only once it has reached more than ``ANCHOR_PAST``
nodes, and then every node it walked: a graph that small is left exactly as
plain PyTorch leaves it, and one larger keeps freeing in a bounded stack, the
trace saying so (``ANCHORED``).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Sequence, Tuple

from ..trace.collector import paused_gc

MAX_NODES = 250_000
# a chain this long of nodes with Python objects frees safely without anchors
UNANCHORED_NODES = 2_000
# the key in each walked node's metadata: its next node, or a tuple of them
ANCHOR = "tensortrace: next nodes"

#: a walk that reaches more nodes than this anchors every node it walked (the docstring says why)
ANCHOR_PAST = 1_000
ANCHORED = (
    "a graph of more than {n:,} nodes was walked, so each of its nodes holds its next nodes in "
    "its metadata, under the key {key!r}, which plain PyTorch does not put there: freeing a "
    "long chain of walked nodes would otherwise overflow the stack"
)

UNANCHORED = (
    "a graph is drawn (and read for predictions) only up to {n:,} nodes that could not keep "
    "their next nodes for a safe release (PyTorch gave no node metadata): walking on could "
    "make freeing the graph overflow the stack"
)


class Walk(NamedTuple):
    """Every node reachable from some roots, in walk order.

    The list also keeps them alive, so their ids stay unique.
    """

    order: List[Any]
    nexts: List[List[int]]  # each node's next_functions, as indexes into ``order``
    root_at: List[int]  # each root's index (-1: beyond ``max_nodes``)
    truncated: bool  # ``max_nodes`` (or ``UNANCHORED_NODES``) cut the walk
    unanchored: bool  # the walk stopped because too many nodes could not anchor their next nodes
    anchored: bool = False  # the walk passed ``ANCHOR_PAST`` nodes and anchored them all


def next_nodes(node: Any, anchor: bool = False) -> Any:
    """``node.next_functions``; with ``anchor``, once ``node`` anchors them (the module's
    docstring says why).

    For walks other than ``walk_nodes``: one that passes ``ANCHOR_PAST`` nodes anchors
    every node it walked (``anchor_all``). A node without ``metadata`` anchors nothing:
    the caller bounds how many nodes it walks.
    """
    pairs = node.next_functions
    if pairs and anchor:
        _anchor(node, pairs)
    return pairs


def _anchor(node: Any, pairs: Any) -> bool:
    """Anchor ``node``'s next nodes (``pairs``: its next_functions); whether it could."""
    try:
        node.metadata[ANCHOR] = pairs[0][0] if len(pairs) == 1 else tuple(p[0] for p in pairs)
    except Exception:
        return False
    return True


_ANCHORINGS = [0]  # walks that anchored, in this process (``anchorings``)


def anchorings() -> int:
    """How many walks have anchored their nodes so far (a recorder says so once it grows)."""
    return _ANCHORINGS[0]


def anchor_all(nodes: Sequence[Any]) -> int:
    """Anchor the next nodes of each of ``nodes``; how many could not."""
    _ANCHORINGS[0] += 1
    failed = 0
    for node in nodes:
        try:
            pairs = node.next_functions
        except Exception:
            continue
        if pairs and not _anchor(node, pairs):
            failed += 1
    return failed


_SEVERAL = object()  # a node with more than one next node


def walk_nodes(roots: Sequence[Any], max_nodes: int) -> Walk:
    """Every node reachable from ``roots``, iteratively, each once however many paths reach it.

    Each node anchors its next nodes.
    """
    index: Dict[int, int] = {}
    order: List[Any] = []
    nexts: List[Any] = []  # None until the node's next nodes are known
    truncated = stopped = False
    unanchored = 0
    anchoring = False  # past ANCHOR_PAST nodes: every node walked anchors its next nodes
    root_at: List[int] = []
    # the walk allocates only what it keeps until it returns: collecting meanwhile finds nothing
    with paused_gc():
        for root in roots:
            at = index.get(id(root))
            if at is None:
                if len(order) >= max_nodes or stopped:
                    truncated = True
                    root_at.append(-1)
                    continue
                at = index[id(root)] = len(order)
                order.append(root)
                nexts.append(None)
                stack = [at]
                while stack:
                    i = stack.pop()
                    node = order[i]
                    # along a chain, straight on: the same order as pushing the one next
                    # node and popping it
                    while True:
                        try:
                            pairs = node.next_functions
                        except Exception:
                            break
                        if not pairs:
                            break
                        if len(pairs) == 1:
                            nxt = pairs[0][0]
                        elif len(pairs) == 2 and (pairs[0][0] is None or pairs[1][0] is None):
                            # e.g. y * 2: one next node
                            nxt = pairs[1][0] if pairs[0][0] is None else pairs[0][0]
                        else:
                            nxt = _SEVERAL
                        if not anchoring and len(order) > ANCHOR_PAST:
                            # so many nodes: anchor those walked so far, then each as it comes
                            anchoring = True
                            unanchored += anchor_all(
                                [order[k] for k in range(len(order)) if nexts[k] is not None]
                            )
                        if anchoring:
                            try:
                                node.metadata[ANCHOR] = (
                                    nxt if nxt is not _SEVERAL else tuple(p[0] for p in pairs)
                                )
                            except Exception:
                                unanchored += 1
                            if unanchored > UNANCHORED_NODES:
                                truncated = stopped = True
                                stack.clear()
                                break
                        if nxt is not _SEVERAL:
                            if nxt is None:
                                break
                            j = index.get(id(nxt))
                            if j is None:
                                j = len(order)
                                if j >= max_nodes:
                                    truncated = True
                                    break
                                index[id(nxt)] = j
                                order.append(nxt)
                                nexts.append(None)
                                nexts[i] = [j]
                                i, node = j, nxt
                                continue
                            nexts[i] = [j]
                            break
                        children = nexts[i] = []
                        for nxt, _ in pairs:
                            if nxt is None:
                                continue
                            j = index.get(id(nxt))
                            if j is None:
                                if len(order) >= max_nodes:
                                    truncated = True
                                    continue
                                j = index[id(nxt)] = len(order)
                                order.append(nxt)
                                nexts.append(None)
                                stack.append(j)
                            children.append(j)
                        break
            root_at.append(at)
    return Walk(
        order, [n if n is not None else [] for n in nexts], root_at, truncated, stopped, anchoring
    )


def node_name(node: Any) -> str:
    """A grad_fn's name as users see it: "CopyBackwards", not "torch::autograd::CopyBackwards"."""
    try:
        name = str(node.name())
    except Exception:
        name = type(node).__name__
    return name.rsplit("::", 1)[-1]  # "torch::autograd::AccumulateGrad" → "AccumulateGrad"


# AccumulateGrad nodes all carry this sequence number (they are made outside the forward order)
_NO_SEQUENCE = (1 << 64) - 1


def node_key(node: Any) -> Tuple[int, str]:
    """A node's identity from one step to the next: its sequence number and its name.

    ``id`` is no identity across steps: before PyTorch 2.13 a node's Python
    object dies with the last Python reference to it, and the next read of
    ``grad_fn`` makes another, at another address (while the old address may
    go to another node). PyTorch numbers each node it makes, in order, per
    thread; an AccumulateGrad node has no number of its own and keeps its
    ``id`` (negated), which only a walk that holds it relies on.
    """
    try:
        number = int(node._sequence_nr())
    except Exception:
        number = _NO_SEQUENCE
    if number == _NO_SEQUENCE:
        number = -1 - id(node)
    return number, node_name(node)
