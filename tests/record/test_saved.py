"""Saved tensors and the "backward will fail" predictions, against what PyTorch really does.

A prediction is about one named tensor X. The backward steps compared with
it are the steps whose whole code is ``X.backward(...)``, ``X.sum().backward(...)``
or ``X.mean().backward(...)`` (``BACKWARD`` below): each runs every node behind
X, so a prediction recorded after the step before must agree with the step's
outcome. ``backward_will_fail`` for X: the step raises PyTorch's "modified by
an inplace operation" error; ``backward_freed`` for X: it raises "Trying to
backward through the graph a second time". No prediction: it raises neither.
(``torch.autograd.grad(X, inputs)`` may skip the node a prediction names, so it
is not compared.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortrace
from tensortrace.trace import Trace
import tensortrace.record.helpers
from tensortrace.record.saved import CHANGED, FREED, STALE
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import trace

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
BACKWARD = re.compile(
    r"^\s*([A-Za-z_]\w*)(?:\.sum\(\)|\.mean\(\))?\.backward\((?:retain_graph=True)?\)\s*$"
)
VERSION_ERROR = "modified by an inplace operation"
FREED_ERROR = "Trying to backward through the graph a second time"


def run(steps: List[str]) -> Trace:
    return trace(loads_scenario(yaml.safe_dump({"title": "saved", "steps": steps})), safe=False)


def state(step, name):
    return next(t for t in step.tensors if t.name == name)


def agreement(result: Trace) -> List[Tuple[str, Optional[str], str]]:
    """Each compared backward step: (code, what was predicted, what happened); they must match."""
    out = []
    steps = ([result.setup] if result.setup is not None else []) + list(result.steps)
    for before, step in zip(steps, steps[1:]):
        found = BACKWARD.match(step.code)
        if found is None:
            continue
        kinds = {
            p.kind for p in before.predictions if p.tensor == found.group(1) and p.kind != CHANGED
        }
        message = step.error.message if step.error is not None else ""
        happened = (
            "stale" if VERSION_ERROR in message else "freed" if FREED_ERROR in message else "none"
        )
        if not kinds:
            predicted = "none"
        elif kinds == {STALE}:
            predicted = "stale"
        elif kinds == {FREED}:
            predicted = "freed"
        else:  # both: which one PyTorch meets first depends on the order it runs the nodes
            predicted = happened if happened != "none" else "stale+freed"
        out.append((step.code, predicted, happened))
    return out


# --- facts -------------------------------------------------------------------------


def test_a_changed_saved_input_is_predicted_with_names_versions_storage_and_the_step():
    result = run(
        [
            (
                "w = torch.tensor([1., 2., 3.], requires_grad=True)\nv = torch.tensor([4., 5.,"
                " 6.])\np = w * v"
            ),
            "v.add_(1.)",
            "p.sum().backward()",
        ]
    )
    assert result.steps[0].predictions == ()
    (p,) = result.steps[1].predictions
    v = state(result.steps[1], "v")
    assert (p.kind, p.tensor, p.node, p.saved, p.saved_tensor) == (
        STALE,
        "p",
        "MulBackward0",
        "other",
        "v",
    )
    assert (p.saved_version, p.version, p.storage, p.changed_at_step) == (0, 1, v.storage, 2)
    assert (
        p.message
        == f"backward through `p` will fail: MulBackward0 saved `v` ({v.storage}) at version 0, "
        "and `v` is now at version 1 (changed by `v.add_(1.)` at step 2)."
    )
    assert VERSION_ERROR in result.steps[2].error.message
    assert "is at version 1; expected version 0" in result.steps[2].error.message


def test_the_changing_step_is_the_first_whose_version_passed_the_saved_one():
    result = run(
        [
            # saved at version 1
            "x = torch.ones(3, requires_grad=True)\nv = torch.ones(3)\nv.add_(1.)\np = x * v",
            "q = p * 2",
            "v.mul_(2.)",
            "v.mul_(2.)",
        ]
    )
    assert result.steps[1].predictions == ()
    (p,) = [p for p in result.steps[3].predictions if p.tensor == "p"]
    assert (p.saved_version, p.version, p.changed_at_step) == (1, 3, 3)
    assert {q.tensor for q in result.steps[3].predictions} == {"p", "q"}  # q's graph holds p's node


def test_a_saved_output_is_named_and_its_in_place_change_through_an_alias_is_caught():
    result = run(
        [
            "x = torch.tensor([1., 2., 3.], requires_grad=True)\ny = x.sigmoid()",
            "z = y.detach()\nz.zero_()",
            "y.sum().backward()",
        ]
    )
    (p,) = result.steps[1].predictions
    assert (p.node, p.saved, p.saved_tensor, p.saved_version, p.version) == (
        "SigmoidBackward0",
        "result",
        "y",
        0,
        1,
    )
    assert p.message.endswith("(changed by `z.zero_()` at step 2).")
    assert VERSION_ERROR in result.steps[2].error.message


def _plain_grad(steps: List[str], leaf: str) -> torch.Tensor:
    """The gradient plain PyTorch gives ``leaf`` after running ``steps``."""
    ns = tensortrace.record.helpers.base_namespace()
    for code in steps:
        exec(code, ns)
    return ns[leaf].grad


def test_a_data_write_to_a_saved_tensor_is_predicted_to_give_a_wrong_gradient():
    """``.data`` writes move no version: backward runs on the changed values, as the prediction
    says."""
    steps = [
        "x = torch.tensor([1., 2., 3.], requires_grad=True)",
        "y = x.sigmoid()",
        "y.data.mul_(0.5)",
        "y.sum().backward()",
    ]
    wrong, right = _plain_grad(steps, "x"), _plain_grad(steps[:2] + steps[3:], "x")
    assert not torch.allclose(wrong, right)  # plain PyTorch: no error, another gradient
    result = run(steps)
    assert result.steps[1].predictions == ()
    (p,) = result.steps[2].predictions
    assert (p.kind, p.tensor, p.node, p.saved, p.saved_tensor, p.changed_at_step) == (
        CHANGED,
        "y",
        "SigmoidBackward0",
        "result",
        "y",
        3,
    )
    assert (p.saved_version, p.version) == (0, 0)
    assert (
        p.message
        == "backward through `y` will not fail but will use changed values: SigmoidBackward0 saved"
        " `y` at step 2, and step 3 (`y.data.mul_(0.5)`) changed it without a version bump; the"
        " gradients of `x` will be wrong."
    )
    assert result.steps[3].status == "ok"
    assert state(result.steps[3], "x").grad.data == tuple(wrong.tolist())


def test_a_numpy_write_to_a_saved_tensor_is_predicted_and_names_the_writing_statement():
    steps = [
        (
            "w = torch.tensor([1., 2., 3.], requires_grad=True)\nv = torch.tensor([1., 1., 1.],"
            " requires_grad=True)\nloss = (w * v).sum()"
        ),
        "arr = v.detach().numpy()\nn = 1\narr[0] = 100.\nm = 2",
        "loss.backward()",
    ]
    assert _plain_grad(steps, "w").tolist() == [100.0, 2.0 / 2.0, 1.0]
    result = run(steps)
    (p,) = [p for p in result.steps[1].predictions if p.kind == CHANGED]
    assert (p.tensor, p.node, p.saved_tensor, p.changed_at_step) == ("loss", "MulBackward0", "v", 2)
    assert "step 2 (`arr[0] = 100.`)" in p.message and "(they reach `v`, `w`)" in p.message


def test_a_graph_made_after_a_silent_write_predicts_nothing():
    """The node saved the values as they are after the write: its gradient is right."""
    result = run(
        [
            "x = torch.tensor([1., 2., 3.], requires_grad=True)\nz = x * 1",
            "z.data.mul_(0.5)",
            "y = z.sigmoid()",
            "y.sum().backward()",
        ]
    )
    assert all(step.predictions == () for step in result.steps[:3])


def test_freed_saved_tensors_are_predicted_with_the_step_that_freed_them():
    result = run(
        [
            "x = torch.tensor([1., 2., 3.], requires_grad=True)\ny = (x * x).sum()",
            "y.backward()",
            "z = x * 3",
            "y.backward()",
        ]
    )
    assert result.steps[0].predictions == ()
    for step in result.steps[1:3]:
        (p,) = [p for p in step.predictions if p.tensor == "y"]
        assert (p.kind, p.node, p.changed_at_step) == (FREED, "MulBackward0", 2)
        assert "freed at step 2 (`y.backward()`)" in p.message
    assert FREED_ERROR in result.steps[3].error.message


def test_a_graph_that_saved_nothing_is_never_predicted_to_fail_twice():
    result = run(
        ["x = torch.ones(3, requires_grad=True)\ns = (x + 1).sum()", "s.backward()", "s.backward()"]
    )
    assert all(step.predictions == () for step in result.steps)
    assert result.steps[2].status == "ok"


def test_retain_graph_keeps_the_saved_tensors():
    result = run(
        [
            "x = torch.ones(3, requires_grad=True)\ny = (x * x).sum()",
            "y.backward(retain_graph=True)",
            "y.backward()",
            "y.backward()",
        ]
    )
    assert result.steps[1].predictions == ()
    assert [p.kind for p in result.steps[2].predictions] == [FREED]
    assert FREED_ERROR in result.steps[3].error.message


def test_graph_nodes_record_each_saved_tensor():
    result = tensortrace.loads_scenario(
        yaml.safe_dump(
            {
                "title": "g",
                "steps": [
                    {
                        "run": (
                            "w = torch.ones(2, requires_grad=True)\nv = torch.ones(2)\np = (w *"
                            " v).sin()"
                        ),
                        "graph": ["p"],
                    },
                    {"run": "v.add_(1.)", "graph": ["p"]},
                    {
                        "run": (
                            "p.sum().backward(retain_graph=True)\nw.grad = None\nq ="
                            " p.exp()\nq.sum().backward()"
                        ),
                        "graph": ["q"],
                    },
                ],
            }
        )
    )
    t = trace(result, safe=False)
    (g,) = t.steps[0].graphs
    names = {n.name: n for n in g.nodes}
    (sin_self,) = names["SinBackward0"].saved
    assert (sin_self.attr, sin_self.tensor, sin_self.saved_version, sin_self.stale) == (
        "self",
        None,
        0,
        False,
    )
    (mul_other,) = names["MulBackward0"].saved
    v_storage = state(t.steps[0], "v").storage
    assert (mul_other.attr, mul_other.tensor, mul_other.storage, mul_other.version) == (
        "other",
        "v",
        v_storage,
        0,
    )
    assert names["AccumulateGrad"].saved == ()
    (mul_other,) = {n.name: n for n in t.steps[1].graphs[0].nodes}["MulBackward0"].saved
    assert (mul_other.saved_version, mul_other.version, mul_other.stale) == (0, 1, True)
    # step 3 raised at its first line: nothing after it ran
    assert t.steps[2].status == "raised" and VERSION_ERROR in t.steps[2].error.message


CUSTOM = """
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        r = a * 2
        ctx.save_for_backward(a, r)
        return r

    @staticmethod
    def backward(ctx, g):
        a, r = ctx.saved_tensors
        return g * 2

x = torch.ones(3, requires_grad=True)
y = Double.apply(x * 1)
"""


def test_an_output_a_custom_function_saved_is_checked_through_its_node():
    result = run([CUSTOM, "y.mul_(2)", "y.sum().backward()"])
    assert result.steps[0].predictions == ()
    (p,) = result.steps[1].predictions
    assert (p.node, p.saved, p.saved_version, p.version) == ("DoubleBackward", "tensors[1]", 0, 1)
    assert VERSION_ERROR in result.steps[2].error.message


HOOKED = (
    "calls = []\nx = torch.ones(3, requires_grad=True)\n"
    "with torch.autograd.graph.saved_tensors_hooks(lambda t: (calls.append('pack'), t)[1], "
    "lambda t: (calls.append('unpack'), t)[1]):\n    y = (x * 2).sin()"
)


def test_reading_saved_tensors_never_runs_the_users_hooks():
    ns = {"torch": torch}
    exec(HOOKED + "\nafter_forward = list(calls)\ny.sum().backward()", ns)
    t = run([HOOKED, "print(calls)", "y.sum().backward()\nprint(calls)"])
    assert (
        t.steps[1].stdout == f"{ns['after_forward']}\n"
    )  # the reads after step 1 unpacked nothing
    assert t.steps[2].stdout == f"{ns['calls']}\n"
    assert t.steps[0].predictions == ()  # through hooks the versions are unknown: no claim


def test_old_traces_without_the_new_fields_still_load():
    body = run(
        ["x = torch.ones(2, requires_grad=True)\ny = (x * x).sum()", "y.backward()"]
    ).to_dict()
    for step in body["steps"]:
        step.pop("predictions")
    loaded = Trace.from_dict(body)
    assert all(step.predictions == () for step in loaded.steps)


def test_predictions_round_trip_through_json():
    result = run(["x = torch.ones(2, requires_grad=True)\ny = (x * x).sum()", "y.backward()"])
    assert result.steps[1].predictions
    assert Trace.from_dict(result.to_dict()) == result


# --- agreement with what backward does ----------------------------------------------

START = "x = torch.tensor([1., 2., 3., 4.], requires_grad=True)\na = x * 2"
OPS = [
    "v = a[1:3]",
    "v.mul_(2)",
    "a.add_(1)",
    "with torch.no_grad():\n    a.mul_(3)",
    "with torch.no_grad():\n    x.sub_(0.5)",
    "d = a.detach()",
    "d.zero_()",
    "e = a.data",
    "e.add_(1)",
    "y = a.sigmoid()",
    "y.mul_(2)",
    "b = (y * a).sum()",
    "w = v.exp()",
    "p = a * x",
    "q = x.sin()",
    "with torch.no_grad():\n    q.add_(1)",
    "a = x * 2",
    "x.grad = None",
]
BACKWARDS = [
    "b.backward()",
    "a.sum().backward()",
    "y.sum().backward()",
    "w.sum().backward()",
    "p.sum().backward()",
    "q.sum().backward()",
    "p.sum().backward(retain_graph=True)",
    "y.mean().backward(retain_graph=True)",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS + BACKWARDS * 2), min_size=1, max_size=9))
def test_predictions_agree_with_backward_over_generated_sequences(ops):
    result = run([START] + ops)
    assert result.aborted is None
    for code, predicted, happened in agreement(result):
        assert predicted == happened, (code, ops)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_predictions_agree_with_backward_in_every_bundled_scenario(path):
    for result in tensortrace.trace_variants(tensortrace.load_scenario(path), safe=False):
        for code, predicted, happened in agreement(result):
            assert predicted == happened, (path.name, result.scenario.variant, code)


def test_a_custom_function_after_backward_is_predicted_to_fail_a_second_time():
    """ctx.save_for_backward's tensors are freed by backward; the node's attribute then refuses."""
    fn = (
        "class Sq(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, a):\n       "
        " ctx.save_for_backward(a)\n        return a * a\n    @staticmethod\n    def backward(ctx,"
        " g):\n        (a,) = ctx.saved_tensors\n        return 2 * a * g\np = torch.tensor([1.,"
        " 2.], requires_grad=True)\nq = Sq.apply(p).sum()"
    )
    result = run([fn, "q.backward()", "q.backward()"])
    assert result.steps[0].predictions == ()
    (p,) = result.steps[1].predictions
    assert (p.kind, p.tensor, p.node, p.changed_at_step) == (FREED, "q", "SqBackward", 2)
    assert FREED_ERROR in result.steps[2].error.message


def test_the_culprit_is_the_statement_that_wrote_the_saved_tensor_not_the_last():
    result = run(
        [
            (
                "w = torch.tensor([1., 2., 3.], requires_grad=True)\nv = torch.ones(3)\nd ="
                " v.data\np = w * v"
            ),
            "v.mul_(2.)\nd.add_(1.)\nk = v + 1",
            "p.sum().backward()",
        ]
    )
    (p,) = result.steps[1].predictions
    assert p.message.endswith("(changed by `v.mul_(2.)` at step 2).")
    assert VERSION_ERROR in result.steps[2].error.message


def test_a_changed_saved_view_is_said_to_lie_in_its_base_and_share_its_counter():
    result = run(
        [
            (
                "w = torch.tensor([1., 2., 3.], requires_grad=True)\nx = torch.ones(3,"
                " requires_grad=True)\ny = (w[:2] * x[:2]).sum()"
            ),
            "with torch.no_grad():\n    w.add_(1)",
            "y.backward()",
        ]
    )
    storage = state(result.steps[1], "w").storage
    (p,) = result.steps[1].predictions
    assert f"saved an unnamed tensor ({storage}, in the storage of `w`)" in p.message
    assert "(changed by `w.add_(1)` at step 2)" in p.message
    what = result.steps[2].error.explanation.what
    assert (
        f"an unnamed view that lies in the storage of `w` ({storage}) and shares its version"
        " counter" in what
    )
    assert VERSION_ERROR in result.steps[2].error.message


def test_a_view_written_in_place_is_predicted_to_fail_a_second_backward():
    """CopySlices drops the node it wraps when backward frees the graph; no saved attribute shows
    it."""
    result = run(
        [
            (
                "x = torch.tensor([1., 2., 3.], requires_grad=True)\nw = torch.tensor([2., 2.],"
                " requires_grad=True)\ny = x + 0.\ny[:2].mul_(w)"
            ),
            "y.sum().backward()",
            "n = 1",
            "y.sum().backward()",
        ]
    )
    assert result.steps[0].predictions == ()
    for step in result.steps[1:3]:
        (p,) = [p for p in step.predictions if p.tensor == "y"]
        assert (p.kind, p.node, p.changed_at_step) == (FREED, "CopySlices", 2)
    assert FREED_ERROR in result.steps[3].error.message


def test_a_retained_graph_is_not_predicted_freed():
    result = run(
        [
            "x = torch.tensor([1., 2., 3.], requires_grad=True)\ny = x * 1\ny[:2] = 0.",
            "y.sum().backward(retain_graph=True)",
            "y.sum().backward()",
        ]
    )
    assert result.steps[1].predictions == ()
    assert result.steps[2].status == "ok"
