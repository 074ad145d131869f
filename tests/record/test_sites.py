"""Which expression of the user's code a call ran under: ``opt.step()``, ``copy.deepcopy(m)``."""

from __future__ import annotations

import json

import pytest

import tensortrace
from tensortrace.record.tracer import trace
from tensortrace.scenario import loads_scenario
from tensortrace.scenario.library import resolve_target
from tensortrace.trace import Trace

from conftest import has_sandbox, step_of

MODES = [True, False] if has_sandbox() else [False]


def _sites(step):
    """(call name, the text of its site or None) of each call of the step."""
    return [
        (op.name, None if op.site is None else step.sites[op.site].text)
        for op in step.ops
        if op.level == "call"
    ]


@pytest.mark.parametrize("safe", MODES)
def test_calls_an_optimizer_makes_are_under_the_expression_the_code_wrote(safe):
    result = trace(tensortrace.load_scenario(resolve_target("optimizer-step")), safe=safe)
    step = step_of(result, 3)  # opt.step()
    writes = [(n, s) for n, s in _sites(step) if n == "torch.Tensor.add_"]
    assert writes == [("torch.Tensor.add_", "opt.step()")] * 2
    assert step.sites[0].line == 31  # its line in optimizer-step.yaml
    first = _sites(step_of(result, 1))
    # the code's own calls are its own: no site
    assert ("torch.Tensor.detach", None) in first and ("torch.Tensor.clone", None) in first
    assert ("torch.nn.init.kaiming_uniform_", "nn.Linear(2, 1)") in first


@pytest.mark.parametrize("safe", MODES)
def test_a_deepcopy_is_named_as_written(safe):
    result = trace(tensortrace.load_scenario(resolve_target("ema-update")), safe=safe)
    calls = _sites(step_of(result, 4))
    assert ("torch.Tensor.clone", "copy.deepcopy(target)") in calls
    assert ("torch.Tensor.add_", None) in calls  # p.add_(1.) in the loop: the code's own


def test_a_function_the_scenario_defines_is_the_scenarios_code():
    text = """
title: a helper
steps:
  - run: |
      def bump(t):
          return t.add_(1.)
  - run: |
      x = torch.zeros(2)
      bump(x)
"""
    step = step_of(trace(loads_scenario(text), safe=False), 2)
    assert ("torch.Tensor.add_", None) in _sites(step)  # written in the scenario, if elsewhere


def test_snoop_names_a_call_by_the_line_of_the_traced_function(tmp_path):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())

    @tensortrace.snoop(output=str(tmp_path / "t.json"))
    def forward(x):
        y = model(x)
        return y.sum()

    forward(torch.ones(1, 2))
    result = Trace.from_dict(json.loads((tmp_path / "t.json").read_text()))
    step = next(s for s in result.steps if "model(x)" in s.code)
    assert ("torch.nn.functional.linear", "model(x)") in _sites(step)
    assert ("torch.nn.functional.relu", "model(x)") in _sites(step)
    total = next(s for s in result.steps if "y.sum()" in s.code)
    assert ("torch.Tensor.sum", None) in _sites(total)
