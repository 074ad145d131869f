"""What recording autograd insight costs, measured against the same run without it.

Each part times the same scenario traced with and without one kind of
insight, in one process, and prints the ratio (best of ``--repeat`` runs).

* ``saved_tensors``: reading what every node of a 100,000-node graph saved
  for backward, and predicting failing backwards after every step
  (``tensortrace/saved.py``), against tracing the same graph without them.
  Target: at most 2.0.

    python bench/insight.py [--nodes N] [--repeat R]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List
from unittest import mock

import tensortrace
from tensortrace import saved as saved_module
from tensortrace import tracer


def _best(run: Callable[[], object], repeat: int) -> float:
    times: List[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


SAVED_SCENARIO = """\
title: a long graph
steps:
  - run: |
      x = torch.randn(4, requires_grad=True)
      v = torch.ones(4)
      y = x
      for i in range({half}):
          y = (y * v).sin()
    graph: [y]
  - v.add_(1.)
"""


def saved_tensors(nodes: int, repeat: int) -> float:
    """Tracing a graph of ``nodes`` nodes with saved-tensor facts and predictions, over without."""
    scenario = tensortrace.loads_scenario(SAVED_SCENARIO.format(half=nodes // 2), path="long.yaml")

    def with_facts() -> None:
        trace = tensortrace.trace(scenario, safe=False)
        (graph,) = trace.steps[0].graphs
        assert len(graph.nodes) > nodes and any(n.saved for n in graph.nodes), "no saved tensors recorded"
        assert trace.steps[1].predictions, "the change of v predicted nothing"

    def without() -> None:
        with mock.patch.object(tracer, "Namer", lambda *a: None), \
                mock.patch.object(saved_module.Predictor, "_targets", staticmethod(lambda *a: [])):
            trace = tensortrace.trace(scenario, safe=False)
        assert not any(n.saved for n in trace.steps[0].graphs[0].nodes) and not trace.steps[1].predictions

    base = _best(without, repeat)
    timed = _best(with_facts, repeat)
    ratio = timed / base
    print(f"saved tensors, {nodes:,}-node graph: {base:.2f} s without, {timed:.2f} s with: ratio {ratio:.2f} (target <= 2.0)")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    saved_tensors(args.nodes, args.repeat)


if __name__ == "__main__":
    main()
