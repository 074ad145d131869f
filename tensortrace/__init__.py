"""tensortrace: see what PyTorch does to your tensors, step by step.

Public API (described in docs/python.md)::

    trace = tensortrace.trace("detach")           # a file, a bundled name, or YAML text
    print(trace.render("markdown"))               # any format the command line writes
    scenario = tensortrace.load_scenario("detach")
    same = tensortrace.Trace.from_dict(trace.to_dict())  # no torch needed

    @tensortrace.snoop()                          # your own code, line by line
    def train_step(model, x, y, opt): ...

    with tensortrace.doctor():                    # why backward failed, which line to change
        train()

In Jupyter, ``%load_ext tensortrace`` adds ``%%tensortrace`` and ``%tensortrace``.
Importing the package imports neither torch nor rich: every name below is
loaded on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .version import __version__  # noqa: E402

from .errors import PolicyError, ScenarioError, TensorTraceError, TraceFormatError, UsageError  # noqa: E402

# The records' package (pure data, msgspec only) shares its name with the
# function ``tensortrace.trace``: loaded here, once, and its name given back to
# the function, so that ``import tensortrace.trace.records`` and
# ``tensortrace.trace(...)`` both mean what they say.
from . import trace as _records  # noqa: E402
from .trace import present as _present_seam  # noqa: E402, F401 - loads the seam

del trace  # noqa: F821 - bound by the import above


def _present(how: str, traces: Any, *args: Any, **options: Any) -> str:
    """Traces drawn by the renderers, which the records may not import: plugged in below."""
    from .render import notebook

    draw = {"render": notebook.render_traces, "html": notebook.html, "markdown": notebook.markdown}
    return draw[how](traces, *args, **options)


_records.present.plug(_present)

# name -> module that defines it, imported when the name is first used
_LAZY = {
    "FORMAT_VERSION": "trace",
    "Trace": "trace",
    "Scenario": "scenario.spec",
    "loads_scenario": "scenario",
    "load_scenario": "api",
    "trace": "api",
    "trace_variants": "api",
    "Traces": "api",
    "snoop": "snooper",
    "doctor": "doctor",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensortrace' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext tensortrace``: adds the ``%%tensortrace`` and ``%tensortrace`` magics."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


__all__ = [
    "FORMAT_VERSION",
    "PolicyError",
    "Scenario",
    "ScenarioError",
    "TensorTraceError",
    "Trace",
    "TraceFormatError",
    "Traces",
    "UsageError",
    "__version__",
    "doctor",
    "load_scenario",
    "loads_scenario",
    "snoop",
    "trace",
    "trace_variants",
]
