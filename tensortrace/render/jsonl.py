"""The JSON-lines stream: one line per event, written while the run goes.

``start`` (scenario and environment) when a scenario starts, ``step`` as each
step finishes, ``end`` (storages, notices, passed) when it is over. ``run``
writes the events live through ``JsonlStream``; ``render_jsonl`` writes the
same events for saved traces, so a stream can be made again without torch.
"""

from __future__ import annotations

from typing import Sequence

from ..model import FORMAT_NAME, FORMAT_VERSION, Step, Trace, record_to_dict, step_to_dict
from .facts import all_steps
from .json import dumps
from .options import DEFAULT_OPTIONS, RenderOptions


class JsonlStream:
    """The text of each event; the caller writes it where and when it likes."""

    def start(self, trace: Trace) -> str:
        line = {
            "event": "start",
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "scenario": record_to_dict(trace.scenario),
            "environment": record_to_dict(trace.environment),
        }
        return dumps(line) + "\n"

    def step(self, trace: Trace, step: Step) -> str:
        """One line for one finished step, so a consumer can follow a run live."""
        line = {"event": "step", "scenario": trace.scenario.title,
                "variant": trace.scenario.variant, "step": step_to_dict(step)}
        return dumps(line) + "\n"

    def end(self, trace: Trace) -> str:
        line = {
            "event": "end",
            "scenario": trace.scenario.title,
            "variant": trace.scenario.variant,
            "passed": trace.passed,
            "aborted": trace.aborted,
            "notices": list(trace.notices),
            "storages": record_to_dict(trace.storages),
        }
        return dumps(line) + "\n"


def render_jsonl(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """Saved traces as the stream a run writes: start, every step, end, trace after trace.

    A run writes all ``end`` lines after its last step; a saved trace is
    complete, so each trace's events are written together.
    """
    stream = JsonlStream()
    lines = []
    for trace in traces:
        lines.append(stream.start(trace))
        lines.extend(stream.step(trace, step) for step in all_steps(trace))
        lines.append(stream.end(trace))
    return "".join(lines)


__all__ = ["JsonlStream", "render_jsonl"]
