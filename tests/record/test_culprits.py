"""The step a prediction blames is the one that made the saved tensor stale, through any alias.

Each scenario also runs as plain Python, statement by statement, with a real
backward tried after each one: the first statement after which it fails (or
computes other gradients) is the culprit, and the prediction must name that
statement, never a later one that only renamed or read the tensor.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import yaml

import tensortrace
from tensortrace.record.helpers import base_namespace
from tensortrace.record.tracer import trace
from tensortrace.scenario import loads_scenario
from tensortrace.trace import Trace


def traced(steps: List[str]) -> Trace:
    text = yaml.safe_dump({"title": "culprits", "steps": [{"run": s} for s in steps]})
    return trace(loads_scenario(text), safe=True)


def plain_culprit(steps: List[str], root: str, leaf: str = "x") -> Optional[int]:
    """The 1-based index of the first statement after which a backward from ``root`` fails
    (``root``'s graph as it was when bound), run plainly."""
    ns = base_namespace()
    graph = None
    for index, code in enumerate(steps, 1):
        exec(compile(code, "<plain>", "exec"), ns)
        if graph is None and root in ns:
            graph = ns[root]
        if graph is not None:
            try:
                torch.autograd.grad(graph.sum(), [ns[leaf]], retain_graph=True)
            except RuntimeError as exc:
                assert "modified by an inplace operation" in str(exc)
                return index
    return None


def stale(result: Trace, index: int, tensor: str):
    (found,) = [
        p
        for p in result.steps[index - 1].predictions
        if p.tensor == tensor and p.kind == "backward_will_fail"
    ]
    return found


ALIAS = [
    "x = torch.ones(3, requires_grad=True)",
    "a = x * 1",
    "y = a ** 2",
    "a.add_(1)",
    "b = a",
    "del a",
    "loss = y.sum()",
]


def test_a_write_before_the_tensor_was_renamed_is_blamed_not_the_renaming():
    assert plain_culprit(ALIAS, "y") == 4
    result = traced(ALIAS)
    last = stale(result, 7, "loss")
    assert last.saved_tensor == "b" and last.changed_at_step == 4
    assert "`a.add_(1)` at step 4" in last.message and "b = a" not in last.message


DATA = [
    "x = torch.ones(3, requires_grad=True)",
    "w = x * 1",
    "y = w[:2] ** 2",
    "wd = w.data",
    "wd.add_(1)",
    "z = y * 1",
    "w.add_(1)",
    "loss = z.sum()",
]


def test_the_write_that_moved_the_saved_tensors_counter_is_blamed_not_a_data_alias():
    """``wd = w.data`` shares the memory and has a counter of its own: its write leaves the
    saved view's version alone, though it ends at the same number."""
    assert plain_culprit(DATA, "y") == 7
    result = traced(DATA)
    for index, tensor in ((7, "y"), (8, "loss")):
        found = stale(result, index, tensor)
        assert found.changed_at_step == 7, found.message
        assert "`w.add_(1)` at step 7" in found.message and "wd.add_" not in found.message


def test_without_an_earlier_sighting_of_the_node_no_step_is_guessed():
    """A graph first reachable after its saved tensor went stale: the versions recorded
    under the name start past the saved one, so no step is named."""
    steps = [
        "x = torch.ones(3, requires_grad=True)",
        "a = x * 1",
        "keep = [[[a ** 2]]]",  # three levels down: held, and not recorded
        "a.add_(1)",
        "b = a\ndel a",
        "y = keep[0][0][0]",
    ]
    result = traced(steps)
    found = stale(result, 6, "y")
    assert plain_culprit(steps, "y") == 6  # the root is only bound at step 6 here
    assert found.changed_at_step in (4, None)
    assert "b = a" not in found.message


SILENT = {
    "title": "silent",
    "steps": [
        "x = torch.ones(3, requires_grad=True)",
        "y = x.sigmoid()",
        {"run": "z = y.data\nz.zero_()"},
        "loss = y.sum()",
    ],
}


def test_a_silent_write_quotes_the_statement_that_wrote():
    result = tensortrace.trace(loads_scenario(yaml.safe_dump(SILENT)))
    (changed,) = [
        p for p in result.steps[2].predictions if p.kind == "backward_uses_changed_values"
    ]
    assert "(`z.zero_()`)" in changed.message and "z = y.data" not in changed.message
    # the gradient really is the changed one: plain PyTorch, with and without the write
    ns = base_namespace()
    exec("x = torch.ones(3, requires_grad=True)\ny = x.sigmoid()", ns)
    before = torch.autograd.grad(ns["y"].sum(), ns["x"], retain_graph=True)[0]
    exec("z = y.data\nz.zero_()", ns)
    after = torch.autograd.grad(ns["y"].sum(), ns["x"])[0]
    assert not torch.equal(before, after)


def _loop():
    x = torch.ones(3, requires_grad=True)
    h = x * 1
    y = h**2
    for i in range(4):
        h.add_(1) if i == 3 else h.mul_(1.0) if i < 0 else None
    total = 0
    loss = y.sum()
    return loss, total


def test_a_write_in_a_loop_run_that_was_not_recorded_is_not_blamed_on_the_next_line():
    snooper = tensortrace.snoop(fmt="json", output=None, max_iterations=2)
    loss, _ = snooper(_loop)()
    try:
        loss.backward()
        raise AssertionError("the plain backward should fail")
    except RuntimeError as exc:
        assert "modified by an inplace operation" in str(exc)
    result = snooper.trace
    (total,) = [s for s in result.steps if s.code == "total = 0"]
    found = [p for p in total.predictions if p.kind == "backward_will_fail"]
    assert found
    for p in found:
        assert "total = 0" not in p.message, p.message
        assert "not recorded" in p.message and p.changed_at_step is None


def test_a_base_written_through_a_view_made_in_the_same_step_gets_its_call_out():
    """The step names ``b`` only to take the view; the write goes through ``v``. The op log
    says so, and the base's call-out names the view."""
    from tensortrace.render.facts import aliasing_notes

    steps = ["x = torch.ones(4, requires_grad=True)", "b = x * 1", "v = b[:2]\nv.mul_(2)"]
    ns = base_namespace()
    for code in steps:
        exec(code, ns)
    assert ns["b"].tolist() == [2.0, 2.0, 1.0, 1.0] and ns["b"]._version == 1
    result = traced(steps)
    notes = [n.describe() for n in aliasing_notes(result.steps[1], result.steps[2])]
    assert notes == ["b changed (values and version): it shares S2 with v"]
    # a base written by its own name gets none
    again = traced(steps[:2] + ["v = b[:2]\nb.mul_(2)"])
    assert aliasing_notes(again.steps[1], again.steps[2]) == ()
