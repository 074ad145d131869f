"""Shared helpers: write a scenario, trace it, look facts up by step and name."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

import pytest

import tensortrace
from tensortrace.model import Step, TensorState, Trace

REPO = Path(__file__).resolve().parent.parent


def has_sandbox() -> bool:
    try:
        import tensortrace.sandbox  # noqa: F401
    except ImportError:
        return False
    return True


def write_scenario(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def trace_text(tmp_path: Path, text: str, *, safe: Optional[bool] = None, variant: Optional[str] = None) -> Trace:
    """Trace scenario text in this process (safe mode when available unless told)."""
    path = write_scenario(tmp_path, text)
    scenario = tensortrace.load_scenario(path)
    if safe is None:
        safe = has_sandbox()
    return tensortrace.trace(scenario, variant, safe=safe)


def state(step: Step, name: str) -> TensorState:
    for t in step.tensors:
        if t.name == name:
            return t
    raise KeyError(f"{name!r} not recorded at step {step.index}: {[t.name for t in step.tensors]}")


def step_of(trace: Trace, index: int) -> Step:
    return trace.steps[index - 1]


@pytest.fixture
def trace_yaml(tmp_path):
    def run(text: str, **kwargs) -> Trace:
        return trace_text(tmp_path, text, **kwargs)

    return run
