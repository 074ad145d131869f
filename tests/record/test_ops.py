"""What each step ran: calls and ATen operations, read from PyTorch's modes."""

from __future__ import annotations

import json

import pytest
import yaml
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tensortrace.errors import PolicyError
from tensortrace.record.helpers import base_namespace
from tensortrace.trace import Trace
from tensortrace.record.ops import MAX_OPS, recordable
from tensortrace.render.ops import ops_lines
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import check_policy, trace

from conftest import REPO, cli, state, step_of, write_scenario


def _trace(text: str, *, safe: bool = True, ops: bool = True) -> Trace:
    return trace(loads_scenario(text), safe=safe, ops=ops)


def _aten(step):
    return [op for op in step.ops if op.level == "aten"]


def _calls(step):
    return [op for op in step.ops if op.level == "call"]


DETACH_ZERO = """
title: detach then zero_
setup: |
  a = torch.ones(3, requires_grad=True)
steps:
  - run: |
      c = a.detach(); c.zero_()
"""


def test_detach_then_zero_reads_as_one_storage_written_with_a_version_bump():
    result = _trace(DETACH_ZERO)
    step = step_of(result, 1)
    s1 = state(step, "a").storage
    assert state(step, "c").storage == s1
    detach, zero = _aten(step)
    assert (
        detach.name,
        detach.tensors.in_,
        detach.tensors.out,
        detach.reads,
        detach.writes,
        detach.outputs,
    ) == ("aten::detach", ("a",), ("c",), (s1,), (), (s1,))
    assert detach.version_bumps == ()
    assert (zero.name, zero.tensors.in_, zero.reads, zero.writes) == (
        "aten::zero_",
        ("c",),
        (),
        (s1,),
    )
    assert [(b.name, b.from_, b.to) for b in zero.version_bumps] == [("c", 0, 1)]
    assert ops_lines(step, "aten") == [
        "Tensor.detach(a) → c (S1, no copy)",
        "  aten::detach(a) → c (S1, no copy)",
        "Tensor.zero_(c) writes S1 (a, c) · c: version 0 → 1",
        "  aten::zero_(c) writes S1 (a, c) · c: version 0 → 1",
    ]
    # each ATen operation names the call it ran under
    calls = _calls(step)
    assert [step.ops[op.parent] for op in (detach, zero)] == calls


def test_data_is_a_call_the_dispatcher_never_sees():
    result = _trace(DETACH_ZERO.replace("c = a.detach(); c.zero_()", "e = a.data"))
    step = step_of(result, 1)
    assert [op.name for op in _calls(step)] == ["torch.Tensor.data.__get__"]
    assert [op.name for op in _aten(step)] == ["aten::detach"]  # what .data runs underneath
    assert _aten(step)[0].tensors.out == ("e",)


def _written_by_schema(name: str, overload) -> bool:
    packet = getattr(torch.ops.aten, name.split("::")[1])
    schema = getattr(packet, overload or "default")._schema
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def test_writes_come_from_the_schema_for_operations_on_no_list():
    result = _trace(
        """
        title: schema writes
        steps:
          - run: |
              x = torch.zeros(4)
              y = x.relu()
              x.index_put_((torch.tensor([0]),), torch.tensor(1.))
              torch.ops.aten.relu_(x)
              z = torch.empty(4)
              torch.add(x, 1, out=z)
        """,
        safe=False,
    )
    step = step_of(result, 1)
    x, y, z = (state(step, n).storage for n in "xyz")
    by_name = {(op.name, op.overload): op for op in _aten(step)}
    assert by_name[("aten::index_put_", None)].writes == (x,)
    assert by_name[("aten::relu_", None)].writes == (x,)
    assert by_name[("aten::relu", None)].writes == ()
    assert by_name[("aten::add", "out")].writes == (z,)
    assert by_name[("aten::add", "out")].reads == (x,)
    for op in _aten(step):  # every recorded write is what PyTorch's schema says, and only that
        assert bool(op.writes) == _written_by_schema(op.name, op.overload), op.name
    bumps = [(b.name, b.from_, b.to) for op in _aten(step) for b in op.version_bumps]
    assert bumps == [("x", 0, 1), ("x", 1, 2), ("z", 0, 1)]
    assert state(step, "x").version == 2 and state(step, "y").storage != x


def test_a_storage_first_seen_inside_an_operation_keeps_its_label_in_later_snapshots():
    result = _trace(
        """
        title: labels
        setup: |
          a = torch.ones(2)
        steps:
          - run: |
              d = {1.5: a * 2}
          - run: |
              e = d[1.5]
        """
    )
    mul = next(op for op in _aten(step_of(result, 1)) if op.name == "aten::mul")
    assert mul.tensors.out == (
        None,
    )  # held in a dict under a float key: unnamed at the end of the step
    assert state(step_of(result, 2), "e").storage == mul.outputs[0]
    clone_step = _trace(DETACH_ZERO.replace("c = a.detach(); c.zero_()", "b = a.clone()"))
    clone = _aten(step_of(clone_step, 1))[0]
    assert clone.outputs == (state(step_of(clone_step, 1), "b").storage,) != clone.reads


def test_a_temporary_that_dies_inside_the_step_has_a_label_of_its_own():
    result = _trace(
        DETACH_ZERO.replace("c = a.detach(); c.zero_()", "s = (a * 2).sum(); t = torch.ones(3)")
    )
    step = step_of(result, 1)
    mul = next(op for op in _aten(step) if op.name == "aten::mul")
    temp = mul.outputs[0]
    assert temp not in {t.storage for t in step.tensors}
    assert [s.label for s in result.storages].count(temp) == 1


def test_names_are_those_bound_when_the_step_began_and_ended():
    result = _trace(DETACH_ZERO.replace("c = a.detach(); c.zero_()", "a = a * 2"))
    mul = next(op for op in _aten(step_of(result, 1)) if op.name == "aten::mul")
    assert (mul.tensors.in_, mul.tensors.out) == (("a",), ("a",))
    assert mul.reads != mul.outputs


def test_the_number_of_recorded_operations_is_bounded_and_the_rest_counted():
    result = _trace(
        """
        title: loop
        steps:
          - run: |
              x = torch.zeros(2)
              for _ in range(3000):
                  x.add_(1)
        """
    )
    step = step_of(result, 1)
    assert len(step.ops) == MAX_OPS
    recorded_calls = len(_calls(step))
    assert recorded_calls == MAX_OPS // 2  # torch.zeros and add_, a call and an ATen operation each
    # past the limit each call counts once: its ATen operation runs without the dispatch mode
    assert step.ops_omitted == 1 + 3000 - recorded_calls
    assert state(step, "x").values.data == (3000.0, 3000.0) and state(step, "x").version == 3000
    assert (
        ops_lines(step, "calls")[-1]
        == f"… and at least {step.ops_omitted:,} more operations not recorded"
    )


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_aten_operations_of_the_call_that_crosses_the_limit_are_all_counted():
    """A backward() recorded just before the limit runs its ATen operations past it: each is
    counted, none lost."""
    chain = (
        MAX_OPS // 2 - 4
    )  # y = y * 1.0 is a call and an ATen operation; the backward call crosses the limit
    code = (
        "w = torch.ones(2, requires_grad=True)\ny = w\n"
        f"for _ in range({chain}):\n    y = y * 1.0\ns = y.sum()\ns.backward()\n"
    )
    result = _trace(
        "title: cross\nsteps:\n  - run: |\n"
        + "".join(f"      {line}\n" for line in code.splitlines())
    )
    step = step_of(result, 1)
    backward = [
        i
        for i, op in enumerate(step.ops)
        if op.level == "call" and op.name == "torch.Tensor.backward"
    ]
    assert len(backward) == 1 and len(step.ops) == MAX_OPS
    under = sum(1 for op in step.ops if op.parent == backward[0])
    # what an independent dispatch mode sees the same backward run
    w = torch.ones(2, requires_grad=True)
    y = w
    for _ in range(chain):
        y = y * 1.0
    s = y.sum()
    with _Count() as counter:
        s.backward()
    assert counter.count > under > 0
    assert step.ops_omitted == counter.count - under
    assert state(step, "w").grad.data == (1.0, 1.0)


def test_past_the_limit_a_backward_still_records_its_flow_and_the_next_step_its_aten_operations():
    result = _trace(
        """
        title: loop then backward
        steps:
          - run: |
              w = torch.ones(2, requires_grad=True)
              y = w
              for _ in range(3000):
                  y = y * 1.0
              try:
                  torch.ones(2) + torch.ones(3)
              except RuntimeError:
                  pass
              y.sum().backward()
          - z = w.detach()
        """
    )
    capped, after = step_of(result, 1), step_of(result, 2)
    assert capped.ops_omitted > 0 and len(capped.flow) == 1 and capped.flow[0].nodes
    assert state(capped, "w").grad.data == (1.0, 1.0)
    assert [op.name for op in _aten(after)] == [
        "aten::detach"
    ]  # the dispatch mode is back on the stack
    assert torch._C._len_torch_dispatch_stack() == 0


def test_ops_none_records_nothing():
    result = _trace(DETACH_ZERO, ops=False)
    assert all(
        not s.ops and not s.flow and s.ops_omitted == 0 for s in (result.setup, *result.steps)
    )


def test_inference_mode_scenarios_record_calls_only_and_say_why():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.inference_mode():
        y = x * 2
    plain = y.clone()
    from torch.utils._python_dispatch import TorchDispatchMode

    class Through(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Through():
        moded = y.clone()
    # Why the fallback exists: the mode changes the version PyTorch gives the clone.
    assert (plain._version, moded._version) == (1, 0)
    result = _trace(
        """
        title: inference
        steps:
          - run: |
              x = torch.tensor([1., 2.], requires_grad=True)
              with torch.inference_mode():
                  y = x * 2
              yc = y.clone()
        """
    )
    step = step_of(result, 1)
    assert _calls(step) and not _aten(step)
    assert state(step, "yc").version == 1
    assert any("inference_mode" in n and "calls" in n for n in result.notices)


def test_compiling_scenarios_are_not_recorded_and_say_why():
    assert recordable("f = torch.compile(g)")[0] is None
    assert recordable("with torch.inference_mode(): pass")[0] == "call"
    assert recordable("a = torch.ones(2)") == ("aten", None)
    assert recordable("tr = torch.jit.trace(f, (x,))")[0] == "call"
    assert recordable("from torch import _dynamo as d")[0] is None  # names reached by import
    assert recordable("x = (")[0] == "aten"  # no word of the table in it: nothing to parse
    assert recordable("x = (  # torch.compile")[0] is None  # does not parse: its words decide
    result = _trace(
        DETACH_ZERO.replace("c.zero_()", "c.zero_()\n      f = torch.compile"), safe=False
    )
    assert not any(s.ops for s in result.steps)
    assert any("torch.compile" in n for n in result.notices)


def test_words_in_comments_and_strings_leave_recording_on():
    """Only the code's names decide: a comment or a string naming torch.compile or
    inference_mode changes nothing."""
    named = "c.zero_()  # no torch.compile or torch.inference_mode here\n      s = 'torch.compile'"
    result = _trace(DETACH_ZERO.replace("c.zero_()", named), safe=False)
    assert any(op.level == "aten" for s in result.steps for op in s.ops)
    assert not result.notices


def test_jit_trace_runs_as_in_plain_pytorch_while_recording():
    """Under a TorchDispatchMode, torch.jit.trace records a graph that fails when run; the
    scenario's calls are still recorded, its ATen operations not."""
    code = (
        "def f(z):\n    return z.view(2, 2) * 2\n"
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "tr = torch.jit.trace(f, (torch.ones(4),))\no = tr(torch.ones(4))"
    )
    plain = base_namespace()
    exec(code, plain)
    result = _trace(yaml.safe_dump({"title": "t", "steps": [{"run": code}]}), safe=False)
    step = step_of(result, 0)
    assert step.status == "ok", step.error
    assert state(step, "o").values.data == tuple(map(tuple, plain["o"].tolist()))
    assert _calls(step) and not _aten(step)


@pytest.mark.parametrize(
    "code",
    [
        "torch._C._len_torch_function_stack()",
        "torch.overrides.TorchFunctionMode",
        "torch.utils._python_dispatch._get_current_dispatch_mode()",
        "torch._C._DisableTorchDispatch()",
    ],
)
def test_safe_mode_keeps_scenario_code_away_from_the_modes(code):
    with pytest.raises(PolicyError):
        check_policy(loads_scenario(f"title: t\nsteps:\n  - run: x = {code}\n"))


def test_the_json_trace_carries_both_levels_with_its_own_keys(tmp_path):
    path = write_scenario(tmp_path, DETACH_ZERO)
    result = cli("run", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    ops = data["steps"][0]["ops"]
    assert {op["level"] for op in ops} == {"call", "aten"}
    zero = next(op for op in ops if op["name"] == "aten::zero_")
    assert zero["tensors"] == {"in": ["c"], "out": ["c"]}
    assert zero["version_bumps"] == [{"name": "c", "from": 0, "to": 1}]
    assert Trace.from_dict(data) == Trace.from_dict(json.loads(json.dumps(data)))
    assert Trace.from_dict(data).steps[0].ops[3].version_bumps[0].to == 1
    old = dict(
        data,
        steps=[
            {k: v for k, v in s.items() if k not in ("ops", "ops_omitted", "flow")}
            for s in data["steps"]
        ],
    )
    assert Trace.from_dict(old).steps[0].ops == ()  # traces written before these fields still load
    none = json.loads(cli("run", str(path), "--format", "json", "--ops", "none").stdout)
    assert none["steps"][0]["ops"] == [] and none["steps"][0]["flow"] == []


def test_ops_option_chooses_what_the_console_shows(tmp_path):
    path = write_scenario(tmp_path, DETACH_ZERO)
    calls = cli("run", str(path), "--width", "120")
    aten = cli("run", str(path), "--ops", "aten", "--width", "120")
    none = cli("run", str(path), "--ops", "none", "--width", "120")
    assert calls.returncode == aten.returncode == none.returncode == 0
    assert "Tensor.zero_(c) writes S1 (a, c) · c: version 0 → 1" in calls.stdout
    assert "aten::" not in calls.stdout
    assert "aten::zero_(c) writes S1 (a, c) · c: version 0 → 1" in aten.stdout
    assert "Tensor.zero_" in aten.stdout
    assert "ran:" not in none.stdout and "Tensor.zero_" not in none.stdout
    bad = cli("run", str(path), "--ops", "every")
    assert bad.returncode == 2
    assert "--ops 'every' is not one of none, calls, all, aten" in bad.stderr
    markdown = cli("run", str(path), "--format", "markdown", "--ops", "aten")
    assert "  aten::detach(a) → c (S1, no copy)" in markdown.stdout


def test_a_warning_keeps_the_line_plain_pytorch_gives_it():
    text = DETACH_ZERO.replace("c = a.detach(); c.zero_()", "b = a * 2; g = b.grad")
    (warning,) = step_of(_trace(text, safe=False), 1).warnings
    (plain,) = step_of(_trace(text, safe=False, ops=False), 1).warnings
    assert "not a leaf Tensor" in warning.message and warning.line == plain.line == 7


def _outcome(result: Trace):
    """Everything a trace says that recording must not change (storage labels may:
    temporaries take some)."""
    steps = []
    for step in (result.setup, *result.steps) if result.setup else result.steps:
        tensors = tuple(
            (
                t.name,
                t.values,
                t.version,
                t.requires_grad,
                t.is_leaf,
                t.retains_grad,
                t.grad_fn,
                t.grad,
                t.shape,
                t.is_view,
            )
            for t in step.tensors
        )
        error = (step.error.type, step.error.message) if step.error else None
        steps.append(
            (
                step.status,
                error,
                step.warnings,
                step.stdout,
                [e.passed for e in step.expectations],
                tensors,
            )
        )
    return steps, result.passed


def test_the_bundled_library_shows_the_same_with_and_without_recording():
    from tensortrace.scenario import load_scenario
    from tensortrace.record.tracer import trace_variants

    paths = sorted((REPO / "scenarios").glob("*.yaml"))
    assert len(paths) >= 40
    for path in paths:
        scenario = load_scenario(path)
        on = trace_variants(scenario, safe=False, ops=True)
        off = trace_variants(scenario, safe=False, ops=False)
        assert [_outcome(t) for t in on] == [_outcome(t) for t in off], path.name
        assert all(t.passed for t in on), path.name


def test_render_and_check_take_the_ops_option_too(tmp_path):
    path = write_scenario(tmp_path, DETACH_ZERO)
    saved = tmp_path / "trace.json"
    assert cli("run", str(path), "-o", str(saved)).returncode == 0
    again = cli("render", str(saved), "--ops", "aten", "--width", "120")
    assert (
        again.returncode == 0
        and "  aten::zero_(c) writes S1 (a, c) · c: version 0 → 1" in again.stdout
    )
    hidden = cli("render", str(saved), "--ops", "none", "--width", "120")
    assert "Tensor.zero_" not in hidden.stdout
    checked = cli("check", str(path), "--ops", "none")
    assert checked.returncode == 0 and "1 passed" in checked.stdout


def test_a_subclass_never_sees_the_recording_reads():
    text = """
        title: subclass
        setup: |
          seen = []
          class Logged(torch.Tensor):
              @classmethod
              def __torch_function__(cls, func, types, args=(), kwargs=None):
                  seen.append(getattr(func, '__name__', str(func)))
                  return super().__torch_function__(func, types, args, kwargs or {})
          a = torch.ones(2, requires_grad=True).as_subclass(Logged)
        steps:
          - run: |
              del seen[:]
              b = (a * 2).sum()
              b.backward()
              n = len(seen)
            expect:
              - seen == ['mul', 'sum', 'backward']
        """
    result = _trace(text, safe=False)
    plain = _trace(text, safe=False, ops=False)
    step = step_of(result, 1)
    assert step.behaved and step_of(plain, 1).behaved, step.expectations
    assert [op.name for op in _calls(step)][:3] == [
        "torch.Tensor.mul",
        "torch.Tensor.sum",
        "torch.Tensor.backward",
    ]


def test_a_write_after_data_is_reassigned_names_the_storage_it_landed_in():
    import yaml

    body = {
        "title": "t",
        "setup": "x = torch.ones(3)\ny = torch.zeros(3)",
        "steps": ["x.add_(0)\nx.data = y\nx.add_(1)"],
    }
    step = trace(loads_scenario(yaml.safe_dump(body)), safe=True).steps[0]
    y = next(t for t in step.tensors if t.name == "y")
    first, second = [op for op in step.ops if op.name == "aten::add_"]
    assert second.writes == (y.storage,) and first.writes != (y.storage,)


def test_past_the_limit_ours_leaves_from_under_a_dispatch_mode_of_the_scenarios_own():
    """Ours lies below the scenario's own mode and leaves the stack from there: the
    scenario's mode goes on seeing every operation, and ours counts the calls alone."""
    result = _trace(
        """
        title: a mode of the scenario's own
        steps:
          - run: |
              from torch.utils._python_dispatch import TorchDispatchMode
              class Counting(TorchDispatchMode):
                  seen = 0
                  def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                      Counting.seen += 1
                      return func(*args, **(kwargs or {}))
              x = torch.zeros(2)
              with Counting():
                  for _ in range(3000):
                      x.add_(1)
              for _ in range(10):
                  x.add_(1)
            expect:
              - Counting.seen == 3000
          - y = x.detach()
        """,
        safe=False,
    )
    step, after = step_of(result, 1), step_of(result, 2)
    assert step.status == "ok" and step.behaved, step.failures
    assert state(step, "x").values.data == (3010.0, 3010.0)
    recorded_calls = len(_calls(step))
    # every add_ past the limit is counted as a call alone, under Counting and after it
    assert step.ops_omitted == (3000 - (recorded_calls - 1)) + 10
    assert [op.name for op in _aten(after)] == ["aten::detach"]
    assert torch._C._len_torch_dispatch_stack() == 0


def test_restriding_in_place_operations_move_the_version_but_write_nothing():
    """t_() and unsqueeze_() change sizes and strides only: PyTorch bumps the version, no
    byte changes."""
    plain = torch.ones(2, 3)
    plain.t_()
    plain.unsqueeze_(0)
    assert plain._version == 2 and plain.shape == (1, 3, 2)
    result = _trace(
        yaml.safe_dump(
            {"title": "t", "steps": [{"run": "m = torch.ones(2, 3)\nm.t_()\nm.unsqueeze_(0)"}]}
        ),
        safe=False,
    )
    step = step_of(result, 0)
    restrided = [op for op in step.ops if op.name.endswith(("t_", "unsqueeze_"))]
    assert len(restrided) == 4  # each call and its ATen operation
    for op in restrided:
        assert op.writes == () and op.reads == (state(step, "m").storage,), op
        assert op.version_bumps, op


def test_the_tools_own_reads_are_not_calls_the_code_made():
    """torch.from_numpy makes no torch-function call; the tool's reads of the result
    (untyped_storage, device) and PyTorch's lift_fresh under the modes are not the code's."""
    code = "import numpy as np\narr = np.arange(3.)\nt = torch.from_numpy(arr)"
    result = _trace(yaml.safe_dump({"title": "t", "steps": [{"run": code}]}), safe=False)
    calls = [op.name for op in _calls(step_of(result, 0))]
    assert not any(
        "untyped_storage" in n or n.endswith(".device") or "lift_fresh" in n for n in calls
    ), calls


def test_a_version_move_of_an_unnamed_alias_is_not_put_beside_the_named_tensor():
    """d.data.add_(1): only the temporary .data tensor's counter moves; d stays at version 0."""
    plain = torch.ones(3)
    plain.data.add_(1)
    assert plain._version == 0
    result = _trace(
        yaml.safe_dump({"title": "t", "steps": [{"run": "d = torch.ones(3)\nd.data.add_(1)"}]}),
        safe=False,
    )
    step = step_of(result, 0)
    assert state(step, "d").version == 0
    (line,) = [t for t in ops_lines(step, "calls") if t.startswith("Tensor.add_")]
    assert line.endswith("· an unnamed tensor's version 0 → 1"), line


EXISTING = """
title: results that already exist
setup: |
  import numpy as np
  x = torch.ones(3, requires_grad=True)
  arr = np.ones(3, dtype=np.float32)
steps:
  - run: (x * 2).sum().backward()
  - run: print(x.grad)
  - run: shared = torch.as_tensor(arr)
  - run: |
      y = x.detach() + 1
      z = y.view(3)
"""


@pytest.mark.parametrize("level", ["all", "aten"])
def test_a_result_whose_storage_existed_before_the_call_is_not_called_new(level):
    result = _trace(EXISTING, safe=False)
    get = next(op for op in _calls(step_of(result, 2)) if op.name == "torch.Tensor.grad.__get__")
    grad = get.outputs[0]
    assert any(grad in op.outputs for op in step_of(result, 1).ops)  # made by the backward before
    assert get.existed == (True,)
    assert f"Tensor.grad(x) → x.grad ({grad}, no copy)" in ops_lines(step_of(result, 2), level)
    arr = state(step_of(result, 3), "shared").storage
    assert f"torch.as_tensor() → shared ({arr}, no copy)" in ops_lines(step_of(result, 3), level)
    step = step_of(result, 4)
    y = state(step, "y").storage
    lines = ops_lines(step, level)
    assert f"Tensor.add(·) → y ({y}, new)" in lines  # a result the call allocated is new
    assert f"Tensor.view(y) → z ({y}, no copy)" in lines
    if level == "aten":
        assert f"  aten::add(·) → y ({y}, new)" in lines
    add = next(op for op in _calls(step) if op.name == "torch.Tensor.add")
    assert add.existed == (False,)


def test_a_storage_that_dies_in_a_step_keeps_the_label_it_had_before():
    """`opt.zero_grad()` reads `.grad` and frees it in one step: the op log names that memory
    by the label it had before, never a new one (same label = same memory)."""
    from tensortrace.scenario import load_scenario

    result = trace(load_scenario(REPO / "scenarios" / "optimizer-step.yaml"), safe=True)

    def grad_reads(index):
        return [
            op.outputs[0]
            for op in _calls(step_of(result, index))
            if op.name == "torch.Tensor.grad.__get__" and op.tensors.in_ == ("lin.weight",)
        ]

    before, after = grad_reads(3), grad_reads(5)
    assert before and after and set(after) == {before[0]}
    labels = [s.label for s in result.storages]
    assert len(labels) == len(set(labels))
