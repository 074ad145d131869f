"""Command-line choices that change what a loaded scenario records: ``--graph``.

A graph is drawn in the child while the scenario runs, from the live
``grad_fn``, so asking for one on the command line must reach the tracer as
part of the scenario, exactly as a ``graph:`` key written in the file would.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from .spec import Scenario


def with_graph(scenario: Scenario, names: Sequence[str]) -> Scenario:
    """The scenario with the autograd graphs of ``names`` drawn after its last step.

    The last step is where a graph is complete; names are added to what that
    step's own ``graph`` key asks for (``graph: true`` already draws every
    shown tensor's graph, and stays as it is).
    """
    if not names or not scenario.steps:
        return scenario
    last = scenario.steps[-1]
    if last.graph is True:
        return scenario
    own = tuple(last.graph or ())
    graph = tuple(dict.fromkeys(own + tuple(names)))
    return dataclasses.replace(
        scenario,
        steps=scenario.steps[:-1] + (dataclasses.replace(last, graph=graph),),
        graph_option=tuple(n for n in dict.fromkeys(names) if n not in own),
    )


__all__ = ["with_graph"]
