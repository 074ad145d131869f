"""Autograd graphs as diagrams: Graphviz ``dot`` and Mermaid ``flowchart``.

Every step that recorded graphs gives one cluster per (step, tensor). A node
is labelled with its name (and, for ``AccumulateGrad``, the leaf whose
``.grad`` it fills); an edge goes from a node to each of its ``next`` nodes,
that is in the direction gradients flow, from the tensor back to its leaves.
Output is one line per node and per edge, so a huge graph gives a long file,
never a slow one.

Nothing from the trace is ever an identifier or an attribute of its own: the
names of clusters and nodes are made here from counters (``t1s2g1``: the first
trace, its step at position 2, its first graph; ``t1s2g1n3``: that graph's
third node), and text from the trace only ever appears inside a quoted label,
escaped for its language (``_dot_string``, ``_mermaid_label``). No output
carries a link, a ``URL``/``href`` attribute or a ``click`` statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, NamedTuple, Sequence, Tuple

from ..trace import Graph, Step, Trace
from .compare import group_traces
from .facts import all_steps
from .options import DEFAULT_OPTIONS, RenderOptions
from .outline import NO_GRAD_FN
from .text import saved_tensor_text
from .visible import visible

LEAF_FILL = "#d7ecff"
ROOT_FILL = "#ffe8c2"
NODE_FILL = "#f2f2f2"
NOTE_FILL = "#fff6d6"
STALE_LINE = "#c53030"  # a node whose saved tensor was changed or freed


class _Item(NamedTuple):
    """One diagram element, independent of the syntax that will spell it.

    Its label is already ``visible``.
    """

    # "tensor", "node", "stale" (a node whose saved tensor breaks backward), "leaf", "note",
    # "missing"
    kind: str
    key: str
    label: str


@dataclass(frozen=True)
class _Cluster:
    key: str
    label: str
    items: Tuple[_Item, ...]
    edges: Tuple[Tuple[str, str], ...]


def _graph_cluster(graph: Graph, key: str, label: str) -> _Cluster:
    """Items and edges of one graph; node keys are positions, so ids never need escaping.

    Every label is made ``visible`` here, the one place text from the trace enters a diagram.
    """
    tensor_key = f"{key}t"
    items: List[_Item] = []
    edges: List[Tuple[str, str]] = []
    if graph.root is None:
        items.append(_Item("note", tensor_key, visible(f"{graph.tensor}: {NO_GRAD_FN}")))
        return _Cluster(key, visible(label), tuple(items), ())
    items.append(_Item("tensor", tensor_key, visible(graph.tensor)))
    keys: Dict[str, str] = {node.id: f"{key}n{i}" for i, node in enumerate(graph.nodes, start=1)}
    missing: Dict[str, str] = {}

    def key_of(node_id: str) -> str:
        if node_id in keys:
            return keys[node_id]
        if node_id not in missing:
            missing[node_id] = f"{key}m{len(missing) + 1}"
            items.append(_Item("missing", missing[node_id], visible(f"{node_id} (not recorded)")))
        return missing[node_id]

    edges.append((tensor_key, key_of(graph.root)))
    # by the id of a node's saved tuple (a long chain shares a few)
    saved_labels: Dict[int, Tuple[str, bool]] = {}
    labels: Dict[str, str] = {}  # each distinct label, made visible once
    for node in graph.nodes:
        saved = saved_labels.get(id(node.saved))
        if saved is None:
            saved = saved_labels[id(node.saved)] = (
                "".join("\n" + saved_tensor_text(s) for s in node.saved),
                any(s.stale or s.freed for s in node.saved),
            )
        own = keys[node.id]
        if node.leaf is not None:
            kind, text = "leaf", f"{node.name}\n{node.leaf}.grad{saved[0]}"
        else:
            kind, text = "stale" if saved[1] else "node", node.name + saved[0]
        shown = labels.get(text)
        if shown is None:
            shown = labels[text] = visible(text)
        items.append(_Item(kind, own, shown))
        for child in node.next:
            edges.append((own, keys[child] if child in keys else key_of(child)))
    if graph.truncated:
        items.append(_Item("note", f"{key}x", "… the recording stopped here"))
    return _Cluster(key, visible(label), tuple(items), tuple(edges))


def _clusters(traces: Sequence[Trace], options: RenderOptions) -> Iterator[_Cluster]:
    ordered = [t for group in group_traces(traces) for t in group]
    several = len(ordered) > 1
    for ti, trace in enumerate(ordered, start=1):
        prefix = ""
        if several:
            prefix = trace.scenario.title
            if trace.scenario.variant is not None:
                prefix += f" ({trace.scenario.variant})"
            prefix += " · "
        # Steps are counted here, from 0 for the setup (so for a whole trace the
        # count is the step's index, but it is never read from the trace).
        for si, step in enumerate(all_steps(trace), start=0 if trace.setup is not None else 1):
            if not _wanted(step, options):
                continue
            for gi, graph in enumerate(step.graphs, start=1):
                where = "setup" if step.index == 0 else f"step {step.index}"
                yield _graph_cluster(graph, f"t{ti}s{si}g{gi}", f"{prefix}{where}: {graph.tensor}")


def _wanted(step: Step, options: RenderOptions) -> bool:
    # Every step that drew a graph, setup included, unless steps were chosen.
    return options.steps is None or step.index in options.steps


# --- dot ---------------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """``text`` as a quoted DOT string: backslashes, quotes and line ends escaped.

    Doubling every backslash also keeps Graphviz's own label escapes (``\\N``,
    ``\\G``, ``\\l``) from being read in the text; line ends become ``\\n``.
    """
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


_DOT_STYLE = {
    "tensor": f'shape=ellipse, style=filled, fillcolor="{ROOT_FILL}"',
    "node": f'shape=box, style="rounded,filled", fillcolor="{NODE_FILL}"',
    "leaf": f'shape=box, style="rounded,filled", fillcolor="{LEAF_FILL}"',
    "stale": (
        f'shape=box, style="rounded,filled,bold", color="{STALE_LINE}", fillcolor="{NODE_FILL}"'
    ),
    "note": f'shape=note, style=filled, fillcolor="{NOTE_FILL}"',
    "missing": "shape=box, style=dashed",
}


def render_dot(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """A Graphviz digraph: ``dot -Tsvg`` draws it, the tensor at the bottom, leaves on top."""
    lines = [
        "digraph tensortrace {",
        "  // arrows point where gradients flow: from a tensor's grad_fn back to the leaves",
        "  rankdir=BT;",
        '  graph [fontname="Helvetica", fontsize=11];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [color="#555555", arrowsize=0.7];',
    ]
    empty = True
    for cluster in _clusters(traces, options):
        empty = False
        lines.append(f"  subgraph cluster_{cluster.key} {{")
        lines.append(f"    label={_dot_string(cluster.label)};")
        # each distinct (label, kind) as its attributes, once
        spelled: Dict[Tuple[str, str], str] = {}
        for item in cluster.items:
            attributes = spelled.get((item.label, item.kind))
            if attributes is None:
                attributes = spelled[item.label, item.kind] = (
                    f"[label={_dot_string(item.label)}, {_DOT_STYLE[item.kind]}];"
                )
            lines.append(f"    {item.key} {attributes}")
        for source, target in cluster.edges:
            lines.append(f"    {source} -> {target};")
        lines.append("  }")
    if empty:
        lines.append(f"  empty [label={_dot_string('no step draws a graph')}, shape=plaintext];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- mermaid -----------------------------------------------------------------------


def _mermaid_label(text: str) -> str:
    """``text`` as a quoted Mermaid label: every character that could end the label,
    start markup or a Markdown string is an entity code (``#quot;``), lines are ``<br>``."""
    escaped = (
        str(text)
        .replace("#", "#35;")
        .replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("`", "#96;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("\r", "<br>")
        .replace("\n", "<br>")
    )
    return f'"{escaped}"'


_MERMAID_SHAPE = {
    "tensor": ("([", "])"),
    "node": ("[", "]"),
    "leaf": ("[", "]"),
    "stale": ("[", "]"),
    "note": ("[", "]"),
    "missing": ("[", "]"),
}

_MERMAID_CLASSES = (
    f"  classDef tensor fill:{ROOT_FILL},stroke:#b58100",
    f"  classDef leaf fill:{LEAF_FILL},stroke:#2b6cb0",
    f"  classDef note fill:{NOTE_FILL},stroke:#b58100",
    "  classDef missing stroke-dasharray:4 3",
    f"  classDef stale stroke:{STALE_LINE},stroke-width:2px",
)


def _mermaid_cluster(cluster: _Cluster, indent: str = "  ") -> List[str]:
    lines = [f"{indent}subgraph {cluster.key}[{_mermaid_label(cluster.label)}]"]
    for item in cluster.items:
        left, right = _MERMAID_SHAPE[item.kind]
        lines.append(f"{indent}  {item.key}{left}{_mermaid_label(item.label)}{right}")
    for source, target in cluster.edges:
        lines.append(f"{indent}  {source} --> {target}")
    lines.append(f"{indent}end")
    for kind in ("tensor", "leaf", "stale", "note", "missing"):
        keys = [item.key for item in cluster.items if item.kind == kind]
        if keys:
            lines.append(f"{indent}class {','.join(keys)} {kind}")
    return lines


def render_mermaid(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """A Mermaid flowchart (GitHub draws it in a ```mermaid block)."""
    lines = ["flowchart BT"]
    lines += _MERMAID_CLASSES
    empty = True
    for cluster in _clusters(traces, options):
        empty = False
        lines += _mermaid_cluster(cluster)
    if empty:
        lines.append(f"  empty[{_mermaid_label('no step draws a graph')}]")
    return "\n".join(lines) + "\n"


def mermaid_for_graph(graph: Graph, key: str = "g") -> str:
    """One graph as a small flowchart, for embedding in a Markdown page."""
    cluster = _graph_cluster(graph, key, graph.tensor)
    lines = ["flowchart BT"] + list(_MERMAID_CLASSES)
    for item in cluster.items:
        left, right = _MERMAID_SHAPE[item.kind]
        lines.append(f"  {item.key}{left}{_mermaid_label(item.label)}{right}")
    for source, target in cluster.edges:
        lines.append(f"  {source} --> {target}")
    for kind in ("tensor", "leaf", "stale", "note", "missing"):
        keys = [item.key for item in cluster.items if item.kind == kind]
        if keys:
            lines.append(f"  class {','.join(keys)} {kind}")
    return "\n".join(lines) + "\n"


__all__ = ["mermaid_for_graph", "render_dot", "render_mermaid"]
