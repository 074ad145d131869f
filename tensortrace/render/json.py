"""The JSON renderer: the trace's own ``to_dict()``, nothing added; and its inverse.

``--format json`` is one document; the JSON-lines stream is ``jsonl.py``.
Strings are kept exactly as recorded: JSON escapes control characters itself.
``traces_from_dict`` reads any document this or an earlier version wrote.

A tensor whose record several steps share (the recorder reuses the record
of a tensor no step changed) is converted and pretty-printed once, and its
text spliced in at every place it appears: the document is byte for byte
what ``json.dumps(trace.to_dict(), indent=2)`` writes, in a fraction of the
time for a long trace.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Dict, List, Sequence

from ..errors import TraceFormatError
from ..model import FORMAT_NAME, FORMAT_VERSION, Step, Trace, check_format, record_to_dict
from .options import DEFAULT_OPTIONS, RenderOptions


def dumps(data: object, **kwargs: object) -> str:
    """JSON as every trace document is written: UTF-8 kept, NaN refused (the model encodes it)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)


def render_json(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """One document: a trace object, or ``{"format", "format_version", "traces": [...]}`` for several."""
    shared = _SharedTensors()
    if len(traces) == 1:
        body = shared.trace(traces[0])
    else:
        body = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": [shared.trace(t) for t in traces]}
    return shared.splice(dumps(body, indent=2)) + "\n"


class _SharedTensors:
    """Each distinct tensor record as JSON text once; the document holds a placeholder for it.

    Placeholders carry a random token made for this document, so no string a
    scenario printed can be taken for one.
    """

    def __init__(self) -> None:
        import secrets  # here: only streams need it, and importing it costs every render

        self.token = secrets.token_hex(8)
        self.texts: Dict[int, str] = {}
        self.keep: List[Any] = []  # the records, so that their ids stay unique while rendering
        self.marker = '"\\u0000' + self.token + "-"  # a placeholder as json.dumps writes it
        self.end = '\\u0000"'

    def trace(self, trace: Trace) -> dict:
        body = replace(trace, setup=None, steps=()).to_dict()
        body["setup"] = self.step(trace.setup) if trace.setup is not None else None
        body["steps"] = [self.step(s) for s in trace.steps]
        body["passed"] = trace.passed
        return body

    def step(self, step: Step) -> dict:
        data = record_to_dict(replace(step, tensors=()))
        data["tensors"] = [self.tensor(t) for t in step.tensors]
        return data

    def tensor(self, record: Any) -> str:
        key = id(record)
        if key not in self.texts:
            self.keep.append(record)
            self.texts[key] = dumps(record_to_dict(record), indent=2)
        return f"\x00{self.token}-{key}\x00"

    def splice(self, text: str) -> str:
        """The document with every placeholder replaced by its record's text, indented where it stands."""
        parts = text.split(self.marker)
        out = [parts[0]]
        for part in parts[1:]:
            key, _, rest = part.partition(self.end)
            indent = out[-1][out[-1].rfind("\n") + 1:]  # the spaces before the placeholder
            out.append(self.texts[int(key)].replace("\n", "\n" + indent))
            out.append(rest)
        return "".join(out)


def traces_from_dict(data: object) -> List[Trace]:
    """The traces of a JSON document: one trace, or a ``{"traces": [...]}`` wrapper.

    A wrapper may carry ``format`` and ``format_version`` like a trace does, or
    (as version 1 wrote it) neither; ``TraceFormatError`` says what is wrong.
    """
    if not (isinstance(data, dict) and "traces" in data):
        return [Trace.from_dict(data)]
    if "format" in data or "format_version" in data:
        check_format(data)
    traces = data["traces"]
    if not isinstance(traces, list) or not traces:
        raise TraceFormatError("'traces' must be a non-empty list of traces")
    return [Trace.from_dict(body) for body in traces]
