"""The runner's own promises: imports shared across children, one policy check, events in order."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_an_optimizer_scenario_imports_dynamo_once_in_the_parent() -> None:
    """Children share what the parent imported, so a step's limit never pays torch._dynamo's import."""
    code = textwrap.dedent(
        """
        import sys, time
        from tensortrace.runner import Limits, run_scenario
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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_a_scenario_without_optimizers_does_not_pay_for_dynamo() -> None:
    code = textwrap.dedent(
        """
        import sys
        from tensortrace.runner import run_scenario
        from tensortrace.scenario import loads_scenario
        run_scenario(loads_scenario("title: t\\nsteps:\\n  - a = torch.ones(2)\\n", path="s.yaml"))
        print("torch._dynamo" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
