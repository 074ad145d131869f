"""The JSON renderer: the trace's own ``to_dict()``, nothing added.

``--format json`` is one document; the JSON-lines stream is ``jsonl.py``.
Strings are kept exactly as recorded: JSON escapes control characters itself.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..model import Trace
from .options import DEFAULT_OPTIONS, RenderOptions


def dumps(data: object, **kwargs: object) -> str:
    """JSON as every trace document is written: UTF-8 kept, NaN refused (the model encodes it)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)


def render_json(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """One document: a trace object, or ``{"traces": [...]}`` for several."""
    if len(traces) == 1:
        body = traces[0].to_dict()
    else:
        body = {"traces": [t.to_dict() for t in traces]}
    return dumps(body, indent=2) + "\n"
