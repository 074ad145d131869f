"""JSON renderers: the trace's own ``to_dict()``, nothing added."""

from __future__ import annotations

import json
from typing import Sequence

from ..model import Step, Trace, step_to_dict


def render_json(traces: Sequence[Trace]) -> str:
    """One document: a trace object, or ``{"traces": [...]}`` for several."""
    if len(traces) == 1:
        body = traces[0].to_dict()
    else:
        body = {"traces": [t.to_dict() for t in traces]}
    return json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_jsonl_step(step: Step, *, scenario: str, variant: str | None) -> str:
    """One line for one finished step, so a consumer can follow a run live."""
    line = {"event": "step", "scenario": scenario, "variant": variant, "step": step_to_dict(step)}
    return json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n"
