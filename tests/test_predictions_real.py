"""Every prediction against the real backward, for every named tensor after every step.

Each bundled scenario (each variant) runs twice: traced, which records the
step's predictions, and as plain code. After each plain step, each named
tensor with a ``grad_fn`` runs ``t.sum().backward()`` in a forked child, so
the parent's tensors are untouched, and the outcome is compared both ways:
a backward that raises "modified by an inplace operation" or "a second time"
was predicted, with that kind, and a backward predicted to fail fails.
"""

from __future__ import annotations

import os
import warnings
from typing import Dict, Set

import pytest
import torch

from tensortrace.record.helpers import base_namespace
from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.record.saved import FREED, STALE
from tensortrace.scenario import load_scenario
from tensortrace.record.tracer import trace_variants

VERSION_ERROR = "modified by an inplace operation"
FREED_ERROR = "Trying to backward through the graph a second time"
OUTCOMES = {0: "none", 1: "stale", 2: "freed", 3: "other"}


def real_backward(t: torch.Tensor) -> str:
    """What ``t.sum().backward()`` does, run in a forked child: none, stale, freed or other."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t.sum().backward()
            code = 0
        except RuntimeError as exc:
            code = 1 if VERSION_ERROR in str(exc) else 2 if FREED_ERROR in str(exc) else 3
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return OUTCOMES.get(os.waitstatus_to_exitcode(status), "other")


def expected(kinds: Set[str]) -> Set[str]:
    """The real outcomes a step's predictions for one tensor allow."""
    failing = kinds & {STALE, FREED}
    if not failing:
        return {"none", "other"}
    return {"stale" if k == STALE else "freed" for k in failing}


@pytest.mark.slow
@pytest.mark.parametrize("name", bundled_names())
def test_every_prediction_matches_the_real_backward(name):
    for trace in trace_variants(load_scenario(bundled_path(name)), safe=False):
        torch.manual_seed(0)
        ns: Dict[str, object] = base_namespace()
        steps = ([trace.setup] if trace.setup is not None else []) + list(trace.steps)
        compared = []
        for step in steps:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    exec(compile(step.code, "<plain>", "exec"), ns)
                except Exception:
                    pass
            aliases = {s.name for s in step.tensors if s.same_as is not None}
            for tname, value in list(ns.items()):
                if not isinstance(value, torch.Tensor) or tname in aliases:
                    continue
                if not value.requires_grad or value.grad_fn is None:
                    continue
                kinds = {p.kind for p in step.predictions if p.tensor == tname}
                happened = real_backward(value)
                compared.append((step.index, tname, happened))
                assert happened in expected(kinds), (name, trace.scenario.variant, step.index, step.code, tname, kinds, happened)
        assert all(o in OUTCOMES.values() for _, _, o in compared)


def test_the_comparison_sees_a_real_failure():
    """The fork reports what the real backward does, both kinds."""
    x = torch.ones(2, requires_grad=True)
    y = x.sigmoid()
    assert real_backward(y) == "none"
    y.sum().backward()
    assert real_backward(y) == "freed"
    z = x.exp()
    with torch.no_grad():
        z.add_(1)
    assert real_backward(z) == "stale"
