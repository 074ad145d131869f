"""Saved tensors in graph trees and diagrams, and predictions under steps (no torch needed)."""

from __future__ import annotations


from tensortrace.trace import evolve
from render_fixtures import detach_trace, graph_trace, shared_graph

from tensortrace.trace import Graph, GraphNode, Prediction, SavedTensor
from tensortrace.render import render
from tensortrace.render.options import RenderOptions
from tensortrace.render.outline import graph_outline, line_text
from tensortrace.render.text import saved_text

STALE = Prediction(
    kind="backward_will_fail",
    tensor="p",
    node="MulBackward0",
    saved="other",
    saved_tensor="v",
    saved_version=0,
    version=1,
    storage="S2",
    changed_at_step=1,
    message="backward through `p` will fail: MulBackward0 saved `v` (S2) at version 0, "
    "and `v` is now at version 1 (changed by `v.add_(1.)` at step 1).",
)


def test_saved_text_says_name_storage_versions_and_marks_stale_and_freed():
    assert saved_text(()) == ""
    assert saved_text((SavedTensor("self", "x", "S1", 2, 2),)) == "saved: self = x (S1) v2"
    assert saved_text((SavedTensor("result", None, None, 0, 0),)) == "saved: result = unnamed v0"
    assert (
        saved_text((SavedTensor("other", "v", "S2", 0, 1, stale=True),))
        == "saved: other = v (S2) saved at v0, now v1 ✗ stale"
    )
    assert (
        saved_text((SavedTensor("self", freed=True), SavedTensor("other", freed=True)))
        == "saved: self, other: freed by backward ✗"
    )
    assert saved_text((SavedTensor("self"),)) == "saved: self = unnamed, version unknown"


def test_outline_nodes_carry_what_they_saved_and_chains_do_not():
    lines = graph_outline(shared_graph()).lines
    assert lines[1].saved == shared_graph().nodes[1].saved
    assert "✗ stale" in line_text(lines[2])
    saving = tuple(
        GraphNode(
            f"N{i}",
            "SinBackward0",
            next=(f"N{i + 1}",),
            saved=(SavedTensor("self", None, None, 0, 0),),
        )
        for i in range(1, 10)
    ) + (GraphNode("N10", "AccumulateGrad", leaf="x"),)
    chain = graph_outline(Graph(tensor="y", root="N1", nodes=saving)).lines
    assert chain[0].kind == "chain" and "saved" not in line_text(chain[0])


def test_console_tree_shows_saved_tensors_and_marks_the_stale_one():
    text = render([graph_trace(shared_graph())], "console", RenderOptions(width=200, color=False))
    assert "MulBackward0 · saved: other = y (S3) v0; self = y (S3) v0" in text
    assert (
        "MulBackward0 (N3) · saved: other = b (S2) saved at v0, now v1 ✗ stale; self = a (S1) v0"
        in text
    )


def test_a_prediction_is_said_when_new_and_not_repeated_while_it_holds():
    trace = graph_trace(shared_graph())
    step = evolve(trace.steps[0], predictions=(STALE,))
    again = evolve(step, index=2, code="w = 1", graphs=())
    trace = evolve(trace, steps=(step, again))
    for fmt in ("console", "markdown"):
        text = render([trace], fmt, RenderOptions(width=300, color=False))
        assert text.count("will fail: MulBackward0 saved") == 1, fmt


def test_markdown_and_diagrams_mark_a_node_whose_saved_tensor_breaks_backward():
    markdown = render([detach_trace()], "markdown")
    assert "> ⚠ **Predicted:** backward through `out` a second time will fail" in markdown
    assert '["MulBackward0<br>other: freed by backward ✗"]' in markdown
    mermaid = render([graph_trace(shared_graph())], "mermaid")
    assert "classDef stale" in mermaid
    assert any(
        line.strip().startswith("class ") and line.endswith(" stale")
        for line in mermaid.splitlines()
    )
    dot = render([graph_trace(shared_graph())], "dot")
    assert "saved at v0, now v1 ✗ stale" in dot and 'color="#c53030"' in dot
