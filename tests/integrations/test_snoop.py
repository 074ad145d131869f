"""``@tensortrace.snoop()``: the user's own code, traced line by line in this process.

Every assertion compares what the trace recorded with what PyTorch itself
says, read by the test from the live objects.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

import tensortrace
from tensortrace.trace import Trace
from tensortrace.snooper import LineRecorder, LineSession, Statements, backend_for

from conftest import REPO


def _state(step, name):
    for t in step.tensors:
        if t.name == name:
            return t
    raise KeyError(f"{name!r} not at step {step.index}: {[t.name for t in step.tensors]}")


def _step(trace: Trace, code: str):
    (found,) = [s for s in trace.steps if s.code == code]
    return found


def train_step(model, x, y, opt):
    out = model(x)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _setup(seed=0, dropout=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(3, 2)] + ([torch.nn.Dropout(0.5)] if dropout else [])
    model = torch.nn.Sequential(*layers) if dropout else layers[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    return model, opt, x, y


def test_a_training_step_records_each_parameters_version_and_grad_per_line(tmp_path):
    model, opt, x, y = _setup()
    before = model.weight._version
    # the grads this step computes, worked out apart from the traced run
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    ((ref(x) - y) ** 2).mean().backward()

    out = tmp_path / "step.json"
    traced = tensortrace.snoop(out)(train_step)
    loss = traced(model, x, y, opt)

    trace = Trace.from_dict(json.loads(out.read_text(encoding="utf-8")))
    assert [s.code for s in trace.steps] == [
        "out = model(x)",
        "loss = ((out - y) ** 2).mean()",
        "loss.backward()",
        "opt.step()",
        "opt.zero_grad()",
        "return loss",
    ]
    first = train_step.__code__.co_firstlineno
    assert [s.line for s in trace.steps] == list(range(first + 1, first + 7))
    assert {"model", "x", "y", "out", "loss"} <= {
        t.name.split(".")[0] for s in trace.steps for t in s.tensors
    }

    forward = _step(trace, "out = model(x)")
    assert _state(forward, "model.weight").kind == "parameter"
    assert _state(forward, "model.weight").version == before
    assert _state(forward, "model.weight").grad is None
    assert _state(forward, "out").grad_fn == "AddmmBackward0"

    backward = _step(trace, "loss.backward()")
    assert _state(backward, "model.weight").grad.data == tuple(
        tuple(r) for r in ref.weight.grad.tolist()
    )
    assert _state(backward, "model.bias").grad.data == tuple(ref.bias.grad.tolist())
    assert (
        _state(backward, "model.weight").version == before
    )  # backward writes grads, not the weight

    stepped = _step(trace, "opt.step()")
    assert _state(stepped, "model.weight").version == before + 1
    assert _state(stepped, "model.bias").version == _state(backward, "model.bias").version + 1
    assert _state(stepped, "model.weight").grad is not None

    zeroed = _step(trace, "opt.zero_grad()")
    assert _state(zeroed, "model.weight").grad is None and _state(zeroed, "model.bias").grad is None
    assert _state(zeroed, "model.weight").version == model.weight._version  # what torch says now
    assert _state(zeroed, "loss").values.data == pytest.approx(loss.item())
    assert trace.passed and trace.environment.safe is False


def test_tracing_changes_no_value_grad_or_random_state(tmp_path):
    def run(snooped: bool):
        model, opt, x, y = _setup(seed=3, dropout=True)
        model.train()
        step = (
            tensortrace.snoop(output=str(tmp_path / "t.json"))(train_step)
            if snooped
            else train_step
        )
        step(model, x, y, opt)
        out = model(x)  # dropout again: the generator must be where the plain run left it
        out.sum().backward()
        return (
            [p.detach().clone() for p in model.parameters()],
            [p.grad.clone() for p in model.parameters()],
            torch.get_rng_state(),
        )

    plain, traced = run(False), run(True)
    for a, b in zip(plain[0] + plain[1], traced[0] + traced[1]):
        assert torch.equal(a, b) and a.dtype == b.dtype
    assert torch.equal(plain[2], traced[2])


def test_an_exception_goes_on_unchanged_after_it_is_recorded_and_the_trace_written(tmp_path):
    raised = RuntimeError("boom")

    @tensortrace.snoop(tmp_path / "t.json")
    def fails(a):
        b = a.t()
        c = b.view(-1)
        return c

    with pytest.raises(RuntimeError) as info:
        fails(torch.ones(2, 3))
    assert "view size is not compatible" in str(info.value)
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    last = trace.steps[-1]
    assert last.code == "c = b.view(-1)" and last.status == "raised"
    assert last.error.type == "RuntimeError" and last.error.explanation is not None
    assert not trace.passed

    @tensortrace.snoop(tmp_path / "u.json")
    def throws():
        raise raised

    with pytest.raises(RuntimeError) as info:
        throws()
    assert info.value is raised


def test_loops_are_recorded_up_to_max_iterations_then_counted(tmp_path):
    @tensortrace.snoop(tmp_path / "t.json", max_iterations=3)
    def loop(a):
        for _ in range(10):
            a = a * 2
        return a

    result = loop(torch.ones(1))
    assert result.item() == 1024
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    body = [s for s in trace.steps if s.code == "a = a * 2"]
    assert [_state(s, "a").values.data for s in body] == [(2.0,), (4.0,), (8.0,)]
    returned = trace.steps[-1]
    assert returned.code == "return a" and _state(returned, "a").values.data == (1024.0,)
    assert "15 more runs of lines" in returned.note  # 8 more loop headers, 7 more bodies
    assert any("line" in n and "ran 7 more times" in n for n in trace.notices)


def test_a_statement_over_several_lines_is_one_step(tmp_path):
    @tensortrace.snoop(tmp_path / "t.json")
    def spread(a):
        # fmt: off
        b = torch.cat([a,
                       a])
        # fmt: on
        return b

    spread(torch.ones(2))
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    assert [s.code for s in trace.steps] == ["b = torch.cat([a,\n               a])", "return b"]


def test_the_context_manager_records_the_block_and_shows_sharing(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    a = torch.zeros(4)
    previous = sys.gettrace()
    with tensortrace.snoop() as snooper:
        b = a[1:]
        b.add_(1)
    trace = snooper.trace
    assert [s.code for s in trace.steps] == ["b = a[1:]", "b.add_(1)"]
    after = trace.steps[-1]
    assert _state(after, "a").storage == _state(after, "b").storage
    assert _state(after, "a").version == a._version == 1
    assert _state(after, "a").values.data == (0.0, 1.0, 1.0, 1.0)
    err = capsys.readouterr().err
    assert "b.add_(1)" in err and "S1" in err and "\x1b[" not in err
    assert sys.gettrace() is previous


def test_format_comes_from_the_suffix_unless_fmt_says(tmp_path):
    def tiny():
        a = torch.ones(2)
        return a

    tensortrace.snoop(tmp_path / "t.md")(tiny)()
    assert (tmp_path / "t.md").read_text().lstrip().startswith("#")
    tensortrace.snoop(tmp_path / "t.txt", fmt="json")(tiny)()
    assert json.loads((tmp_path / "t.txt").read_text())["format"] == "tensortrace.trace"
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".")
    ] == []  # no temporary file left
    with pytest.raises(tensortrace.UsageError, match=r"fmt='xml' is not one of"):
        tensortrace.snoop(fmt="xml")


def test_the_trace_matches_the_json_schema(tmp_path):
    import jsonschema

    tensortrace.snoop(tmp_path / "t.json")(train_step)(*_reorder(_setup()))
    schema = json.loads((REPO / "docs" / "trace.schema.json").read_text())
    jsonschema.validate(json.loads((tmp_path / "t.json").read_text()), schema)


def _reorder(setup):
    model, opt, x, y = setup
    return model, x, y, opt


def test_generators_are_refused_with_a_sentence():
    def gen():
        yield 1

    with pytest.raises(tensortrace.UsageError, match="generator"):
        tensortrace.snoop()(gen)


def test_the_tracer_that_was_set_before_is_set_again(tmp_path):
    if hasattr(sys, "monitoring"):
        pytest.skip("sys.monitoring leaves sys.settrace alone")
    seen = []

    def outer(frame, event, arg):
        seen.append(event)
        return None

    previous = sys.gettrace()
    sys.settrace(outer)
    try:
        tensortrace.snoop(tmp_path / "t.json")(train_step)(*_reorder(_setup()))
        assert sys.gettrace() is outer
    finally:
        sys.settrace(previous)


@pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring is Python 3.12+")
def test_the_monitoring_backend_frees_its_tool_id(tmp_path):
    before = [sys.monitoring.get_tool(i) for i in range(6)]
    tensortrace.snoop(tmp_path / "t.json")(train_step)(*_reorder(_setup()))
    assert [sys.monitoring.get_tool(i) for i in range(6)] == before
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    stepped, backward = _step(trace, "opt.step()"), _step(trace, "loss.backward()")
    assert _state(stepped, "model.weight").version == _state(backward, "model.weight").version + 1
    assert (
        _state(backward, "model.weight").grad is not None
        and _state(_step(trace, "opt.zero_grad()"), "model.weight").grad is None
    )


def test_both_backends_feed_the_same_recorder():
    # The settrace backend driven directly, as snoop() drives whichever backend Python has.
    code = train_step.__code__
    session = LineSession(
        LineRecorder("t", None),
        Statements(code.co_filename, code.co_firstlineno + 1, code.co_firstlineno + 7),
    )
    backend = backend_for(session, code, monitoring=False)
    backend.start()
    try:
        train_step(*_reorder(_setup()))
    finally:
        backend.stop()
    session.finish(session.frame)
    assert [s.code for s in session.recorder.steps][-1] == "return loss"


def test_mistakes_in_the_options_are_one_sentence_each(tmp_path):
    with pytest.raises(tensortrace.UsageError, match=r"with parentheses"):
        tensortrace.snoop(train_step)
    with pytest.raises(tensortrace.UsageError, match=r"is a directory; give a file name"):
        tensortrace.snoop(tmp_path)
    with pytest.raises(tensortrace.UsageError, match=r"the folder .* does not exist"):
        tensortrace.snoop(tmp_path / "no" / "t.json")
    with pytest.raises(tensortrace.UsageError, match=r"max_iterations=0"):
        tensortrace.snoop(max_iterations=0)
    with pytest.raises(tensortrace.UsageError, match=r"take a list of names"):
        tensortrace.snoop(show="model")


def test_a_trace_that_cannot_be_written_does_not_hide_the_functions_own_error(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()

    @tensortrace.snoop(folder / "t.json")
    def fails():
        folder.rmdir()
        raise KeyError("mine")

    with (
        pytest.warns(RuntimeWarning, match="could not be written"),
        pytest.raises(KeyError, match="mine"),
    ):
        fails()


GLOBAL_MODEL = torch.nn.Linear(2, 1)


def test_module_level_models_the_function_uses_are_recorded_too(tmp_path):
    @tensortrace.snoop(tmp_path / "t.json")
    def uses_global(x):
        out = GLOBAL_MODEL(x)
        return out

    uses_global(torch.ones(1, 2))
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    names = [t.name for t in trace.steps[0].tensors]
    assert names == ["x", "out", "GLOBAL_MODEL.weight", "GLOBAL_MODEL.bias"]
    assert _state(trace.steps[0], "GLOBAL_MODEL.weight").version == GLOBAL_MODEL.weight._version


def test_a_trace_written_to_a_character_device_leaves_the_device_in_place(tmp_path):
    """snoop(output=...) onto a device writes through it: renaming a file over it would replace
    the device."""
    import os
    import stat

    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is

    @tensortrace.snoop(output=str(device))
    def double(x):
        return x * 2

    assert double(torch.ones(2)).tolist() == [2.0, 2.0]
    kind = os.lstat(device)
    assert stat.S_ISCHR(kind.st_mode) and kind.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_kept_record_still_sees_writes_the_version_counter_misses(tmp_path):
    """Records are kept from line to line only while the bytes are the same."""
    snooper = tensortrace.snoop(output=str(tmp_path / "t.json"))

    def f():
        a = torch.zeros(3)
        b = torch.ones(2)  # noqa: F841 - a local the snooper reads
        a.data[0] = 5.0
        a.numpy()[1] = 7.0
        return a

    assert snooper(f)().tolist() == [5.0, 7.0, 0.0]
    trace = snooper.trace
    assert _state(_step(trace, "a.data[0] = 5.0"), "a").values.data == (5.0, 0.0, 0.0)
    assert _state(_step(trace, "a.numpy()[1] = 7.0"), "a").values.data == (5.0, 7.0, 0.0)
    kept = [_state(s, "b") for s in trace.steps[1:]]
    assert all(state is kept[0] for state in kept)  # b, unchanged, is read once


# --- the same recording as a scenario's: op log, gradient flow, predictions ------------------


def _sigmoid_then_in_place():
    x = torch.ones(3, requires_grad=True)
    y = torch.sigmoid(x)
    y.mul_(2)
    return y


def test_an_in_place_write_to_a_saved_output_predicts_what_the_scenario_predicts(tmp_path):
    """The same three statements, snooped and run as a scenario, predict the same failure."""
    snooper = tensortrace.snoop(output=str(tmp_path / "t.json"))
    y = snooper(_sigmoid_then_in_place)()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()  # the prediction is PyTorch's own verdict
    scenario = tensortrace.trace(
        "title: t\nsteps:\n"
        "  - x = torch.ones(3, requires_grad=True)\n"
        "  - y = torch.sigmoid(x)\n"
        "  - y.mul_(2)\n"
    )
    snooped = _step(snooper.trace, "y.mul_(2)")
    ran = _step(scenario, "y.mul_(2)")
    assert snooped.index == ran.index == 3
    assert [p.message for p in snooped.predictions] == [p.message for p in ran.predictions]
    assert "SigmoidBackward0" in snooped.predictions[0].message
    assert snooped.predictions[0].kind == "backward_will_fail"
    assert [(o.level, o.name) for o in snooped.ops] == [(o.level, o.name) for o in ran.ops]


def _aten_names(run) -> list:
    """The ATen operations PyTorch itself dispatches for ``run()``, in order."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    with Log():
        run()
    return seen


def test_the_op_log_of_a_line_lists_the_aten_operations_pytorch_dispatched(tmp_path):
    a = torch.arange(6.0).reshape(2, 3)

    def line():
        return a.t().contiguous().add_(1)

    @tensortrace.snoop(output=str(tmp_path / "t.json"), ops="aten")
    def f(a):
        b = a.t().contiguous().add_(1)
        return b

    f(a)
    step = _step(
        Trace.from_dict(json.loads((tmp_path / "t.json").read_text())),
        "b = a.t().contiguous().add_(1)",
    )
    calls = [o.name for o in step.ops if o.level == "call"]
    assert calls == ["torch.Tensor.t", "torch.Tensor.contiguous", "torch.Tensor.add_"]
    assert [o.name for o in step.ops if o.level == "aten"] == _aten_names(line)
    written = [o for o in step.ops if o.name == "aten::add_"]
    assert written and written[0].writes == (_state(step, "b").storage,)
    assert (
        _step(Trace.from_dict(json.loads((tmp_path / "t.json").read_text())), "return b").ops == ()
    )


def test_a_backward_line_records_the_gradient_flow(tmp_path):
    @tensortrace.snoop(output=str(tmp_path / "t.json"))
    def f():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        loss = (w * 3).sum()
        loss.backward()
        return w

    w = f()
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    (flow,) = _step(trace, "loss.backward()").flow
    assert flow.call == "torch.Tensor.backward"
    names = [n.name for n in flow.nodes]
    assert names[:2] == ["SumBackward0", "MulBackward0"] and "AccumulateGrad" in names
    (acc,) = [n for n in flow.nodes if n.name == "AccumulateGrad"]
    assert acc.leaf == "w" and acc.ran and acc.leaf_grad_before is None
    assert acc.leaf_grad_after.data == tuple(w.grad.tolist()) == (3.0, 3.0)
    assert all(not s.flow for s in trace.steps if s.code != "loss.backward()")


def test_ops_none_records_no_operation_and_leaves_no_mode_on_the_stack(tmp_path):
    from torch.overrides import _get_current_function_mode_stack

    inside = []

    @tensortrace.snoop(output=str(tmp_path / "t.json"), ops="none")
    def f():
        a = torch.ones(2) * 2
        inside.append(len(_get_current_function_mode_stack()))
        return a

    f()
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    assert all(s.ops == () and s.flow == () for s in trace.steps)
    assert inside == [0]

    @tensortrace.snoop(output=str(tmp_path / "u.json"))
    def g():
        a = torch.ones(2) * 2
        inside.append(len(_get_current_function_mode_stack()))
        return a

    g()
    assert inside == [0, 1] and len(_get_current_function_mode_stack()) == 0
    with pytest.raises(
        tensortrace.UsageError, match=r"ops='every' is not one of none, calls, all, aten"
    ):
        tensortrace.snoop(ops="every")


def test_a_warning_from_pytorch_is_shown_at_the_users_line(tmp_path):
    """The recording modes sit between the line and PyTorch; the warning still names the line."""

    @tensortrace.snoop(output=str(tmp_path / "t.json"))
    def f():
        x = torch.ones(2, requires_grad=True) * 2
        g = x.grad  # noqa: F841 - the non-leaf .grad warning
        return x

    with pytest.warns(UserWarning, match="not a leaf Tensor") as caught:
        f()
    (w,) = [w for w in caught if "leaf" in str(w.message)]
    assert w.filename == __file__
    assert w.lineno == f.__wrapped__.__code__.co_firstlineno + 3


def test_a_saved_tensor_error_names_the_snooped_tensor(tmp_path):
    @tensortrace.snoop(output=str(tmp_path / "t.json"))
    def f():
        x = torch.ones(3, requires_grad=True)
        y = torch.sigmoid(x)
        y.mul_(2)
        y.sum().backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        f()
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    failed = trace.steps[-1]
    assert failed.status == "raised" and failed.code == "y.sum().backward()"
    assert "In this scenario that is `y` (storage S2)" in failed.error.explanation.what


def test_a_snooped_function_called_from_a_snooped_line_keeps_its_operations_to_itself(tmp_path):
    """Each trace holds what its own lines ran; neither holds the other recording's reads."""

    @tensortrace.snoop(output=str(tmp_path / "inner.json"))
    def inner(a):
        b = a * 2
        return b

    @tensortrace.snoop(output=str(tmp_path / "outer.json"))
    def outer():
        x = torch.ones(3)
        y = inner(x).add_(1)
        return y

    assert outer().tolist() == [3.0, 3.0, 3.0]
    read = {
        name: Trace.from_dict(json.loads((tmp_path / f"{name}.json").read_text()))
        for name in ("inner", "outer")
    }
    assert [o.name for o in _step(read["inner"], "b = a * 2").ops] == [
        "torch.Tensor.mul",
        "aten::mul",
    ]
    called = _step(read["outer"], "y = inner(x).add_(1)")
    assert [o.name for o in called.ops] == ["torch.Tensor.add_", "aten::add_"]


def test_a_line_past_the_operation_limit_leaves_the_next_line_recorded_in_full(tmp_path):
    """Past ops.MAX_OPS a line takes the dispatch mode off the stack; the next line has it back."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from tensortrace.record.ops import MAX_OPS

    @tensortrace.snoop(output=str(tmp_path / "t.json"))
    def f():
        a = torch.zeros(1)
        [a.add_(1) for _ in range(MAX_OPS)]
        b = a * 2
        return b

    assert f().item() == 2 * MAX_OPS
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    busy = _step(trace, "[a.add_(1) for _ in range(MAX_OPS)]")
    assert busy.ops_omitted > 0 and len(busy.ops) == MAX_OPS
    assert [o.name for o in _step(trace, "b = a * 2").ops] == ["torch.Tensor.mul", "aten::mul"]
    assert _get_current_function_mode_stack() == [] and _get_current_dispatch_mode_stack() == []


def test_runs_past_max_iterations_leave_their_operations_out_of_the_next_step(tmp_path):
    @tensortrace.snoop(output=str(tmp_path / "t.json"), max_iterations=3)
    def f():
        a = torch.zeros(2)
        for _ in range(20):
            a.add_(1)
        b = a * 2
        return b

    assert f().tolist() == [40.0, 40.0]
    trace = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    body = [s for s in trace.steps if s.code == "a.add_(1)"]
    assert [[o.name for o in s.ops] for s in body] == [["torch.Tensor.add_", "aten::add_"]] * 3
    after = _step(trace, "b = a * 2")
    assert [o.name for o in after.ops] == ["torch.Tensor.mul", "aten::mul"]
    assert "more runs of lines" in after.note


def test_the_header_names_the_device_the_tensors_are_on(capsys, monkeypatch):
    """A snooped function picks its tensors' devices itself: the header names those (a meta
    tensor stands in for a GPU one here), not the default device."""
    monkeypatch.setenv("NO_COLOR", "1")
    assert str(torch.get_default_device()) == "cpu"

    def on_meta():
        m = torch.ones(3, device="meta")
        return m * 2

    def on_both():
        c = torch.ones(2)
        d = torch.ones(2, device="meta")
        return c, d

    def on_none():
        return 1

    found = []
    for work in (on_meta, on_both, on_none):
        snooper = tensortrace.snoop()
        snooper(work)()
        found.append(snooper.trace.environment.device)
    assert found[0] == "meta" and "device meta" in capsys.readouterr().err
    assert found[1] == "cpu, meta" and found[2] == "cpu"


def test_devices_of_lists_each_device_once_in_order_of_first_sight():
    from types import SimpleNamespace

    from tensortrace.record.lines import devices_of

    def step(index, *devices):
        return SimpleNamespace(tensors=[SimpleNamespace(device=d) for d in devices])

    assert devices_of([step(1, "cuda:0"), step(2, "cuda:0", "cpu", "cuda:1")]) == (
        "cuda:0, cpu, cuda:1"
    )
    assert devices_of([step(1)]) is None


def test_a_mode_entered_on_a_snooped_line_is_the_users_to_leave_after_the_span():
    """The recording's modes lie below the user's for the whole span and leave from there:
    a mode the snooped function enters is still on top when it returns, for the caller to
    leave, and it counts what the code ran, not what the recording read."""
    from torch.utils.flop_counter import FlopCounterMode

    def work(fc):
        a = torch.randn(4, 4)
        fc.__enter__()
        c = a @ a
        w = torch.randn(64, 64, requires_grad=True)
        (w @ w).sum().backward()
        return c

    def run(call):
        fc = FlopCounterMode(display=False)
        call(fc)
        on_top = torch.utils._python_dispatch._get_current_dispatch_mode() is fc.mode
        fc.__exit__(None, None, None)
        d = torch.ones(2, 2) @ torch.ones(2, 2)
        return fc.get_total_flops(), on_top, d

    plain = run(work)
    assert plain[:2] == (128 + 3 * 2 * 64**3, True)
    assert run(tensortrace.snoop(fmt="json", output=None)(work))[:2] == plain[:2]
    assert torch._C._len_torch_dispatch_stack() == torch._C._len_torch_function_stack() == 0


def test_an_eval_transformer_encoder_takes_its_fast_path_under_snoop():
    """Padded positions hold zeros after the encoder's fast path, as in plain PyTorch."""

    def encode():
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
        enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
        x = torch.randn(2, 4, 8)
        mask = torch.tensor([[False, False, True, True], [False, False, False, True]])
        with torch.no_grad():
            out = enc(x, src_key_padding_mask=mask)
        return out

    plain = encode()
    assert plain[0, 2].abs().sum() == 0
    snooper = tensortrace.snoop(fmt="json", output=None)
    assert torch.equal(snooper(encode)(), plain)
    assert any("stepped aside" in n for n in snooper.trace.notices)
