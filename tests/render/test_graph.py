"""Autograd graphs: the outline walk, the console tree, Graphviz dot and Mermaid.

Graphs of 50,000 and 100,000 nodes are drawn here too: the walk must stay
iterative and what is drawn must stay shallow, whatever the graph's depth.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from contextlib import contextmanager

import pytest

from render_fixtures import (
    alternating_graph,
    assert_gold,
    chain_graph,
    detach_trace,
    graph_trace,
    irregular_chain_graph,
    ladder_graph,
    shared_graph,
    variant_traces,
    wide_graph,
)
from tensortrace.trace import Graph, GraphNode
from tensortrace.render import RenderOptions, render
from tensortrace.render.diagram import mermaid_for_graph
from tensortrace.render.outline import graph_outline, line_text


def outline_text(graph: Graph, **limits) -> list:
    return ["  " * line.depth + line_text(line) for line in graph_outline(graph, **limits).lines]


def console(graph: Graph, width: int = 80) -> str:
    return render([graph_trace(graph)], "console", RenderOptions(width=width))


@contextmanager
def shallow_stack(room: int = 250):
    """Allow only ``room`` more frames than the caller has: recursion per node would fail."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + room)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


# --- the outline ------------------------------------------------------------------------


def test_a_shared_node_is_drawn_once_then_referenced():
    assert outline_text(shared_graph()) == [
        "SumBackward0",
        "  MulBackward0 · saved: other = y (S3) v0; self = y (S3) v0",
        (
            "    MulBackward0 (N3) · saved: other = b (S2) saved at v0, now v1 ✗ stale; self = a"
            " (S1) v0"
        ),
        "      AccumulateGrad → a.grad",
        "      AccumulateGrad → b.grad",
        "    ↑ MulBackward0 (N3, shown above)",
    ]


def test_a_long_same_name_chain_is_one_line():
    assert outline_text(chain_graph(4998)) == [
        "SumBackward0",
        "  × 4,998 MulBackward0",
        "    AccumulateGrad → x.grad",
    ]


def test_a_repeating_pattern_is_one_line():
    assert outline_text(alternating_graph(5000)) == [
        "× 2,500 (AddBackward0 → MulBackward0)",
        "  AccumulateGrad → x.grad",
    ]


def test_a_short_chain_is_drawn_as_it_is():
    assert outline_text(chain_graph(2)) == [
        "SumBackward0",
        "  MulBackward0",
        "    MulBackward0",
        "      AccumulateGrad → x.grad",
    ]


def test_a_deep_graph_that_does_not_collapse_is_cut_at_the_depth_limit():
    lines = graph_outline(ladder_graph(50_000), max_depth=40).lines
    assert max(line.depth for line in lines) == 40
    cut = [line for line in lines if line.kind == "more"]
    assert len(cut) == 1 and cut[0].reason == "depth"
    drawn = sum(1 for line in lines if line.kind == "node")
    assert drawn + cut[0].count == 1 + 2 * 50_000 + 1


def test_a_wide_graph_is_cut_at_the_line_limit_and_counts_the_rest():
    lines = graph_outline(wide_graph(100_000), max_lines=500).lines
    assert len(lines) == 501
    assert line_text(lines[-1]) == f"… {100_002 - 500:,} more nodes not drawn"


def test_no_grad_fn_and_missing_nodes():
    assert graph_outline(Graph(tensor="a", root=None)).lines == ()
    broken = Graph(tensor="y", root="N1", nodes=(GraphNode("N1", "MulBackward0", next=("N9",)),))
    assert outline_text(broken) == ["MulBackward0", "  ? N9 (not recorded)"]


# --- the console tree ---------------------------------------------------------------------


def test_tree_gold():
    graphs = (
        shared_graph(),
        chain_graph(50_000),
        alternating_graph(50_001),
        irregular_chain_graph(30),
        ladder_graph(1_000),
        wide_graph(3),
        Graph(tensor="a", root=None),
        dataclass_truncated(chain_graph(5)),
    )
    assert_gold("tree_graphs_80.txt", console_many(graphs))


def dataclass_truncated(graph: Graph) -> Graph:
    return Graph(tensor=graph.tensor, root=graph.root, nodes=graph.nodes, truncated=True)


def console_many(graphs) -> str:
    return render([graph_trace(*graphs)], "console", RenderOptions(width=80))


@pytest.mark.parametrize(
    "graph",
    [
        chain_graph(50_000),
        alternating_graph(100_000),
        irregular_chain_graph(100_000),
        ladder_graph(50_000),
        wide_graph(100_000),
    ],
    ids=["chain-50k", "alternating-100k", "irregular-100k", "ladder-50k", "wide-100k"],
)
def test_huge_graphs_draw_without_deep_recursion(graph):
    with shallow_stack():
        text = console(graph)
    assert "graph of y" in text and ("AccumulateGrad" in text or "more nodes below" in text)
    assert len(text.splitlines()) < 600
    assert all(len(line) <= 80 for line in text.splitlines())


def test_the_tree_never_grows_wider_than_the_terminal():
    for width in (40, 60, 80, 120):
        text = console(ladder_graph(5_000), width)
        assert all(len(line) <= width for line in text.splitlines()), width


def test_a_leafs_grad_is_shown_next_to_its_accumulate_grad():
    text = render([detach_trace()], "console", RenderOptions(width=80, steps=frozenset({5})))
    assert "AccumulateGrad → a.grad = [2., 2., 2.]" in text


# --- dot and mermaid -----------------------------------------------------------------------


def test_dot_gold():
    traces = [detach_trace(), graph_trace(shared_graph(), Graph(tensor="a", root=None))]
    assert_gold("graphs.dot", render(traces, "dot"))


def test_mermaid_gold():
    traces = [detach_trace(), graph_trace(shared_graph(), Graph(tensor="a", root=None))]
    assert_gold("graphs.mermaid", render(traces, "mermaid"))


def test_without_graphs_the_diagrams_say_so():
    assert "no step draws a graph" in render(list(variant_traces()), "dot")
    assert "no step draws a graph" in render(list(variant_traces()), "mermaid")


def test_the_steps_option_filters_diagrams_too():
    assert "step 5" not in render([detach_trace()], "dot", RenderOptions(steps=frozenset({1})))


def awkward_graph() -> Graph:
    return Graph(
        tensor='d["k"] \\ <x> #1',
        root="N1",
        nodes=(
            GraphNode("N1", 'Mul"Backward', next=("N2",)),
            GraphNode("N2", "AccumulateGrad", leaf='d["k"]'),
        ),
    )


def test_dot_labels_are_quoted_and_escaped():
    text = render([graph_trace(awkward_graph())], "dot")
    assert r'label="d[\"k\"] \\ <x> #1"' in text
    assert r'label="Mul\"Backward"' in text


def test_mermaid_labels_are_escaped():
    text = mermaid_for_graph(awkward_graph())
    assert 'gt(["d[#quot;k#quot;] \\ #lt;x#gt; #35;1"])' in text
    assert '"' not in text.replace('["', "").replace('"]', "").replace('(["', "").replace('"])', "")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_accepts_the_dot_output():
    text = render(
        [
            detach_trace(),
            graph_trace(shared_graph(), awkward_graph(), Graph(tensor="a", root=None)),
        ],
        "dot",
    )
    done = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "<svg" in done.stdout


def test_huge_graphs_give_output_linear_in_size():
    graph = chain_graph(100_000)
    nodes, edges = len(graph.nodes), sum(len(n.next) for n in graph.nodes)
    for fmt in ("dot", "mermaid"):
        text = render([graph_trace(graph)], fmt)
        assert len(text.splitlines()) <= nodes + edges + 20
        assert len(text) < 120 * (nodes + edges)
