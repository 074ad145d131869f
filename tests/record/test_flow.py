"""Where gradients flowed during each backward call, read from node hooks."""

from __future__ import annotations

import torch

from tensortrace.record import flow as flow_module
from tensortrace.record.flow import MAX_FLOW_NODES
from tensortrace.trace import Trace
from tensortrace.record.ops import OpsRecorder
from tensortrace.record.probe import StorageRegistry
from tensortrace.render.ops import flow_lines
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import trace

from conftest import state, step_of


def _trace(text: str, *, safe: bool = True) -> Trace:
    return trace(loads_scenario(text), safe=safe)


def _data(values):
    return None if values is None else values.data


def _node(flow, name):
    return next(n for n in flow.nodes if n.name == name)


CLONE = """
title: clone flow
setup: |
  a = torch.ones(3, requires_grad=True)
steps:
  - run: |
      b = a.clone(); (b * 3).sum().backward()
"""


def test_the_threes_reach_clone_and_go_on_into_a_grad_while_b_grad_stays_none():
    step = step_of(_trace(CLONE), 1)
    (flow,) = step.flow
    assert flow.call == "torch.Tensor.backward"
    assert [n.name for n in flow.nodes] == [
        "SumBackward0",
        "MulBackward0",
        "CloneBackward0",
        "AccumulateGrad",
    ]
    assert flow.roots == ("F1",)
    clone = _node(flow, "CloneBackward0")
    assert [_data(g) for g in clone.grad_in] == [(3.0, 3.0, 3.0)]
    assert [_data(g) for g in clone.grad_out] == [(3.0, 3.0, 3.0)]
    acc = _node(flow, "AccumulateGrad")
    assert (acc.leaf, acc.leaf_grad_before, _data(acc.leaf_grad_after)) == (
        "a",
        None,
        (3.0, 3.0, 3.0),
    )
    assert clone.next == (acc.id,)
    assert all(n.ran for n in flow.nodes)
    assert state(step, "b").grad is None and state(step, "b").retains_grad is False
    assert state(step, "a").grad.data == (3.0, 3.0, 3.0)
    assert flow_lines(flow) == [
        "gradient flow of Tensor.backward:",
        "  1. → SumBackward0",
        "  └─ [1., 1., 1.] → MulBackward0",
        "     ├─ [3., 3., 3.] → CloneBackward0",
        "     │  └─ [3., 3., 3.] → AccumulateGrad → a.grad: None → [3., 3., 3.]",
        "     └─ nothing → (an input that needs no gradient)",
    ]


def test_gradients_accumulate_across_two_backward_calls():
    result = _trace(
        """
        title: twice
        setup: |
          a = torch.ones(2, requires_grad=True)
        steps:
          - run: (a * 2).sum().backward()
          - run: |
              (a * 3).sum().backward()
              torch.autograd.backward([(a * 4).sum()])
        """
    )
    (first,) = step_of(result, 1).flow
    if not _modes_see_autograd_backward():
        # torch 2.10 calls torch.autograd.backward without asking __torch_function__:
        # no mode sees that call, so its flow is not recorded (and nothing made up)
        (second,) = step_of(result, 2).flow
        assert _data(second.nodes[-1].leaf_grad_after) == (5.0, 5.0)
        assert _data(state(step_of(result, 2), "a").grad) == (9.0, 9.0)
        return
    second, third = step_of(result, 2).flow
    before_after = [
        (_data(f.nodes[-1].leaf_grad_before), _data(f.nodes[-1].leaf_grad_after))
        for f in (first, second, third)
    ]
    assert before_after == [(None, (2.0, 2.0)), ((2.0, 2.0), (5.0, 5.0)), ((5.0, 5.0), (9.0, 9.0))]
    assert third.call == "torch.autograd.backward"


def _modes_see_autograd_backward() -> bool:
    """Whether this torch hands torch.autograd.backward to a TorchFunctionMode."""
    from torch.overrides import TorchFunctionMode

    seen = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.ones(1, requires_grad=True)
    with Watch():
        torch.autograd.backward([(x * 1).sum()])
    return torch.autograd.backward in seen


def test_a_detached_branch_receives_nothing():
    step = step_of(
        _trace(
            """
            title: detached
            setup: |
              a = torch.ones(2, requires_grad=True)
            steps:
              - run: |
                  y = (a * 3 + a.detach() * 5).sum()
                  y.backward()
            """
        ),
        1,
    )
    (flow,) = step.flow
    add = _node(flow, "AddBackward0")
    assert (
        add.next[1] is None and add.grad_out[1] is None
    )  # the detached side: no node, no gradient
    assert _data(add.grad_out[0]) == (1.0, 1.0)
    assert _data(_node(flow, "AccumulateGrad").leaf_grad_after) == (3.0, 3.0)
    assert any(
        line.endswith("nothing → (an input that needs no gradient)") for line in flow_lines(flow)
    )


def test_autograd_grad_reaches_no_accumulate_grad_and_leaves_grad_alone():
    step = step_of(
        _trace(
            """
            title: grad
            setup: |
              a = torch.ones(2, requires_grad=True)
            steps:
              - run: g = torch.autograd.grad((a * 2).sum(), [a])
            """
        ),
        1,
    )
    (flow,) = step.flow
    assert flow.call == "torch.autograd.grad"
    acc = _node(flow, "AccumulateGrad")
    assert (acc.ran, acc.leaf, acc.leaf_grad_before, acc.leaf_grad_after) == (
        False,
        "a",
        None,
        None,
    )
    assert _data(_node(flow, "MulBackward0").grad_out[0]) == (2.0, 2.0)
    assert state(step, "g[0]").values.data == (2.0, 2.0) and state(step, "a").grad is None


def test_retain_grad_is_untouched():
    step = step_of(
        _trace(
            """
            title: retain
            setup: |
              a = torch.ones(2, requires_grad=True)
            steps:
              - run: |
                  b = a * 2
                  c = a * 3
                  b.retain_grad()
                  (b * c).sum().backward()
            """
        ),
        1,
    )
    assert (state(step, "b").retains_grad, state(step, "c").retains_grad) == (True, False)
    assert state(step, "b").grad.data == (3.0, 3.0) and state(step, "c").grad is None
    assert state(step, "a").grad.data == (12.0, 12.0)


def test_the_hooks_are_gone_after_the_call(monkeypatch):
    calls = []
    original = flow_module.FlowRecorder._summary

    def counting(self, grads):
        calls.append(len(grads))
        return original(self, grads)

    monkeypatch.setattr(flow_module.FlowRecorder, "_summary", counting)
    a = torch.ones(2, requires_grad=True)
    y = (a.clone() * 2).sum()
    recorder = OpsRecorder({})
    with recorder.modes():
        y.backward(retain_graph=True)
    during = len(calls)
    assert during > 0
    y.backward()  # the same graph again, no recorder: no hook of ours may run
    assert len(calls) == during
    (flow,) = recorder.finish(StorageRegistry(), {})[2]
    assert _data(_node(flow, "AccumulateGrad").leaf_grad_after) == (2.0, 2.0)
    assert a.grad.tolist() == [4.0, 4.0]


def test_a_big_graph_records_its_first_nodes_and_counts_the_rest():
    step = step_of(
        _trace(
            """
            title: chain
            setup: |
              a = torch.ones(2, requires_grad=True)
            steps:
              - run: |
                  y = a
                  for _ in range(300):
                      y = y * 1.0
                  y.sum().backward()
            """
        ),
        1,
    )
    (flow,) = step.flow
    assert len(flow.nodes) == MAX_FLOW_NODES
    assert flow.omitted == 302 - MAX_FLOW_NODES  # SumBackward0, 300 MulBackward0, AccumulateGrad
    assert "" in flow.nodes[-1].next
    assert state(step, "a").grad.data == (1.0, 1.0)


def test_a_loop_of_backward_calls_records_the_first_ones_and_counts_the_rest():
    step = step_of(
        _trace(
            """
            title: loop
            setup: |
              a = torch.ones(2, requires_grad=True)
            steps:
              - run: |
                  for _ in range(25):
                      (a * 1.0).sum().backward()
            """
        ),
        1,
    )
    *recorded, last = step.flow
    assert len(recorded) == flow_module.MAX_FLOWS and all(f.nodes for f in recorded)
    assert (
        last.nodes == ()
        and last.notice
        == f"5 more backward calls in this step; the first {flow_module.MAX_FLOWS} are recorded"
    )
    assert _data(recorded[-1].nodes[-1].leaf_grad_after) == (20.0, 20.0)
    assert state(step, "a").grad.data == (25.0, 25.0)


def test_a_tensor_hook_in_the_flow_is_said_and_its_result_is_what_the_node_received():
    import yaml as _yaml

    from tensortrace.scenario import loads_scenario
    from tensortrace.record.tracer import trace as _trace

    seen = []
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(g.clone()) or g * 10)
    y.sum().backward()
    code = [
        (
            "x = torch.tensor([1., 2.], requires_grad=True)\ny = x * 2\nh = y.register_hook(lambda"
            " g: g * 10)"
        ),
        "y.sum().backward()",
    ]
    result = _trace(loads_scenario(_yaml.safe_dump({"title": "t", "steps": code})), safe=False)
    (flow,) = result.steps[1].flow
    assert "`y` has a hook (register_hook)" in flow.notice
    (mul,) = [n for n in flow.nodes if n.name == "MulBackward0"]
    assert mul.grad_in[0].data == tuple((seen[0] * 10).tolist())
    (acc,) = [n for n in flow.nodes if n.name == "AccumulateGrad"]
    assert acc.leaf_grad_after.data == tuple(x.grad.tolist())


LOOP = """
title: a state carried across iterations
steps:
  - run: |
      W = torch.nn.Parameter(torch.eye(2) * 0.5)
      h = torch.ones(2)
  - run: |
      for i in range(3):
          {detach}h = torch.tanh(W @ h + 1)
          h.sum().backward()
"""


def test_a_state_carried_across_iterations_is_told_to_be_detached_not_retained():
    """The second iteration's backward reaches the first iteration's freed graph through
    ``h``: the fix PyTorch accepts is detaching it, which the explanation says."""
    failing = _trace(LOOP.format(detach=""), safe=False)
    error = failing.steps[1].error
    assert "a second time" in error.message
    assert "a state carried over" in error.explanation.what
    assert "`h` is computed from it" in error.explanation.what
    assert "`h = h.detach()`" in error.explanation.fix
    assert "`retain_graph=True` is not the fix" in error.explanation.fix
    fixed = _trace(LOOP.format(detach="h = h.detach()\n          "), safe=False)
    assert fixed.steps[1].status == "ok"


def test_backward_twice_through_one_graph_keeps_the_retain_graph_reading():
    twice = _trace(
        "title: twice\nsteps:\n  - run: |\n      x = torch.ones(2, requires_grad=True)\n"
        "      y = (x * x).sum()\n      y.backward()\n      y.backward()\n",
        safe=False,
    )
    explanation = twice.steps[0].error.explanation
    assert "carried" not in explanation.what and "retain_graph=True" in explanation.fix
