"""The runner's own promises: imports shared across children, one policy check, events in order."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import List

import pytest


def test_an_optimizer_scenario_imports_dynamo_once_in_the_parent() -> None:
    """Children share what the parent imported, so a step's limit never pays torch._dynamo's
    import."""
    code = textwrap.dedent(
        """
        import sys, time
        from tensortrace.run.runner import Limits, run_scenario
        from tensortrace.scenario import loads_scenario
        text = (
            "title: t\\nsteps:\\n"
            "  - w = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.SGD([w], lr=0.1)\\n"
            "  - (w * 2).sum().backward(); opt.step()\\n"
        )
        assert "torch._dynamo" not in sys.modules
        [trace] = run_scenario(loads_scenario(text, path="s.yaml"), limits=Limits(timeout=60))
        assert trace.passed, [s.error for s in trace.steps]
        print("torch._dynamo" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


@pytest.fixture(scope="module")
def dynamo_in_a_new_process() -> List[str]:
    """One new Python: a scenario without optimizers, then a compiling one, each followed by
    what the parent has imported (what the first shows holds before the second runs); its exit
    status first, then what it printed, then the end of its stderr."""
    code = textwrap.dedent(
        """
        import sys
        from tensortrace.run.runner import Limits, run_scenario
        from tensortrace.scenario import loads_scenario
        run_scenario(loads_scenario("title: t\\nsteps:\\n  - a = torch.ones(2)\\n", path="s.yaml"))
        print("torch._dynamo" in sys.modules)
        text = 'title: t\\nsteps:\\n  - "f = torch.compile(lambda x: x * 2)"\\n'
        scenario = loads_scenario(text, path="c.yaml")
        [trace] = run_scenario(scenario, safe=False, limits=Limits(timeout=120))
        print("torch._dynamo" in sys.modules, "torch._inductor.compile_fx" in sys.modules)
        print(trace.passed, [s.error for s in trace.steps])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    return [f"exit {result.returncode}", *result.stdout.splitlines(), result.stderr[-2000:]]


def test_a_scenario_without_optimizers_does_not_pay_for_dynamo(dynamo_in_a_new_process) -> None:
    assert dynamo_in_a_new_process[1] == "False", dynamo_in_a_new_process


@pytest.mark.parametrize("safe", [False, True], ids=["trusted", "confined"])
def test_recording_a_step_is_never_charged_to_its_time_limit(monkeypatch, safe: bool) -> None:
    """Summaries of large tensors take the tool's time; the step limit is for the user's code.

    The child sends ``ran N`` on the pipe when step N's code is done, and the
    parent stops the step's clock until the step arrives.
    """
    import time

    from tensortrace.record import tracer
    from tensortrace.run import runner
    from tensortrace.run.runner import Limits, run_scenario
    from tensortrace.scenario import loads_scenario

    real = tracer._Recorder.snapshot
    # a shorter grace than the 2 s the parent gives users: what is shown is that a recording
    # longer than the limit plus the grace is not charged, whatever the grace; each snapshot
    # sleeps past both by half a second, as before, in 4 s of the test's time instead of 7
    monkeypatch.setattr(runner, "GRACE", 0.5)

    def slow_snapshot(self, spec):
        time.sleep(runner.GRACE + 1.5)  # longer than the step limit plus the parent's grace
        return real(self, spec)

    monkeypatch.setattr(tracer._Recorder, "snapshot", slow_snapshot)  # the forked child inherits it
    scenario = loads_scenario(
        "title: t\nsteps:\n  - a = torch.ones(2)\n  - b = a * 2\n", path="s.yaml"
    )
    [trace] = run_scenario(scenario, safe=safe, limits=Limits(timeout=1))
    assert trace.aborted is None, trace.aborted
    assert [s.status for s in trace.steps] == ["ok", "ok"]


def test_a_compiling_scenario_has_dynamo_and_inductor_imported_by_the_parent(
    dynamo_in_a_new_process,
) -> None:
    """The first compiled call's imports are paid before forking, never inside the step's limit.

    (Its code generation and C++ compilation are the user's own work and still
    count: on a cold inductor cache they can take longer than the default limit.)
    The process had not imported torch._dynamo before (the test above).
    """
    status, before, after, passed, stderr = dynamo_in_a_new_process
    assert status == "exit 0" and passed.startswith("True "), dynamo_in_a_new_process
    assert (before, after) == ("False", "True True")


def test_a_process_that_ran_parallel_work_can_still_trace_in_a_child():
    """OpenMP's threads do not survive fork: the child of a process that used them runs on one."""
    import torch

    if torch.get_num_threads() < 2:
        pytest.skip("PyTorch runs on one thread here: nothing to hang")
    code = textwrap.dedent(
        """
        import torch, tensortrace
        a = torch.rand(10**7); a.sum(); torch.aminmax(a)  # the intra-op threads start here
        text = "title: t\\nsteps:\\n  - b = torch.rand(10**7)\\n  - m = torch.aminmax(b)\\n"
        tr = tensortrace.trace(text, timeout=30)
        print(tr.passed, tr.aborted)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "None"], out.stderr[-2000:]


THREADS_SCENARIO = """\
title: threads
steps:
  - run: torch.set_num_threads(2)
  - run: |
      x = (torch.ones(2000, 2000) @ torch.ones(2000, 2000)).sum()
      y = (torch.ones(4_000_000) * 2).sum()
      print(torch.get_num_threads())
  - run: torch.set_num_threads(0)
    raises:
      type: RuntimeError
"""


def test_a_scenario_asking_for_threads_after_parallel_work_runs_on_one_and_says_so():
    """In a child of a process whose OpenMP threads ran, a second thread would wait forever.

    The parent asked for two threads itself (so PyTorch's pthreadpool starts its threads again
    in a child forked at two, which the kernel's wall refuses) and ran a parallel operation
    (so OpenMP's pool, which no child inherits, exists). The scenario asks for two threads
    and runs parallel operations: it runs on one, PyTorch's own error for 0 stays, and the
    trace says which step asked for what.
    """
    code = textwrap.dedent(
        f"""
        import torch, tensortrace
        torch.set_num_threads(2)
        (torch.randn(2000, 2000) @ torch.randn(2000, 2000)).sum()  # OpenMP's threads start here
        for safe in (True, False):
            tr = tensortrace.trace({THREADS_SCENARIO!r}, safe=safe, timeout=30)
            assert tr.passed and tr.aborted is None, [(s.status, s.error) for s in tr.steps]
            values = {{t.name: t.values.data for t in tr.steps[1].tensors}}
            print(tr.steps[1].stdout.strip(), values["x"], values["y"], torch.get_num_threads())
            print(tr.notices)
        """
    )
    out = subprocess.run(
        ["timeout", "-s", "KILL", "150", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert (
        lines[0::2] == ["1 8000000000.0 8000000.0 2"] * 2
    )  # one thread, right values, parent's kept
    for notices in lines[1::2]:
        assert "torch.set_num_threads(2) in step 1 (line 3) kept one thread" in notices
        assert "run it with the tensortrace command" in notices


@pytest.mark.parametrize("line", [b"ran ", b"ran -1", b"ran 1e9", b"ran 1234567890", b"ran 1 2"])
def test_a_malformed_ran_line_from_the_child_is_refused(line: bytes) -> None:
    from tensortrace.run.child import ran_index
    from tensortrace.trace.events import EventError

    with pytest.raises(EventError, match="malformed ran line"):
        ran_index(line)


def test_a_ran_line_says_which_step_ran() -> None:
    from tensortrace.run.child import ran_index

    assert ran_index(b"ran 0") == 0 and ran_index(b"ran 417") == 417


def test_a_trusted_run_on_the_cpu_forks_and_one_on_the_gpu_stays_here():
    """A forked child cannot use CUDA once its parent has counted the GPUs ("Cannot
    re-initialize CUDA in forked subprocess"), as a notebook usually has, so a trusted run
    on CUDA runs in this process; on the CPU it runs in a child, as safe mode always does."""
    import os

    import torch

    from tensortrace.scenario import loads_scenario
    from tensortrace.run import runner

    where = (
        "title: where\nsteps:\n  - run: |\n      import os\n      pid = torch.tensor(os.getpid())\n"
    )
    (cpu,) = runner.run_all([loads_scenario(where, path="where.yaml")], safe=False)
    forked = not torch.cuda.is_initialized()  # else every trusted run stays here
    assert (int(cpu.steps[0].tensors[0].values.data) != os.getpid()) is forked
    if not torch.cuda.is_available():
        return  # the GPU half runs where there is one
    torch.cuda.is_available()  # as a notebook does: this alone spoils a forked child's CUDA
    (gpu,) = runner.run_all([loads_scenario(where, path="where.yaml")], safe=False, device="cuda")
    assert gpu.passed and int(gpu.steps[0].tensors[0].values.data) == os.getpid()
    assert gpu.steps[0].tensors[0].device == "cuda:0"
    backward = (
        "title: b\ndevice: cpu\nsteps:\n"
        "  - x = torch.ones(2, requires_grad=True)\n  - x.sum().backward()\n"
    )
    both = (
        runner.run_all(  # the CPU one stays here too: after a CUDA backward, fork spoils autograd
            [
                loads_scenario(
                    where + "  - (pid * torch.ones(1, requires_grad=True)).sum().backward()\n"
                ),
                loads_scenario(backward),
            ],
            safe=False,
            device="cuda",
        )
    )
    assert [t.passed for t in both] == [True, True], [t.aborted for t in both]
