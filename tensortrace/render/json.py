"""The JSON renderer: the trace's own ``to_dict()``, nothing added; and its inverse.

``--format json`` is one document; the JSON-lines stream is ``jsonl.py``.
Strings are kept exactly as recorded: JSON escapes control characters itself.
``traces_from_dict`` reads any document this or an earlier version wrote.

Layout: the document is indented down to each step's fields (the setup's
too), and every record in a step's lists (a tensor, an operation, a
prediction...) is one line, and so is each node of a graph or a gradient
flow, written by the json module's C encoder: a person can still read and
grep it, and a long trace is written many times faster than by indenting every
number on a line of its own. A tensor whose record several steps share (the
recorder reuses the record of a tensor no step changed) is encoded once; a
graph's nodes are written by a template, each distinct tuple of saved tensors
encoded once (a graph may have 250,000 nodes).
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Dict, List, Sequence, Tuple

from ..codec import one_line_encoder
from ..collector import paused_gc
from ..errors import TraceFormatError
from ..model import FORMAT_NAME, FORMAT_VERSION, Graph, GraphNode, Step, Trace, check_format, record_to_dict, evolve
from .options import DEFAULT_OPTIONS, RenderOptions

# Dicts this deep (the trace is 0, a step and the setup 2, a step's tensor or
# operation 4) are one line each, unless they hold a graph's or a flow's nodes,
# which are then one line each in turn.
RECORD_DEPTH = 4
STEP_DEPTH = 2

_string = json.encoder.encode_basestring  # what ``_compact`` writes for a string


_compact = one_line_encoder(ensure_ascii=False)  # the C encoder, made once


def dumps(data: object, **kwargs: object) -> str:
    """JSON as every trace document is written: UTF-8 kept, NaN refused (the model encodes it)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, **kwargs)


def render_json(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """One document: a trace object, or ``{"format", "format_version", "traces": [...]}`` for several."""
    shared = _SharedTensors()
    out: List[str] = []
    with paused_gc():  # a large graph's text is many objects, all kept until the document is joined
        if len(traces) == 1:
            _write(shared.trace(traces[0]), 0, "", out)
        else:
            body = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": [shared.trace(t) for t in traces]}
            _write(body, -2, "", out)
        out.append("\n")
        return "".join(out)


class _Text(str):
    """JSON text already encoded (a shared tensor record, a graph node), written as it is."""


class _Lines(list):
    """A list of ``_Text`` records (a step's tensors, a graph's nodes), written one per line."""


def _write(value: Any, depth: int, indent: str, out: List[str]) -> None:
    """``value`` as JSON into ``out``: containers indented, records at ``RECORD_DEPTH`` on one line."""
    kind = type(value)
    if kind is _Text:
        out.append(value)
    elif kind is _Lines:
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        out.extend(("[\n", inner, (",\n" + inner).join(value), "\n", indent, "]"))  # no copy of the joined block
    elif kind is dict:
        if not value or (depth >= RECORD_DEPTH and not _is_record_list(value.get("nodes"))):
            out.append(_compact(value))
            return
        inner = indent + "  "
        heads = _HEADS.setdefault(inner, {})  # each key's line start at this indent, spelled once per run
        first = True
        for key, item in value.items():
            head = heads.get(key)
            if head is None:
                head = heads[key] = ",\n" + inner + _string(key) + ": "
            if first:
                head = "{" + head[1:]
                first = False
            spelled = _scalar(item)
            if spelled is not None:  # most of a step's fields: one line, without a call per value
                out.append(head + spelled)
            else:
                out.append(head)
                _write(item, depth + 1 if depth or key != "setup" else STEP_DEPTH, inner, out)  # the setup is step 0
        out.append("\n" + indent + "}")
    elif kind is list:
        if not value or not any(type(v) in (dict, list, _Text, str) for v in value):
            out.append(_compact(value))  # numbers, flags: one line
            return
        inner = indent + "  "
        separator = "[\n"
        for item in value:
            out.append(separator + inner)
            _write(item, depth + 1, inner, out)
            separator = ",\n"
        out.append("\n" + indent + "]")
    else:
        out.append(_compact(value))


_HEADS: Dict[str, Dict[str, str]] = {}  # indent -> key -> ',\n<indent>"key": ' (a step writes the same 22 keys)


def _scalar(value: Any) -> Any:
    """``value`` as ``_compact`` spells it when it is a string, flag, null, integer or empty list, else None."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is list and not value:
        return "[]"
    return None


def _is_record_list(value: Any) -> bool:
    return (type(value) is _Lines or type(value) is list) and bool(value) and (type(value[0]) is dict or type(value[0]) is _Text)


class _SharedTensors:
    """Each distinct tensor record encoded once, however many steps share it."""

    def __init__(self) -> None:
        self.texts: Dict[int, _Text] = {}
        self.keep: List[Any] = []  # the records, so that their ids stay unique while rendering

    def trace(self, trace: Trace) -> dict:
        body = evolve(trace, setup=None, steps=()).to_dict()
        body["setup"] = self.step(trace.setup) if trace.setup is not None else None
        body["steps"] = [self.step(s) for s in trace.steps]
        body["passed"] = trace.passed
        return body

    def step(self, step: Step) -> dict:
        data = record_to_dict(step, leaving=("tensors", "graphs"))
        known = self.texts.get
        data["tensors"] = _Lines([known(id(t)) or self.tensor(t) for t in step.tensors])
        data["graphs"] = [self.graph(g) for g in step.graphs]
        return data

    @staticmethod
    def graph(graph: Graph) -> dict:
        data = record_to_dict(evolve(graph, nodes=()))
        data["nodes"] = node_lines(graph.nodes)
        return data

    def tensor(self, record: Any) -> _Text:
        key = id(record)
        text = self.texts.get(key)
        if text is None:
            self.keep.append(record)
            text = self.texts[key] = _Text(_compact(record_to_dict(record)))
        return text


_NODE_FIELDS = ("id", "name", "leaf", "next", "saved")


def node_lines(nodes: Tuple[GraphNode, ...]) -> "_Lines":
    """Each node as ``_compact(record_to_dict(node))`` writes it, by a template; each saved tuple encoded once."""
    if tuple(f.name for f in fields(GraphNode)) != _NODE_FIELDS:  # the template spells these fields only
        return _Lines(_Text(_compact(record_to_dict(node))) for node in nodes)
    by_id: Dict[int, str] = {}  # the walk shares equal tuples
    by_value: Dict[Any, str] = {}  # a loaded trace has equal ones
    out = _Lines()
    for node in nodes:
        saved = node.saved
        kept = by_id.get(id(saved))
        if kept is None:
            kept = by_value.get(saved)
            if kept is None:
                kept = by_value[saved] = _compact(record_to_dict(saved))
            by_id[id(saved)] = kept
        nxt = node.next
        following = f"[{_string(nxt[0])}]" if len(nxt) == 1 else "[" + ", ".join(map(_string, nxt)) + "]"
        leaf = "null" if node.leaf is None else _string(node.leaf)
        out.append(_Text(f'{{"id": {_string(node.id)}, "name": {_string(node.name)}, "leaf": {leaf}, '
                         f'"next": {following}, "saved": {kept}}}'))
    return out


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
