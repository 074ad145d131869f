"""The variant comparison on real runs: what a name is bound to in each variant."""

from __future__ import annotations

from tensortrace.render.compare import variant_differences
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import trace_variants

SCENARIO = """
title: a gradient read before and after backward
variants:
  backward: {first: "x.sum().backward()", read: "g = x.grad"}
  no-backward: {first: "pass", read: "g = x.grad"}
  unbound: {first: "pass", read: "pass"}
steps:
  - run: |
      x = torch.ones(3, requires_grad=True)
      ${first}
  - run: ${read}
"""


def test_a_name_bound_to_none_is_not_called_unbound():
    traces = trace_variants(loads_scenario(SCENARIO), safe=False)
    step = traces[1].steps[1]
    assert step.none == ("g",)  # x.grad is None without a backward: g is bound, to None
    assert traces[2].steps[1].none == ()
    assert variant_differences(traces)[-1] == (
        "step 2, g: a tensor in backward, None in no-backward, not bound in unbound"
    )


def test_a_name_bound_in_one_variant_only_still_reads_as_before():
    traces = trace_variants(loads_scenario(SCENARIO), safe=True)
    assert traces[1].steps[1].none == ("g",)  # through the safe-mode child too
    two = [traces[0], traces[2]]
    assert variant_differences(two)[-1] == "step 2, g: bound in backward, not in unbound"
