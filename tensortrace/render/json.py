"""JSON renderers: the trace's own ``to_dict()``, nothing added.

``--format json`` is one document. ``--format jsonl`` is a stream, one line
per event, written as the run goes: ``start`` (scenario and environment),
``step`` (each step as it finishes), ``end`` (storages, notices, passed).
"""

from __future__ import annotations

import json
from typing import Sequence

from ..model import FORMAT_NAME, FORMAT_VERSION, Step, Trace, record_to_dict, step_to_dict


def _dumps(data: object, **kwargs: object) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)


def render_json(traces: Sequence[Trace]) -> str:
    """One document: a trace object, or ``{"traces": [...]}`` for several."""
    if len(traces) == 1:
        body = traces[0].to_dict()
    else:
        body = {"traces": [t.to_dict() for t in traces]}
    return _dumps(body, indent=2) + "\n"


def render_jsonl_start(trace: Trace) -> str:
    line = {
        "event": "start",
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "scenario": record_to_dict(trace.scenario),
        "environment": record_to_dict(trace.environment),
    }
    return _dumps(line) + "\n"


def render_jsonl_step(step: Step, *, scenario: str, variant: str | None) -> str:
    """One line for one finished step, so a consumer can follow a run live."""
    line = {"event": "step", "scenario": scenario, "variant": variant, "step": step_to_dict(step)}
    return _dumps(line) + "\n"


def render_jsonl_end(trace: Trace) -> str:
    line = {
        "event": "end",
        "scenario": trace.scenario.title,
        "variant": trace.scenario.variant,
        "passed": trace.passed,
        "aborted": trace.aborted,
        "notices": list(trace.notices),
        "storages": record_to_dict(trace.storages),
    }
    return _dumps(line) + "\n"
