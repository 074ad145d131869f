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
