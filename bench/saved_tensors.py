"""What recording autograd insight costs, measured against the same run without it.

Each part times the same scenario traced with and without one kind of
insight, in one process, and prints the ratio of the best CPU times (this
process and the forked copies that walk large graphs) of ``--repeat``
interleaved runs: CPU time, because a busy machine stretches wall time.

* ``saved_tensors``: reading what every node of a 100,000-node graph saved
  for backward, and predicting failing backwards after every step
  (``tensortrace/record/saved.py``), against tracing the same graph without them.
  Target: at most 2.0.

    python bench/saved_tensors.py [--nodes N] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import resource
from typing import Callable, Tuple
from unittest import mock

import tensortrace
from tensortrace.record import predict
from tensortrace.record import steps as record_steps


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the forked graph walks)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _compare(
    base: Callable[[], object], timed: Callable[[], object], repeat: int
) -> Tuple[float, float]:
    """The best CPU time of each, runs interleaved so that a busy machine slows both alike."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, run in enumerate((base, timed)):
            gc.collect()
            start = _cpu()
            run()
            best[i] = min(best[i], _cpu() - start)
    return best[0], best[1]


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
"""
LATER_STEP = "  - v.add_(1.)\n"


def saved_tensors(nodes: int, repeat: int) -> float:
    """Tracing a graph of ``nodes`` nodes with saved-tensor facts and predictions, over without.

    The scenario builds the graph and draws it in one step. A second line
    times one more step (which changes a tensor every other node saved):
    every step re-reads the graphs behind the named tensors for its
    predictions, so each later step adds about one walk of the graph.
    """
    ratio = 0.0
    for label, steps in (
        ("graph drawn", SAVED_SCENARIO),
        ("and one step more", SAVED_SCENARIO + LATER_STEP),
    ):
        scenario = tensortrace.loads_scenario(steps.format(half=nodes // 2), path="long.yaml")

        def with_facts() -> None:
            trace = tensortrace.trace(scenario, safe=False)
            (graph,) = trace.steps[0].graphs
            assert len(graph.nodes) > nodes and any(n.saved for n in graph.nodes), (
                "no saved tensors recorded"
            )
            assert all(s.predictions for s in trace.steps[1:]), "the change of v predicted nothing"

        def without() -> None:
            with (
                mock.patch.object(record_steps, "Namer", lambda *a: None),
                mock.patch.object(predict.Predictor, "targets", staticmethod(lambda *a: [])),
            ):
                trace = tensortrace.trace(scenario, safe=False)
            assert not any(n.saved for n in trace.steps[0].graphs[0].nodes)

        base, timed = _compare(without, with_facts, repeat)
        print(
            f"saved tensors, {nodes:,}-node graph, {label}: {base:.2f} s without, {timed:.2f} s"
            f" with (CPU): ratio {timed / base:.2f}" + (" (target <= 2.0)" if not ratio else "")
        )
        ratio = ratio or timed / base
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    saved_tensors(args.nodes, args.repeat)


if __name__ == "__main__":
    main()
