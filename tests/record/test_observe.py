"""Observation never stops the tracer: a fact PyTorch refuses is recorded with its reason.

Each scenario here is code that runs in plain PyTorch, but where reading
some fact of a tensor raises (a view changed under no_grad, a lazy module's
parameter, a CSR tensor's strides...). The run must reach its last step, and
the refused fact must be recorded as unavailable with PyTorch's own reason,
while every fact PyTorch does give is recorded as it gives it.
"""

from __future__ import annotations

import json
import re
from typing import Any, List

import pytest
import torch
import yaml

from tensortrace.trace import TensorState, Trace
from tensortrace.run.runner import Limits, run_scenario
from tensortrace.scenario import loads_scenario


def run(steps: List[Any], timeout: float = 5.0) -> Trace:
    """Run the steps through the runner (forked child, as the command line does) under --trust."""
    scenario = loads_scenario(yaml.safe_dump({"title": "observation", "steps": steps}))
    (trace,) = run_scenario(scenario, safe=False, limits=Limits(timeout=timeout))
    assert trace.aborted is None, trace.aborted
    assert len(trace.steps) == len(steps)
    assert trace.steps[-1].status == "ok", trace.steps[-1].error
    json.dumps(trace.to_dict())  # every recorded fact is plain JSON
    return trace


def at(trace: Trace, step: int, name: str) -> TensorState:
    for state in trace.steps[step - 1].tensors:
        if state.name == name:
            return state
    raise KeyError(name)


NO_GRAD_VIEW = (
    "A view was created in no_grad mode and its base or another view of its base has been modified"
    " inplace"
)


def test_a_view_made_and_changed_under_no_grad_has_no_grad_fn_to_give():
    trace = run(
        [
            "a = torch.ones(3, requires_grad=True).clone()",
            "with torch.no_grad():\n    v = a[:2]\n    v.mul_(2)",
            "w = v.detach() + 1",
        ]
    )
    v = at(trace, 3, "v")
    assert NO_GRAD_VIEW in v.unavailable_reason("grad_fn")
    assert NO_GRAD_VIEW in v.unavailable_reason("is_leaf")
    assert v.requires_grad is True and v.unavailable_reason("requires_grad") is None
    assert v.version == 1 and v.values.data == (2.0, 2.0)


def test_a_slice_of_a_weight_kept_across_an_sgd_update():
    trace = run(
        [
            "lin = nn.Linear(3, 2)",
            "row = lin.weight[0]",
            "with torch.no_grad():\n    kept = lin.weight[1]",
            "lin(torch.ones(1, 3)).sum().backward()",
            "torch.optim.SGD(lin.parameters(), lr=0.1).step()",
        ],
        timeout=60,
    )  # a first optimizer imports torch._dynamo: seconds on a loaded machine
    row, kept = at(trace, 5, "row"), at(trace, 5, "kept")
    assert row.grad_fn == "AsStridedBackward0" and row.unavailable == ()  # what PyTorch reports
    assert NO_GRAD_VIEW in kept.unavailable_reason("grad_fn")
    assert kept.version == 2  # as plain PyTorch reports after one SGD step


def test_unbind_outputs_changed_under_no_grad():
    trace = run(
        [
            "x = torch.ones(2, 3, requires_grad=True).clone()",
            "parts = x.unbind(0)",
            "with torch.no_grad():\n    parts[0].mul_(2)",
            "n = len(parts)",
        ]
    )
    first = at(trace, 4, "parts[0]")
    # PyTorch's own words: the forward operation's name from 2.13, the node's before
    assert re.search(
        r"Output 0 of Unbind(Backward0)? is a view", first.unavailable_reason("grad_fn")
    )
    assert first.values.data == (2.0, 2.0, 2.0)


def test_a_view_returned_by_a_custom_function():
    trace = run(
        [
            (
                "class Same(torch.autograd.Function):\n"
                "    @staticmethod\n    def forward(ctx, x):\n        return x.view_as(x)\n"
                "    @staticmethod\n    def backward(ctx, g):\n        return g"
            ),
            "x = torch.ones(3, requires_grad=True).clone()",
            "y = Same.apply(x)",
            "with torch.no_grad():\n    x.mul_(2)",
            "n = 1",
        ]
    )
    assert at(trace, 3, "y").grad_fn == "SameBackward"
    assert re.search(
        r"Output 0 of Same(Backward)? is a view", at(trace, 5, "y").unavailable_reason("grad_fn")
    )


def test_a_module_that_never_called_super_init_is_noted_not_fatal():
    trace = run(
        [
            "class Broken(nn.Module):\n    def __init__(self):\n        self.w = torch.ones(2)",
            "m = Broken()",
            "n = 1",
        ]
    )
    assert any(note.startswith("m: its parameters could not be listed") for note in trace.notices)


def test_a_lazy_module_before_and_after_its_first_call():
    trace = run(["lin = nn.LazyLinear(2)", "out = lin(torch.ones(1, 3))"])
    before = at(trace, 1, "lin.weight")
    assert "lazy module" in before.unavailable_reason("shape")
    assert before.values.kind == "unavailable" and "lazy module" in before.values.reason
    after = at(trace, 2, "lin.weight")
    assert after.shape == (2, 3) and after.unavailable == () and after.storage is not None


def test_nested_tensors_strided_and_jagged():
    trace = run(
        [
            "s = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])",
            "j = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)",
        ],
        timeout=60,
    )  # the first jagged tensor imports much of torch: seconds, in plain Python too
    assert "doesn't support sizes" in at(trace, 2, "s").unavailable_reason("shape")
    jagged = at(trace, 2, "j")
    assert "no single size" in jagged.unavailable_reason("shape")
    assert jagged.shape == () and jagged.version == 0


def test_an_inference_tensor_has_no_version_counter():
    trace = run(["with torch.inference_mode():\n    t = torch.ones(3)"])
    t = at(trace, 1, "t")
    assert t.version is None
    assert "Inference tensors do not track version counter" in t.unavailable_reason("version")
    assert t.values.data == (1.0, 1.0, 1.0)


def test_sparse_tensors_record_what_pytorch_refuses():
    trace = run(
        [
            "coo = torch.tensor([[0., 1.], [2., 0.]]).to_sparse()",
            "csr = torch.tensor([[0., 1.], [2., 0.]]).to_sparse_csr()",
        ]
    )
    csr, coo = at(trace, 2, "csr"), at(trace, 2, "coo")
    assert "do not have strides" in csr.unavailable_reason("stride")
    assert "Cannot access storage" in csr.unavailable_reason("storage")
    assert "Cannot access storage" in coo.unavailable_reason("storage")
    assert "Cannot access data pointer" in coo.unavailable_reason("data_ptr")
    assert coo.values.data == ((0.0, 1.0), (2.0, 0.0))


def test_quantized_and_subclass_tensors_are_recorded():
    trace = run(
        [
            "m = torch.empty(3, device='meta')",
            "q = torch.quantize_per_tensor(torch.ones(3), 0.5, 0, torch.quint8)",
            "class Tagged(torch.Tensor):\n    pass",
            "t = torch.ones(2).as_subclass(Tagged)",
        ]
    )
    assert at(trace, 4, "m").values.kind == "unavailable" and at(trace, 4, "m").shape == (3,)
    assert at(trace, 4, "q").values.data == (1.0, 1.0, 1.0)
    assert at(trace, 4, "t").values.data == (1.0, 1.0)


def test_an_unavailable_fact_reads_as_a_question_mark():
    from tensortrace.render.text import fact_text

    trace = run(["with torch.inference_mode():\n    t = torch.ones(3)"])
    t = at(trace, 1, "t")
    assert fact_text(t, "version") == "?"
    assert fact_text(t, "requires_grad") == "False"


def test_the_legend_explains_the_question_mark_when_the_page_shows_one():
    from tensortrace.render import RenderOptions, render

    trace = run(["with torch.inference_mode():\n    t = torch.ones(3)"])
    for fmt in ("console", "markdown"):
        assert "? = PyTorch refused" in render([trace], fmt, RenderOptions(width=200)).replace(
            "? means PyTorch refused", "? = PyTorch refused"
        ), fmt
    plain = run(["t = torch.ones(3)"])
    assert "PyTorch refused" not in render([plain], "console", RenderOptions(width=200))


# --- memory sharing is decided from the allocation ----------------------------------


def test_meta_tensors_never_share_a_storage():
    trace = run(
        [
            "m1 = torch.empty(3, device='meta')",
            "m2 = torch.empty(3, device='meta')",
            "v = m1[1:]",
            {"run": "n = 1", "expect": ["not same_storage(m1, m2)", "same_storage(m1, v)"]},
        ]
    )
    m1, m2, v = at(trace, 4, "m1"), at(trace, 4, "m2"), at(trace, 4, "v")
    assert m1.storage != m2.storage and m1.storage == v.storage
    assert trace.steps[-1].behaved, trace.steps[-1].failures


def test_same_storage_of_meta_tensors_and_empty_views():
    from tensortrace.record.helpers import same_storage
    import torch

    m1, m2 = torch.empty(3, device="meta"), torch.empty(3, device="meta")
    assert not same_storage(m1, m2) and same_storage(m1, m1[1:])
    a = torch.ones(4)
    assert not same_storage(a, a[4:]) and same_storage(a, a[1:])


@pytest.mark.parametrize(
    "make", ["torch.as_tensor(arr[2:])", "torch.from_numpy(torch.as_tensor(arr).numpy()[1:])"]
)
def test_a_tensor_from_a_numpy_slice_shares_the_arrays_label(make):
    pytest.importorskip("numpy")
    trace = run(
        [
            "import numpy as np\narr = np.arange(6.0)",
            f"t = {make}",
            "t[0] = 100.0",
            {"run": "n = 1", "expect": ["same_storage(t, torch.as_tensor(arr))"]},
        ]
    )
    assert trace.steps[-1].behaved, trace.steps[-1].failures
    arr, t = at(trace, 4, "arr"), at(trace, 4, "t")
    assert arr.values.data[2] == 100.0 or arr.values.data[1] == 100.0  # t wrote into arr
    assert t.storage == arr.storage
    assert (
        t.storage_offset == 0
    )  # t's own storage starts where t does; the label is the allocation's


def test_an_empty_view_has_no_label_as_same_storage_says():
    trace = run(
        ["a = torch.ones(4)", "z = a[4:]", {"run": "n = 1", "expect": ["not same_storage(a, z)"]}]
    )
    a, z = at(trace, 3, "a"), at(trace, 3, "z")
    assert a.storage == "S1" and z.storage is None
    assert [s.label for s in trace.storages] == ["S1"]


# --- the explanation names a tensor only when identity proves it ---------------------


def test_an_unnamed_changed_intermediate_is_not_blamed_on_a_lookalike():
    trace = run(
        [
            "x = torch.ones(3, requires_grad=True)",
            # shape [3], version 1, made by exp
            "k = (x * 2).exp()\nwith torch.no_grad():\n    k[0:0].add_(1)",
            {"run": "y = x.exp().add_(1).sum()\ny.backward()", "raises": "RuntimeError"},
            "n = 1",
        ]
    )
    assert at(trace, 3, "k").version == 1 and at(trace, 3, "k").grad_fn == "ExpBackward0"
    what = trace.steps[2].error.explanation.what
    assert "`k`" not in what
    assert "unnamed intermediate, the output of `Exp`" in what


def test_the_changed_saved_tensor_is_named_and_its_lookalike_is_not():
    trace = run(
        [
            "x = torch.ones(3, requires_grad=True)",
            "h = x.sigmoid()\nd = x.sigmoid()\nout = (h * h).sum()",
            "with torch.no_grad():\n    h.mul_(2)\n    d.mul_(2)",
            {"run": "out.backward()", "raises": "RuntimeError"},
            "n = 1",
        ]
    )
    what = trace.steps[3].error.explanation.what
    assert "In this scenario that is `h` (storage S2)" in what and "`d`" not in what


# --- large tensors cost what their memory costs --------------------------------------


def test_expanded_tensors_are_summarised_from_their_storage():
    trace = run(["x = torch.ones(1).expand(10**12)", "z = torch.zeros(1).expand(2**31)"])
    x, z = at(trace, 2, "x").values.summary, at(trace, 2, "z").values.summary
    assert (x.numel, x.min, x.max, x.mean, x.std) == (10**12, 1.0, 1.0, 1.0, 0.0)
    assert (z.numel, z.min, z.mean, z.nan_count) == (2**31, 0.0, 0.0, 0)


def test_summaries_of_expanded_and_transposed_views_equal_those_of_copies():
    import torch
    from tensortrace.record.probe import tensor_values

    base = torch.tensor([[0.0, float("nan"), 2.0], [3.0, float("inf"), 5.0]])
    view = base[:, None, :].expand(2, 1000, 3)
    got, want = tensor_values(view).summary, tensor_values(view.contiguous()).summary
    assert (got.numel, got.min, got.max, got.nan_count, got.inf_count, got.head) == (
        want.numel,
        want.min,
        want.max,
        want.nan_count,
        want.inf_count,
        want.head,
    )
    assert got.mean == pytest.approx(want.mean) and got.std == pytest.approx(want.std)
    a = torch.randn(300, 400)
    t, c = tensor_values(a.t()).summary, tensor_values(a.t().contiguous()).summary
    assert t.head == c.head and (t.min, t.max) == (c.min, c.max)
    assert t.mean == pytest.approx(c.mean) and t.std == pytest.approx(c.std)


def test_a_base_and_its_transpose_are_read_once_per_step(monkeypatch):
    from tensortrace.record import values as probe_values
    from tensortrace.record.tracer import trace

    passes = []
    real = probe_values._moments
    monkeypatch.setattr(probe_values, "_moments", lambda t: passes.append(t.numel()) or real(t))
    scenario = loads_scenario(
        yaml.safe_dump({"title": "t", "steps": ["a = torch.randn(300, 400)", "b = a.t()"]})
    )
    result = trace(scenario, safe=False)
    assert result.steps[1].status == "ok"
    # one pass at step 1 (a); at step 2 a is unchanged and b reads the same memory, proven by its
    # fingerprint
    assert passes == [120000]


def test_an_exception_whose_str_raises_is_recorded_as_plain_python_prints_it():
    trace = run(
        [
            "class Odd(Exception):\n    def __str__(self):\n        raise ValueError('no')",
            {"run": "raise Odd()", "raises": "Odd"},
            "n = 1",
        ]
    )
    assert trace.steps[1].error.message == "<exception str() failed>"


def test_no_name_is_given_when_a_named_and_an_unnamed_saved_tensor_both_changed():
    trace = run(
        [
            "x = torch.ones(3, requires_grad=True)",
            "h = x.sigmoid()",
            "with torch.no_grad():\n    h.mul_(2)",
            {"run": "(h * x.exp().add_(1)).sum().backward()", "raises": "RuntimeError"},
            "n = 1",
        ]
    )
    assert "In this scenario" not in trace.steps[3].error.explanation.what


def test_of_proven_aliases_the_tensor_the_operation_made_is_named():
    trace = run(
        [
            "x = torch.tensor([1., 2., 3.], requires_grad=True)\ny = x.sigmoid()",
            "z = y.detach()\nz.zero_()",
            {"run": "y.sum().backward()", "raises": "RuntimeError"},
            "n = 1",
        ]
    )
    assert "In this scenario that is `y` (storage S2)" in trace.steps[2].error.explanation.what


SWAP = [
    "g = torch.ones(3)\nh = torch.zeros(3)",
    "torch.utils.swap_tensors(g, h)",
    "lin = nn.Linear(2, 2)\ny = lin(torch.ones(1, 2)).sum()",
    "y.backward()\ntorch.utils.swap_tensors(g, h)\nz = g + 1",
]


@pytest.mark.parametrize("safe, ops", [(True, True), (False, True), (False, False)])
def test_swap_tensors_runs_as_in_plain_pytorch(safe, ops):
    """torch.utils.swap_tensors refuses a tensor any weak reference points to; the tool
    holds none, in safe mode, under --trust and with --ops none."""
    scenario = loads_scenario(yaml.safe_dump({"title": "swap", "steps": SWAP}))
    (trace,) = run_scenario(scenario, safe=safe, ops=ops, limits=Limits(timeout=20))
    assert [s.status for s in trace.steps] == ["ok"] * len(SWAP), [s.error for s in trace.steps]
    assert at(trace, 2, "g").values.data == (0.0, 0.0, 0.0)
    assert at(trace, 2, "h").values.data == (1.0, 1.0, 1.0)
    assert at(trace, 4, "z").values.data == (2.0, 2.0, 2.0)


def test_modules_swap_their_parameters_on_conversion_as_in_plain_pytorch():
    """With swap_module_params_on_conversion, Module._apply (double(), load_state_dict)
    swaps each parameter in place: plain PyTorch allows it, so must the tool."""
    trace = run(
        [
            "torch.__future__.set_swap_module_params_on_conversion(True)\nlin = nn.Linear(2, 2)",
            "lin.double()",
            "lin.load_state_dict({k: v.clone() for k, v in lin.state_dict().items()})",
            "torch.__future__.set_swap_module_params_on_conversion(False)",
        ]
    )
    assert [s.status for s in trace.steps] == ["ok"] * 4, [s.error for s in trace.steps]
    assert at(trace, 2, "lin.weight").dtype == "float64"


def test_tensors_nested_deeper_than_recorded_get_a_notice():
    trace = run(["a = torch.ones(2)\nxs = [[[a]]]\nys = [[a]]"])
    assert at(trace, 1, "ys[0][0]").values.data == (1.0, 1.0)
    assert any(n.startswith("xs[0][0] holds tensors nested") for n in trace.notices), trace.notices


def test_a_numpy_summary_keeps_the_precision_of_the_tensor_beside_it():
    """1e10 + arange(100): summing squares first cancels the std to 0.0; torch says 29.01."""
    trace = run(
        ["import numpy as np\narr = 1e10 + np.arange(100.)\nt = torch.from_numpy(arr).clone()"]
    )
    arr, t = at(trace, 1, "arr").values.summary, at(trace, 1, "t").values.summary
    plain = torch.from_numpy(1e10 + __import__("numpy").arange(100.0))
    assert (
        arr.std == pytest.approx(plain.std().item(), rel=1e-12) == pytest.approx(t.std, rel=1e-12)
    )
    assert arr.mean == pytest.approx(plain.mean().item(), rel=1e-15)
