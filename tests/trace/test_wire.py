"""A graph as the pipe carries it (columns) and as ``--format json`` writes it
(one line per node)."""

from __future__ import annotations

import copy
import json

import msgspec
import pytest

from render_fixtures import detach_trace
from tensortrace.trace.events import Decoder, Encoder, EventError, graph_columns, graph_from_wire
from tensortrace.trace import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Graph,
    GraphNode,
    SavedTensor,
    evolve,
    record_to_dict,
)
from tensortrace.render.json import _compact, node_lines, render_json

OTHER = SavedTensor("other", None, "S1", 0, 0, False, False)
ODD = SavedTensor(
    "self", 'x\u202e"\\', None, None, 3, True, False
)  # a bidi control, a quote, a backslash


def _graph() -> Graph:
    nodes = (
        GraphNode("N1", "Mul\x1bBackward0", None, ("N2", "N3"), (OTHER, ODD)),
        GraphNode("N2", "AccumulateGrad", "x\u00e9", (), ()),
        GraphNode("N3", "SinBackward0", None, ("N2",), (OTHER,)),
        GraphNode("N4", "Unreached", None, ("N2", "N2"), (OTHER, ODD)),
    )
    return Graph(tensor="y", root="N1", nodes=nodes, truncated=True)


def _step_with(*graphs: Graph):
    trace = detach_trace()
    step = evolve(trace.steps[0], graphs=graphs)
    return evolve(trace, steps=(step,) + trace.steps[1:])


GRAPHS = [
    _graph(),
    Graph(tensor="none", root=None),
    Graph(tensor="one", root="N1", nodes=(GraphNode("N1", "AccumulateGrad", "a"),)),
    Graph(
        tensor="odd ids", root="A", nodes=(GraphNode("A", "X", None, ("B",)), GraphNode("B", "Y"))
    ),
    Graph(tensor="missing", root="N1", nodes=(GraphNode("N1", "X", None, ("N7",)),)),
]


@pytest.mark.parametrize(
    "graph", GRAPHS, ids=["dag", "no-grad-fn", "one", "other-ids", "missing-next"]
)
def test_a_graph_crosses_the_pipe_unchanged(graph):
    trace = _step_with(graph)
    line = Encoder().encode(trace.steps[0])
    assert Decoder().decode(line.rstrip(b"\n")) == trace.steps[0]
    wire = graph_columns(graph)
    assert graph_from_wire(msgspec.json.decode(msgspec.json.encode(wire), type=type(wire))) == graph


def test_columns_send_each_name_and_saved_record_once():
    columns = record_to_dict(graph_columns(_graph()))["$nodes"]
    assert columns["names"] == ["Mul\x1bBackward0", "AccumulateGrad", "SinBackward0", "Unreached"]
    assert columns["next"] == [[1, 2], [], [1], [1, 1]]
    assert len(columns["saved"]) == 2


def _broken(change):
    columns = record_to_dict(graph_columns(_graph()))
    change(columns["$nodes"])
    return columns


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["next"].__setitem__(0, [1, -1]),  # a negative index would wrap around
        lambda c: c["next"].__setitem__(0, [1, 4]),
        lambda c: c["next"].__setitem__(0, [True]),
        lambda c: c["next"].__setitem__(0, "N2"),
        lambda c: c["name"].__setitem__(0, 9),
        lambda c: c["name"].__setitem__(0, -1),
        lambda c: c["names"].__setitem__(0, 3),
        lambda c: c["leaf"].__setitem__(0, 3),
        lambda c: c["leaf"].pop(),
        lambda c: c["kept"].__setitem__(0, 7),
        lambda c: c["sets"].__setitem__(0, [5]),
        lambda c: c["saved"].__setitem__(0, "x"),
        lambda c: c.pop("next"),
    ],
    ids=[
        "negative",
        "beyond",
        "bool",
        "not-a-list",
        "name-beyond",
        "name-negative",
        "name-not-str",
        "leaf-not-str",
        "short-column",
        "set-beyond",
        "saved-beyond",
        "saved-not-object",
        "no-next",
    ],
)
def test_a_malformed_graph_from_the_child_is_refused(change):
    step = _step_with(_graph()).steps[0]
    data = record_to_dict(evolve(step, tensors=()))
    data["graphs"] = [_broken(change)]
    line = json.dumps({"event": "step", "step": data}).encode()
    with pytest.raises(EventError):
        Decoder().decode(line)


@pytest.mark.parametrize(
    "graph", GRAPHS, ids=["dag", "no-grad-fn", "one", "other-ids", "missing-next"]
)
def test_the_json_document_holds_the_graph_with_one_line_per_node(graph):
    assert node_lines(graph.nodes) == [_compact(record_to_dict(node)) for node in graph.nodes]
    trace = _step_with(graph, copy.copy(graph))
    text = render_json([trace])
    assert json.loads(text) == json.loads(json.dumps(trace.to_dict()))
    both = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "traces": [trace.to_dict(), detach_trace().to_dict()],
    }
    assert json.loads(render_json([trace, detach_trace()])) == json.loads(json.dumps(both))
    lines = [
        json.loads(line.strip().rstrip(","))
        for line in text.splitlines()
        if line.lstrip().startswith('{"id":')
    ]
    assert all(
        lines.count(node) == 2 for node in record_to_dict(graph.nodes)
    )  # the graph and its copy: a line a node


def test_equal_saved_tuples_that_are_not_shared_are_written_alike():
    one, other = (OTHER, ODD), (evolve(OTHER), evolve(ODD))
    nodes = (GraphNode("N1", "A", None, ("N2",), one), GraphNode("N2", "B", None, (), other))
    assert node_lines(nodes) == [_compact(record_to_dict(node)) for node in nodes]
