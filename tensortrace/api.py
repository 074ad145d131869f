"""The Python API: ``tensortrace.load_scenario``, ``tensortrace.trace`` and ``Traces``.

What the command line does with a target, a function does with an argument:
a path to a scenario file, a bundled scenario's name (``"detach"``), or
scenario text (YAML with a newline in it). Files go through the loader's one
entry point, so every kind of file the command line reads, this reads.

Errors are the library's own (``ScenarioError``, ``PolicyError``,
``UsageError``), worded for a Python caller: they name keyword arguments
(``safe=False``, ``device=``), not command-line flags. Nothing here imports
torch until a trace runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, List, Optional, Union

from .errors import TensorTraceError, UsageError
from .trace import Trace
from .scenario.spec import Scenario

Source = Union[str, "os.PathLike[str]", Scenario]

# Command-line words in the library's messages, and what a Python caller writes instead.
_PYTHON_WORDS = (
    (
        re.compile(r"use --trust to run it as plain Python"),
        "pass safe=False to run it as plain Python",
    ),
    (re.compile(r"--trust\b"), "safe=False"),
    (re.compile(r"--device\b"), "device="),
    (re.compile(r"--scenario-timeout\b"), "scenario_timeout="),
    (re.compile(r"--timeout\b"), "timeout="),
    (re.compile(r"--memory-limit (\d+)"), r"memory_limit=\1"),
    (re.compile(r"--memory-limit\b"), "memory_limit="),
    (re.compile(r"--require-confinement\b"), "require_confinement=True"),
    (re.compile(r"give a file name to -o\b"), "give a file name to output="),
    (
        re.compile(r"run 'tensortrace list' (?:to see|for) (?:the )?bundled scenarios"),
        "see tensortrace.scenario.library.bundled_names() for the bundled scenarios",
    ),
    (re.compile(r"--format\b"), "fmt="),
)


def pythonic(message: str) -> str:
    """``message`` with the command line's flags replaced by the keyword arguments.

    Each keyword argument means what the flag it replaces means.
    """
    for pattern, replacement in _PYTHON_WORDS:
        message = pattern.sub(replacement, message)
    return message


def speak_python(exc: TensorTraceError) -> TensorTraceError:
    """The same error, its message worded for a Python caller (changed in place)."""
    exc.message = pythonic(exc.message)
    exc.args = (exc.message,)
    return exc


class Traces(tuple):
    """The traces of a scenario's variants: rendered side by side, shown in a notebook as one."""

    def render(self, fmt: str = "console", **options: Any) -> str:
        """All the traces in ``fmt``; options as ``Trace.render`` takes them."""
        from .render.notebook import render_traces

        return render_traces(list(self), fmt, **options)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self)

    def _repr_html_(self) -> str:
        from .render.notebook import html

        return html(list(self))

    def _repr_markdown_(self) -> str:
        from .render.notebook import markdown

        return markdown(list(self))


def load_scenario(source: Source) -> Scenario:
    """The scenario a path, a bundled scenario's name, or scenario text stands for.

    A ``str`` holding a newline is scenario text; any other ``str`` or path is
    a file, or, when no such file exists, a bundled scenario's name.
    """
    if isinstance(source, Scenario):
        return source
    try:
        if isinstance(source, str) and "\n" in source:
            from .scenario import loads_scenario

            return loads_scenario(source)
        if not isinstance(source, (str, os.PathLike)):
            raise UsageError(
                "load_scenario() takes a path, a bundled scenario's name or scenario text, "
                f"not {type(source).__name__}"
            )
        from .scenario.library import resolve_target
        from .scenario import load_scenario as load_file  # the loader's one entry point for files

        target = source if isinstance(source, Path) else resolve_target(os.fspath(source))
        return load_file(target)
    except TensorTraceError as exc:
        raise speak_python(exc) from None


def trace(
    source: Source,
    variant: Optional[str] = None,
    *,
    safe: bool = True,
    device: Optional[str] = None,
    timeout: Optional[float] = None,
    memory_limit: Optional[int] = None,
    isolate: Optional[bool] = None,
) -> Union[Trace, Traces]:
    """Run a scenario on PyTorch.

    The result is a ``Trace``, or ``Traces`` (one per variant) for a scenario with variants.

    ``source`` is what ``load_scenario`` takes, or a ``Scenario``. A file, name
    or text runs as the command line runs it: in a forked child, confined in
    safe mode (``isolate=True``); a ``Scenario`` object runs in this process
    (``isolate=False``) unless ``isolate`` says otherwise. ``safe=False`` runs
    the steps as plain Python (only code you trust); ``device`` is used by
    scenarios that do not name one; ``timeout`` is seconds per step (default:
    5 in a child, no limit in this process); ``memory_limit`` is MiB for the
    child (default 4096; 0: none).
    """
    try:
        return _trace(
            source,
            variant,
            safe=safe,
            device=device,
            timeout=timeout,
            memory_limit=memory_limit,
            isolate=isolate,
        )
    except TensorTraceError as exc:
        raise speak_python(exc) from None


def _trace(
    source: Source,
    variant: Optional[str],
    *,
    safe: bool,
    device: Optional[str],
    timeout: Optional[float],
    memory_limit: Optional[int],
    isolate: Optional[bool],
) -> Union[Trace, Traces]:
    from .scenario.devices import DEVICE_CHOICES, is_device_name

    if device is not None and (not isinstance(device, str) or not is_device_name(device)):
        raise UsageError(f"device={device!r} is not one of {DEVICE_CHOICES}")
    if isolate is None:
        isolate = not isinstance(source, Scenario)
    scenario = load_scenario(source)
    if variant is not None and not scenario.variants and variant == scenario.variant:
        scenarios: List[Scenario] = [scenario]  # already the variant asked for
    elif variant is not None:
        if variant not in scenario.variant_names:
            known = ", ".join(scenario.variant_names) or "none"
            raise UsageError(
                f"variant={variant!r} is not a variant of {scenario.title!r} "
                f"(its variants: {known})"
            )
        scenarios = [scenario.for_variant(variant)]
    else:
        scenarios = scenario.resolved()
    if isolate:
        from .run.runner import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, Limits, run_all

        limits = Limits(
            timeout=_positive(DEFAULT_TIMEOUT if timeout is None else timeout),
            memory_mb=_positive(DEFAULT_MEMORY_MB if memory_limit is None else memory_limit),
        )
        traces = run_all(scenarios, safe=safe, device=device, limits=limits)
    else:
        from .record.tracer import collect, iter_trace

        traces = [
            collect(iter_trace(s, safe=safe, device=device, timeout=_positive(timeout)))
            for s in scenarios
        ]
    if variant is not None or not scenario.variants:
        return traces[0]
    return Traces(traces)


def _positive(value: Optional[float]) -> Optional[float]:
    """None for no limit (0 or None), else the number."""
    return value if value else None


def trace_variants(scenario: Source, **options: Any) -> List[Trace]:
    """One trace per variant (or one for a scenario without variants), run in this process.

    ``options`` are ``tracer.iter_trace``'s (``safe``, ``device``, ``timeout``, ``values``).
    """
    from .record.tracer import collect, iter_trace

    return [collect(iter_trace(s, **options)) for s in load_scenario(scenario).resolved()]


__all__ = ["Traces", "load_scenario", "pythonic", "speak_python", "trace", "trace_variants"]
