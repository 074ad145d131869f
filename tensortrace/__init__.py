"""tensortrace: see what PyTorch does to your tensors, step by step.

Public API::

    scenario = tensortrace.load_scenario("detach.yaml")
    trace = tensortrace.trace(scenario)          # runs torch
    data = trace.to_dict()                        # JSON-ready
    same = tensortrace.Trace.from_dict(data)      # no torch needed
    text = tensortrace.render.render([same], "console")  # no torch needed

Importing the package does not import torch; ``trace`` does, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .errors import ScenarioError, TensorTraceError  # noqa: E402
from .model import FORMAT_VERSION, Trace  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from .scenario import Scenario

_LAZY = ("Scenario", "load_scenario", "loads_scenario")  # from .scenario, which imports yaml: on first use


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import scenario

        return getattr(scenario, name)
    raise AttributeError(f"module 'tensortrace' has no attribute {name!r}")


def trace(scenario: Scenario, variant: str | None = None, **options: Any) -> Trace:
    """Run a scenario on PyTorch and return its trace (see ``tracer.trace``)."""
    from .tracer import trace as _trace

    return _trace(scenario, variant, **options)


def trace_variants(scenario: Scenario, **options: Any) -> list[Trace]:
    """One trace per variant, or one trace for a scenario without variants."""
    from .tracer import trace_variants as _trace_variants

    return _trace_variants(scenario, **options)


__all__ = [
    "FORMAT_VERSION",
    "Scenario",
    "ScenarioError",
    "TensorTraceError",
    "Trace",
    "__version__",
    "load_scenario",
    "loads_scenario",
    "trace",
    "trace_variants",
]
