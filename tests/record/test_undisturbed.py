"""Running under the tool changes nothing the scenario's code can see.

Each test runs the same code traced and as plain Python (``exec`` in a
namespace built by ``base_namespace()``, or a plain interpreter where the
stack depth matters), and compares what the code itself observes: the
thread count, how deep it can recurse, the warnings its filters let
through, how often its own ``__torch_function__`` and container methods run.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any, List

import torch
import yaml

from tensortrace.record.helpers import base_namespace
from tensortrace.trace import Trace
from tensortrace.run import runner
from tensortrace.run.runner import Limits, run_scenario
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import trace


def scenario(steps: List[Any]):
    return loads_scenario(yaml.safe_dump({"title": "undisturbed", "steps": steps}))


def traced(steps: List[Any]) -> Trace:
    result = trace(scenario(steps), safe=False)
    assert result.aborted is None and all(s.status == "ok" for s in result.steps), [
        s.error for s in result.steps
    ]
    return result


def plain_stdout(steps: List[str]) -> str:
    import contextlib
    import io

    ns, out = base_namespace(), io.StringIO()
    with contextlib.redirect_stdout(out):
        for code in steps:
            exec(compile(code, "<plain>", "exec"), ns)
    return out.getvalue()


def test_the_child_keeps_the_users_thread_count(monkeypatch):
    # as the command line sets it: its process runs no tensor operation before it forks
    # (a library caller's children get one thread: OpenMP's pool does not survive fork)
    monkeypatch.setattr(runner, "threads_unused_before_fork", True)
    (result,) = run_scenario(scenario(["n = torch.get_num_threads()\nprint(n)"]), safe=False)
    assert result.steps[0].stdout == f"{torch.get_num_threads()}\n"


def test_a_program_that_ran_the_command_line_forks_its_own_runs_at_one_thread(tmp_path):
    """The command line's "no tensor operation before the fork" holds for its own call only:
    a program that calls it in its own process and then runs a scenario itself, after it
    used PyTorch's threads, gets a child that does not wait forever for OpenMP's pool."""
    import pytest
    from conftest import cli

    if torch.get_num_threads() < 2:
        pytest.skip("OpenMP's pool needs two threads to be left behind by fork")
    path = tmp_path / "one.yaml"
    path.write_text("title: one\nsteps:\n  - x = torch.ones(2)\n", encoding="utf-8")
    assert cli("run", str(path)).returncode == 0
    assert runner.threads_unused_before_fork is False
    torch.ones(4_000_000).add_(1).sum()  # this process's OpenMP pool, now started
    steps = ["x = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])"]
    (result,) = run_scenario(scenario(steps), safe=False, limits=Limits(timeout=30))
    assert result.aborted is None and result.steps[0].status == "ok", result.aborted


RECURSION = """
def depth(n=0):
    try:
        return depth(n + 1)
    except RecursionError:
        return n
print(depth())
"""


def test_a_step_can_recurse_as_deep_as_a_plain_script():
    limit = sys.getrecursionlimit()
    plain = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.setrecursionlimit({limit})\n{RECURSION}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # the module level of a script
    (forked,) = run_scenario(scenario([RECURSION]), safe=False, limits=Limits(timeout=60))
    in_process = traced([RECURSION])
    assert abs(int(forked.steps[0].stdout) - int(plain)) <= 2  # was 20 to 40 frames short
    assert abs(int(in_process.steps[0].stdout) - int(plain)) <= 2
    assert sys.getrecursionlimit() == limit  # left as it was found


def test_warning_filters_set_in_one_step_hold_in_the_next():
    steps = [
        "import warnings\nwarnings.filterwarnings('ignore', message='quiet')",
        "warnings.warn('quiet')\nwarnings.warn('loud')",
    ]
    result = traced(steps)
    assert [w.message for w in result.steps[1].warnings] == ["loud"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain_stdout(steps)
    assert [str(w.message) for w in caught] == ["loud"]


COUNTERS = [
    (
        "class Counted(torch.Tensor):\n"
        "    calls = 0\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        Counted.calls += 1\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})"
    ),
    (
        "class Logged(list):\n"
        "    reads = 0\n"
        "    def __getitem__(self, i):\n"
        "        Logged.reads += 1\n"
        "        return list.__getitem__(self, i)"
    ),
    (
        "class Seen(dict):\n"
        "    reads = 0\n"
        "    def items(self):\n"
        "        Seen.reads += 1\n"
        "        return dict.items(self)"
    ),
    (
        "t = torch.ones(3).as_subclass(Counted)\nxs = Logged([torch.ones(1)])\nd ="
        " Seen(k=torch.ones(1))"
    ),
    "u = t * 2",
    "print(Counted.calls, Logged.reads, Seen.reads)",
]


def test_the_tools_reads_never_run_the_users_overrides():
    result = traced(COUNTERS)
    assert result.steps[-1].stdout == plain_stdout(COUNTERS)
    assert "xs[0]" in {s.name for s in result.steps[-1].tensors} and "d['k']" in {
        s.name for s in result.steps[-1].tensors
    }


MODES = [
    "from torch.utils.flop_counter import FlopCounterMode\n"
    "from torch.utils._python_dispatch import TorchDispatchMode\n"
    "from torch.overrides import TorchFunctionMode\n"
    "class Seen(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops = []\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        self.ops.append(str(func))\n"
    "        return func(*args, **(kwargs or {}))\n"
    "class Calls(TorchFunctionMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.calls = []\n"
    "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
    "        self.calls.append(getattr(func, '__name__', str(func)))\n"
    "        return func(*args, **(kwargs or {}))\n"
    "a = torch.randn(4, 4)\n"
    "b = torch.randn(4, 4)",
    "fc = FlopCounterMode(display=False)\nseen = Seen()\ncalls = Calls()",
    "fc.__enter__()",
    "seen.__enter__()",
    "calls.__enter__()",
    "c = a @ b",
    "d = c.sum()",
    "w = torch.randn(64, 64, requires_grad=True)\n(w * 2).sum().backward()",
    "calls.__exit__(None, None, None)",
    "seen.__exit__(None, None, None)",
    "fc.__exit__(None, None, None)",
    "e = a @ b",
    "print(fc.get_total_flops(), seen.ops, calls.calls, on_top)",
]
MODES.insert(
    MODES.index("c = a @ b"),
    "from torch.utils._python_dispatch import _get_current_dispatch_mode\n"
    "from torch.overrides import _get_current_function_mode\n"
    "on_top = _get_current_dispatch_mode() is seen and _get_current_function_mode() is calls",
)


def test_modes_entered_and_left_in_separate_steps_count_as_in_plain_python():
    """A dispatch mode entered in one statement and left in another sees what it sees in plain
    Python: FlopCounterMode counts the matmul (128 FLOPs, not 0), no mode of the tool's is
    left on the user's stack, and the tool's own reads reach none of the user's modes."""
    plain = plain_stdout(MODES)
    assert plain.startswith("128 ") and plain.endswith(" True\n")
    result = traced(MODES)
    assert result.steps[-1].stdout == plain
    assert torch._C._len_torch_dispatch_stack() == torch._C._len_torch_function_stack() == 0


ENCODER = [
    "torch.manual_seed(0)\n"
    "layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,"
    " batch_first=True)\n"
    "enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()\n"
    "x = torch.randn(2, 4, 8)\n"
    "mask = torch.tensor([[False, False, True, True], [False, False, False, True]])",
    "with torch.no_grad():\n    out = enc(x, src_key_padding_mask=mask)",
    "print(out[0, 2].tolist(), out[1, 3].tolist(), out[0, 0].tolist())",
]


def test_an_eval_transformer_encoder_takes_its_fast_path_as_in_plain_pytorch():
    """The encoder's fast path runs only when no torch-function mode is active; plain
    PyTorch takes it and gives zeros at the padded positions. The recording steps aside for
    that forward and says so."""
    plain = plain_stdout(ENCODER)
    assert plain.startswith("[0.0, 0.0, 0.0")
    in_process = traced(ENCODER)
    (forked,) = run_scenario(scenario(ENCODER), safe=True, limits=Limits(timeout=60))
    for result in (in_process, forked):
        assert result.steps[-1].stdout == plain
        assert any("TransformerEncoder" in n and "stepped aside" in n for n in result.notices)
        ops = result.steps[1].ops
        (forward,) = [i for i, op in enumerate(ops) if op.name.endswith("Encoder.forward")]
        assert ops[forward].name == "torch.nn.TransformerEncoder.forward"
        assert ops[forward].tensors.in_ == ("x",) and ops[forward].tensors.out == ("out",)
        under = [op.name for op in ops if op.parent == forward]
        assert under.count("aten::_transformer_encoder_layer_fwd") == 2


METADATA = [
    "x = torch.ones(3, requires_grad=True)",
    {"run": "y = (x.sin() * 2).sum()", "graph": ["y"]},
    "y.backward(retain_graph=True)",
    "nodes = [y.grad_fn]\nfor _ in range(3):\n    nodes.append(nodes[-1].next_functions[0][0])",
    "print([dict(n.metadata) for n in nodes if n is not None])",
]


def test_the_graph_walks_leave_the_users_grad_fn_metadata_as_plain_pytorch_does():
    """Drawn, scanned for predictions and walked for the gradient flow: the nodes' metadata
    holds what plain PyTorch gives it (nothing)."""
    plain = plain_stdout([s if isinstance(s, str) else s["run"] for s in METADATA])
    assert plain == "[{}, {}, {}, {}]\n"
    result = trace(scenario(METADATA), safe=False)
    assert result.steps[-1].stdout == plain
    assert result.steps[1].graphs and result.steps[2].flow
