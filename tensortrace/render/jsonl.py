"""The JSON-lines stream: one line per event, written while the run goes.

``start`` (environment) when a scenario starts, ``step`` as each step
finishes, ``end`` (storages, notices, passed) when it is over. Every event
carries the same head: ``event``, ``format``, ``format_version`` and the
trace's ``scenario`` object (title, variant, source ...), so a consumer can
read any line on its own and group lines by scenario and variant. ``run``
writes the events live through ``JsonlStream``; ``render_jsonl`` writes the
same events for saved traces, so a stream can be made again without torch.
Each line is written by msgspec straight from the records.
"""

from __future__ import annotations

from typing import Sequence

from ..trace import FORMAT_NAME, FORMAT_VERSION, Step, Trace
from .facts import all_steps
from .json import dumps
from .options import DEFAULT_OPTIONS, RenderOptions


class JsonlStream:
    """The text of each event; the caller writes it where and when it likes."""

    def start(self, trace: Trace) -> str:
        return _line("start", trace, environment=trace.environment)

    def step(self, trace: Trace, step: Step) -> str:
        """One line for one finished step, so a consumer can follow a run live."""
        return _line("step", trace, step=step)

    def end(self, trace: Trace) -> str:
        return _line(
            "end",
            trace,
            passed=trace.passed,
            aborted=trace.aborted,
            notices=trace.notices,
            storages=trace.storages,
        )


def _line(event: str, trace: Trace, **fields: object) -> str:
    """One event: the head every event shares, then its own fields."""
    head = {
        "event": event,
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "scenario": trace.scenario,
    }
    return dumps({**head, **fields}) + "\n"


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
