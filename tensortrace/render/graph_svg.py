"""An autograd graph as an SVG node-and-edge diagram, laid out here, at export time.

The page draws what the console's tree draws (``outline.py``), so a huge graph
is as small here as it is there: a repeated chain is one box (``× 4,998
MulBackward0``), a node reached twice is drawn once and the second path is a
dashed edge back to it, and what is cut for depth or size is one box that
counts it. The layout is a plain layered tree: each outline line is a box on
the row of its depth, in the next free column of that row, over its first
child; the cost is linear in the lines.

Every value that reaches the SVG (node names can come from a scenario's own
``autograd.Function``) is put in with markupsafe's ``Markup.format``, which
escapes it, whatever its type; the SVG has no script and no links,
and its colours come from the page's stylesheet (classes ``tt-g-*``), so
light and dark themes both apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from markupsafe import Markup

from ..trace import Graph
from .outline import NO_GRAD_FN, TRUNCATED, OutlineLine, graph_outline, line_text
from .text import count_text

# Smaller than the console's limits: a page shows many graphs, each one wide.
MAX_DEPTH = 24
MAX_LINES = 160
CHAR_W = 7.2  # px per character of the 12px monospace labels
BOX_H = 26
ROW_H = 58
GAP = 14
PAD = 8
MAX_LABEL = 34  # characters shown in a box; the full text is its tooltip


@dataclass
class _Box:
    key: int
    depth: int  # -1: the tensor itself
    kind: str  # tensor, node, leaf, chain, more, missing, hidden
    label: str
    title: str
    node_id: Optional[str] = None
    children: List[int] = field(default_factory=list)
    x: float = 0.0
    stale: bool = False


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _saved_words(saved: Sequence[Mapping]) -> List[str]:
    words = []
    for item in saved:
        what = f"saved {item.get('attr', '?')}: {item.get('tensor') or 'unnamed'}"
        if item.get("storage"):
            what += f" on {item['storage']}"
        if item.get("saved_version") is not None:
            what += f", saved at version {item['saved_version']}"
            if item.get("version") is not None and item.get("version") != item.get("saved_version"):
                what += f", now {item['version']}"
        if item.get("stale"):
            what += " (stale: backward will fail)"
        if item.get("freed"):
            what += " (freed by backward)"
        words.append(what)
    return words


def _boxes(graph: Graph, saved: Mapping[str, Sequence[Mapping]]):
    """Boxes (in outline order, the tensor first) and the extra edges of nodes reached twice."""
    outline = graph_outline(graph, max_depth=MAX_DEPTH, max_lines=MAX_LINES)
    boxes = [_Box(0, -1, "tensor", _short(graph.tensor), graph.tensor)]
    drawn: Dict[str, int] = {}  # node id -> its box
    parents: Dict[int, int] = {-1: 0}  # depth -> the last box drawn at that depth
    extra: List[tuple] = []  # (from box, to node id)
    for line in outline.lines:
        parent = parents.get(line.depth - 1, 0)
        if line.kind == "ref" and not line.hidden and line.id in drawn:
            extra.append((parent, line.id))
            continue
        kind = _kind(line)
        text = line_text(line)
        notes = _saved_words(saved.get(line.id, ())) if line.id and line.kind == "node" else []
        box = _Box(
            len(boxes), line.depth, kind, _short(text), "\n".join([text, *notes]), node_id=line.id
        )
        box.stale = any(item.get("stale") for item in saved.get(line.id or "", ()))
        if notes:
            box.label = _short(text + " ⧉")
        boxes.append(box)
        boxes[parent].children.append(box.key)
        if line.kind in ("node", "chain") and line.id is not None:
            drawn[line.id] = box.key
        parents[line.depth] = box.key
    return boxes, [(a, drawn[b]) for a, b in extra if b in drawn], outline


def _kind(line: OutlineLine) -> str:
    if line.kind == "node":
        return "leaf" if line.leaf is not None else "node"
    if line.kind == "ref":
        return "hidden"
    return line.kind


def _place(boxes: List[_Box], slot: float) -> None:
    """Columns row by row.

    A box takes the next free column of its row, and never one left of its first child.

    Children are placed before their parent (post-order), so a parent sits over
    its first child and a chain stays straight; every row's columns only grow,
    so no two boxes overlap, and a long chain with a leaf at each node (an RNN's
    graph) is two columns wide, not one per leaf.
    """
    free: Dict[int, int] = {}
    column: Dict[int, int] = {}
    stack = [(0, False)]
    while stack:
        key, done = stack.pop()
        box = boxes[key]
        if not done and box.children:
            stack.append((key, True))
            stack.extend((child, False) for child in reversed(box.children))
            continue
        first = column[box.children[0]] if box.children else 0
        column[key] = max(first, free.get(box.depth, 0))
        free[box.depth] = column[key] + 1
        box.x = column[key] * slot


def _svg(template: str, *values: object) -> Markup:
    """``template`` (written here) with each value escaped into it."""
    return Markup(template).format(*values)


def graph_svg(
    graph: Graph, key: str, saved: Optional[Mapping[str, Sequence[Mapping]]] = None
) -> Markup:
    """One ``<svg>`` for ``graph``; ``key`` makes its ids unique on the page.

    ``saved`` maps a node id to the tensors that node saved for backward
    (the ``saved`` field of a graph node, where the trace has it).
    """
    if graph.root is None:
        return _svg('<p class="tt-graph-none">{}: {}</p>', graph.tensor, NO_GRAD_FN)
    boxes, extra, outline = _boxes(graph, saved or {})
    widest = max(len(b.label) for b in boxes)
    box_w = widest * CHAR_W + 2 * PAD
    slot = box_w + GAP
    _place(boxes, slot)
    width = max(b.x for b in boxes) + box_w + 2 * PAD
    height = (max(b.depth for b in boxes) + 1) * ROW_H + BOX_H + 2 * PAD
    marker = f"tt-arrow-{key}"

    def top(b: _Box):
        return b.x + PAD + box_w / 2, (b.depth + 1) * ROW_H + PAD

    def px(value: float) -> str:
        return f"{value:.0f}"

    parts = [
        _svg(
            '<svg class="tt-graph" role="img" viewBox="0 0 {0} {1}" width="{0}" height="{1}" '
            'xmlns="http://www.w3.org/2000/svg">',
            px(width),
            px(height),
        ),
        _svg("<title>autograd graph of {}</title>", graph.tensor),
        _svg(
            '<defs><marker id="{}" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
            'markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z" class="tt-g-head"/>'
            "</marker></defs>",
            marker,
        ),
    ]
    for box in boxes:
        x1, y1 = top(box)
        for child in box.children:
            x2, y2 = top(boxes[child])
            parts.append(
                _svg(
                    '<path class="tt-g-edge" d="M{},{}L{},{}" marker-end="url(#{})"/>',
                    px(x1),
                    px(y1 + BOX_H),
                    px(x2),
                    px(y2),
                    marker,
                )
            )
    for source, target in extra:
        (x1, y1), (x2, y2) = top(boxes[source]), top(boxes[target])
        bend = x1 + (box_w / 2 + GAP if x2 <= x1 else -box_w / 2 - GAP)
        parts.append(
            _svg(
                '<path class="tt-g-edge tt-g-again" d="M{},{}Q{},{} {},{}" marker-end="url(#{})"/>',
                px(x1),
                px(y1 + BOX_H),
                px(bend),
                px((y1 + y2) / 2 + BOX_H),
                px(x2),
                px(y2),
                marker,
            )
        )
    for box in boxes:
        x, y = top(box)
        stale = " tt-g-stale" if box.stale else ""
        node = _svg(' data-node="{}"', box.node_id) if box.node_id else ""
        parts.append(
            _svg(
                '<g class="tt-g-{}{}"{}><title>{}</title>'
                '<rect x="{}" y="{}" width="{}" height="{}" rx="5"/>'
                '<text x="{}" y="{}" text-anchor="middle">{}</text></g>',
                box.kind,
                stale,
                node,
                box.title,
                px(x - box_w / 2),
                px(y),
                px(box_w),
                BOX_H,
                px(x),
                px(y + BOX_H / 2 + 4),
                box.label,
            )
        )
    parts.append(Markup("</svg>"))
    caption = f"{count_text(outline.total)} nodes" if outline.total != 1 else "1 node"
    if outline.truncated:
        caption += "; " + TRUNCATED
    return Markup("").join(parts) + _svg('<p class="tt-graph-caption">{}</p>', caption)


__all__ = ["graph_svg"]
