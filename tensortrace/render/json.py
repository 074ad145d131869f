"""The JSON renderer: the trace's own ``to_dict()``, nothing added; and its inverse.

``--format json`` is one document; the JSON-lines stream is ``jsonl.py``.
Strings are kept exactly as recorded: JSON escapes control characters itself.
``traces_from_dict`` reads any document this or an earlier version wrote.
"""

from __future__ import annotations

import json
from typing import List, Sequence

from ..errors import TraceFormatError
from ..model import FORMAT_NAME, FORMAT_VERSION, Trace, check_format
from .options import DEFAULT_OPTIONS, RenderOptions


def dumps(data: object, **kwargs: object) -> str:
    """JSON as every trace document is written: UTF-8 kept, NaN refused (the model encodes it)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)


def render_json(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """One document: a trace object, or ``{"format", "format_version", "traces": [...]}`` for several."""
    if len(traces) == 1:
        body = traces[0].to_dict()
    else:
        body = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": [t.to_dict() for t in traces]}
    return dumps(body, indent=2) + "\n"


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
