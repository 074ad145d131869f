"""An autograd graph laid out as an indented outline, ready to draw as a tree.

The walk is iterative (an explicit stack), so a graph of any depth neither
recurses nor takes more than linear time. Drawing is kept separate (the
console turns the outline into a rich Tree, Markdown into a nested list), and
the outline keeps what is drawn small and shallow:

- a node reached a second time is drawn once, and referenced after that;
- a run of nodes with the same name, each leading to the next, is one line
  (``× 4,998 MulBackward0``), and so is a short pattern repeated
  (``× 2,500 (AddBackward0 → MulBackward0)``);
- past ``max_depth`` levels the rest of a branch is counted, not drawn;
- past ``max_lines`` lines the rest of the graph is counted, not drawn.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..trace import Graph, GraphNode, SavedTensor
from .structs import record
from .text import saved_text

# A run of at least this many repetitions of a pattern of names is drawn as one line.
CHAIN_MIN = 3
# The longest pattern looked for (``AddBackward0 → MulBackward0`` is 2).
MAX_PERIOD = 4
DEFAULT_MAX_DEPTH = 40
DEFAULT_MAX_LINES = 500


@record
class OutlineLine:
    """One line of the outline.

    ``kind`` is ``node`` (a node drawn here), ``chain`` (``count`` repetitions
    of the ``period`` names in ``name``, drawn as one), ``ref`` (a node drawn
    earlier; ``hidden`` when it was counted under a cut branch rather than
    drawn), ``more`` (``count`` nodes not drawn) or ``missing`` (an id the
    recording does not hold).
    """

    depth: int
    kind: str
    name: str = ""
    id: Optional[str] = None
    leaf: Optional[str] = None
    count: int = 0
    shared: bool = False  # the node is reached more than once: its id is worth showing
    hidden: bool = False
    reason: str = ""  # for ``more``: "depth" or "size"
    period: int = 1  # for ``chain``: how many names ``name`` repeats (joined by " → ")
    saved: Tuple[SavedTensor, ...] = ()  # for ``node``: what it saved for backward


@record
class Outline:
    """A graph as outline lines, with the number of nodes reachable from its root."""

    lines: Tuple[OutlineLine, ...]
    total: int  # nodes reachable from the root
    truncated: bool  # the recording itself stopped early


def graph_outline(
    graph: Graph, *, max_depth: int = DEFAULT_MAX_DEPTH, max_lines: int = DEFAULT_MAX_LINES
) -> Outline:
    """The graph from its root back to the leaves, as lines with a depth."""
    if graph.root is None:
        return Outline((), 0, graph.truncated)
    nodes: Dict[str, GraphNode] = {n.id: n for n in graph.nodes}
    indegree = _indegrees(nodes, graph.root)
    status: Dict[str, str] = {}  # id -> "shown" or "hidden"
    lines: List[OutlineLine] = []
    stack: List[Tuple[str, int]] = [(graph.root, 0)]
    max_depth = max(1, max_depth)
    while stack:
        node_id, depth = stack.pop()
        if len(lines) >= max_lines:
            stack.append((node_id, depth))
            break
        node = nodes.get(node_id)
        if node is None:
            lines.append(OutlineLine(depth, "missing", id=node_id))
            continue
        seen = status.get(node_id)
        if seen is not None:
            lines.append(
                OutlineLine(depth, "ref", node.name, node_id, node.leaf, hidden=seen == "hidden")
            )
            continue
        if depth >= max_depth:
            hidden = _hide_branch(nodes, node_id, status)
            if lines and lines[-1].kind == "more" and lines[-1].depth == depth:
                hidden += lines.pop().count  # a sibling cut at the same depth: one line
            lines.append(OutlineLine(depth, "more", count=hidden, reason="depth"))
            continue
        run, period = _repeating_run(nodes, node, status)
        if len(run) >= CHAIN_MIN * period:
            for member in run:
                status[member.id] = "shown"
            pattern = " → ".join(n.name for n in run[:period])
            lines.append(
                OutlineLine(
                    depth, "chain", pattern, node.id, count=len(run) // period, period=period
                )
            )
            last = run[-1]
        else:
            status[node_id] = "shown"
            shared = indegree.get(node_id, 0) > 1
            lines.append(
                OutlineLine(
                    depth, "node", node.name, node_id, node.leaf, shared=shared, saved=node.saved
                )
            )
            last = node
        for child in reversed(last.next):
            stack.append((child, depth + 1))
    if stack:
        left = len(indegree) - len(status)
        if left > 0:
            lines.append(OutlineLine(0, "more", count=left, reason="size"))
    return Outline(tuple(lines), len(indegree), graph.truncated)


def _indegrees(nodes: Dict[str, GraphNode], root: str) -> Dict[str, int]:
    """How many edges lead to each node reachable from the root (the root: 0)."""
    indegree = {root: 0}
    stack = [root]
    while stack:
        node = nodes.get(stack.pop())
        if node is None:
            continue
        for child in node.next:
            if child in indegree:
                indegree[child] += 1
            else:
                indegree[child] = 1
                stack.append(child)
    return {k: v for k, v in indegree.items() if k in nodes}


def _repeating_run(
    nodes: Dict[str, GraphNode], first: GraphNode, status: Dict[str, str]
) -> Tuple[list, int]:
    """The longest run from ``first`` that repeats a pattern of names, and the pattern's length.

    ``x = x * 2`` in a loop gives ``MulBackward0`` over and over (period 1);
    ``x = x * 2 + 1`` gives ``AddBackward0, MulBackward0`` over and over
    (period 2). Every node but the last of the run has a single next. Only a
    few nodes are looked at before a run is found, so a long chain that does
    not repeat costs constant work per node.
    """
    probe = _single_chain(nodes, first, status, MAX_PERIOD * CHAIN_MIN)
    names = [n.name for n in probe]
    for period in range(1, MAX_PERIOD + 1):
        if len(names) < period * CHAIN_MIN:
            break
        if all(names[i] == names[i % period] for i in range(period * CHAIN_MIN)):
            run = _single_chain(nodes, first, status, None, pattern=names[:period])
            cycles = len(run) // period
            return run[: cycles * period], period
    return [first], 1


def _single_chain(
    nodes: Dict[str, GraphNode],
    first: GraphNode,
    status: Dict[str, str],
    limit: Optional[int],
    pattern: Optional[List[str]] = None,
) -> list:
    """``first`` and the not yet drawn nodes after it, each the single next of the one before."""
    chain = [first]
    members = {first.id}
    current = first
    while len(current.next) == 1 and (limit is None or len(chain) < limit):
        following = nodes.get(current.next[0])
        if following is None or following.id in status or following.id in members:
            break
        if pattern is not None and following.name != pattern[len(chain) % len(pattern)]:
            break
        chain.append(following)
        members.add(following.id)
        current = following
    return chain


def _hide_branch(nodes: Dict[str, GraphNode], start: str, status: Dict[str, str]) -> int:
    """Mark every not yet drawn node under ``start`` as hidden; return how many."""
    count = 0
    stack = [start]
    while stack:
        node_id = stack.pop()
        if node_id in status or node_id not in nodes:
            continue
        status[node_id] = "hidden"
        count += 1
        stack.extend(nodes[node_id].next)
    return count


def line_text(line: OutlineLine) -> str:
    """The words of one line, without styling (Markdown and tests use this)."""
    if line.kind == "node":
        text = line.name
        if line.leaf is not None:
            text += f" → {line.leaf}.grad"
        if line.shared:
            text += f" ({line.id})"
        if line.saved:
            text += " · " + saved_text(line.saved)
        return text
    if line.kind == "chain":
        if line.period > 1:
            return f"× {line.count:,} ({line.name})"
        return f"× {line.count:,} {line.name}"
    if line.kind == "ref":
        where = "not drawn: too deep" if line.hidden else "shown above"
        return f"↑ {line.name} ({line.id}, {where})"
    if line.kind == "more":
        nodes = "node" if line.count == 1 else "nodes"
        if line.reason == "depth":
            return f"… {line.count:,} more {nodes} below"
        return f"… {line.count:,} more {nodes} not drawn"
    return f"? {line.id} (not recorded)"


NO_GRAD_FN = "no grad_fn (a leaf, or created without grad)"
TRUNCATED = "the recording of this graph stopped early; nodes past that point are missing"
