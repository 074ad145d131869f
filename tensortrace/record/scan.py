"""Which backward will fail, found in one walk behind every named tensor.

After each step the recorder asks, for every named tensor that requires grad,
whether its graph reaches a saved tensor that is stale (changed in place since
it was saved) or freed (a backward already ran through it). Walking each graph
on its own would read a shared node once per tensor; here one walk
(``walk.walk_nodes``) gives every root's nodes, and each node's saved tensors
are read lazily and once (``saved.read_node``), asking PyTorch's costly
unpacking only where the cheap facts allow an answer. It lives apart from
``saved.py``, which reads one node, because it owns the search over many.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .readsaved import NEVER, READS, backward_reads_saved, checkpoint_inputs
from .saved import read_node, saved_items, unpack_saved
from .walk import node_key, node_name, walk_nodes


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
    ``[node name, entry, walk.node_key]`` or None per root (a stale one adds what
    ``readsaved.backward_reads_saved`` says of its node).
    """
    walk = walked if walked is not None else walk_nodes(roots, max_nodes)
    order, nexts, root_at, truncated, unanchored = walk[:5]
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
        self._quick_facts: Dict[int, Tuple[bool, bool, bool]] = {}

    def _quick(self, i: int) -> Tuple[bool, bool, bool]:
        """(some saved tensor is past version 0, all are gone, some is hooked), from the cheap
        facts, once per node.

        Backward frees a node's saved tensors all at once, so a node with any
        still there was not freed; "all gone" may also be a node that saved
        nothing under those names, which only unpacking tells apart.
        """
        got = self._quick_facts.get(i)
        if got is None:
            changed = missing = present = hooked = False
            for item in saved_items(self.order[i]):
                raw = item[1]
                try:
                    if getattr(raw, "unpack_hook", None) is not None:
                        hooked = True
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
            got = self._quick_facts[i] = (changed, missing and not present, hooked)
        return got

    def _cached(self, i: int, column: int) -> Any:
        node = self.order[i]
        got = self.reads.get(id(node))
        if got is None:
            return False
        for entry in got[1]:
            if entry[column]:
                return [node_name(node), entry, node_key(node)]
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
                        found = [node_name(self.order[i]), entry, node_key(self.order[i])]
                        break
        if found is not None:
            # a custom Function's backward that never reads what it saved never checks it
            reads = backward_reads_saved(self.order[i])
            found = None if reads == NEVER else found + [reads]
        elif self._quick(i)[2]:
            # a non-reentrant checkpoint's unpack reads the inputs it saved on a node of its own
            node = self.order[i]
            for entry in checkpoint_inputs(node, self.namer) or ():
                if entry[5]:
                    found = ["checkpoint", entry, node_key(node), READS]
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
                for item in saved_items(self.order[i]):
                    if getattr(item[1], "unpack_hook", None) is not None:
                        continue
                    problem = unpack_saved(item)[1]
                    if problem is not None and problem[0] == "freed":
                        found = [
                            node_name(self.order[i]),
                            [item[0], None, None, None, None, False, True],
                            node_key(self.order[i]),
                        ]
                        break
        self._freed[i] = found
        return found
