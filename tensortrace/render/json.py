"""The JSON renderer: the trace's own ``to_dict()``, nothing added; and its inverse.

``--format json`` is one document; the JSON-lines stream is ``jsonl.py``.
Strings are kept exactly as recorded: JSON escapes control characters itself.
``traces_from_dict`` and ``traces_from_json`` read any document this or an
earlier version wrote, through the typed records (``tensortrace.trace``).

Layout: the document is indented down to each step's fields (the setup's
too), and every record in a step's lists (a tensor, an operation, a
prediction...) is one line, and so is each node of a graph or a gradient
flow, written compactly by msgspec's C encoder: a person can still read and
grep it, and a long trace is written many times faster than by indenting every
number on a line of its own. A tensor whose record several steps share (the
recorder reuses the record of a tensor no step changed) is written once, where
it first appears, and as ``[name, index]`` in the steps after (format version
4). ``write_json`` hands the document on a piece at a time.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Sequence, Tuple

import msgspec

from ..trace.collector import paused_gc
from ..errors import TraceFormatError
from ..trace import FORMAT_NAME, FORMAT_VERSION, Graph, GraphNode, Step, Trace, evolve
from ..trace import document
from ..trace.document import with_references
from ..trace.validate import InvalidRecord, enc_hook, encoder
from .options import DEFAULT_OPTIONS, RenderOptions

# Dicts this deep (the trace is 0, a step and the setup 2, a step's tensor or
# operation 4) are one line each, unless they hold a graph's or a flow's nodes,
# which are then one line each in turn.
RECORD_DEPTH = 4
STEP_DEPTH = 2

_encode = encoder().encode


# Characters JSON may hold raw that a terminal or an editor would act on or reorder (DEL and
# C1 controls, bidirectional marks and overrides, line and paragraph separators): written as
# \u escapes, which every JSON reader reads back as the same characters. They can only stand
# inside strings, so the text is scanned as a whole.
_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _spelled(match: "re.Match[str]") -> str:
    return f"\\u{ord(match.group(0)):04x}"


def _compact(value: Any) -> str:
    """``value`` (plain data or records) as JSON on one line, UTF-8 kept but for ``_RAW``."""
    return _line(_encode(value))


def _line(data: bytes) -> str:
    """Encoded JSON as text, UTF-8 kept but for ``_RAW``."""
    text = data.decode("utf-8")
    return _RAW.sub(_spelled, text) if _RAW.search(text) else text


_string = _compact  # a string as ``_compact`` writes it


def dumps(data: object) -> str:
    """JSON as every trace document is written: one line, UTF-8 kept."""
    return _compact(data)


def render_json(traces: Sequence[Trace], options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """One document: a trace object, or ``{"format", "format_version", "traces": [...]}``
    for several."""
    pieces: List[str] = []
    write_json(traces, pieces.append, options)
    return "".join(pieces)


def write_json(
    traces: Sequence[Trace], write: Callable[[str], None], options: RenderOptions = DEFAULT_OPTIONS
) -> None:
    """``render_json``'s document, handed to ``write`` a piece at a time as it is made.

    The text of a large trace is never whole in memory: a step's is made, written and
    dropped, so that what the writing costs follows what changed in the trace.
    """
    writer = _Writer(write)
    with paused_gc():  # the pieces of one flush are many small objects, all short-lived
        if len(traces) == 1:
            writer.write(_Lazy(_body, traces[0]), 0, "")
        else:
            body = {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                "traces": [_Lazy(_body, t) for t in traces],
            }
            writer.write(body, -2, "")
        writer.out.append("\n")
        writer.flush()


class _Lazy:
    """A value made only when the writer reaches it: one trace's or step's plain data."""

    __slots__ = ("make", "arg")

    def __init__(self, make: Callable[[Any], Any], arg: Any) -> None:
        self.make, self.arg = make, arg


class _Verbatim(str):
    """JSON text written as it is: a tensor reference, ``["name", 3]``."""


def _body(trace: Trace) -> dict:
    """The trace as plain data, but for its steps: each made when it is written."""
    shared = with_references(trace)
    body = evolve(trace, setup=None, steps=()).to_dict()
    body["setup"] = _Lazy(_step, shared.setup) if shared.setup is not None else None
    body["steps"] = [_Lazy(_step, s) for s in shared.steps]
    body["passed"] = trace.passed
    return body


def _step(step: Step) -> dict:
    """A step as plain data, but for its records: those stay records, one line each."""
    data = msgspec.to_builtins(evolve(step, tensors=(), graphs=()), enc_hook=enc_hook)
    data["tensors"] = [
        t if isinstance(t, msgspec.Struct) else _Verbatim(_compact(list(t))) for t in step.tensors
    ]
    data["graphs"] = [_graph(g) for g in step.graphs]
    return data


def _graph(graph: Graph) -> dict:
    data = msgspec.to_builtins(evolve(graph, nodes=()), enc_hook=enc_hook)
    data["nodes"] = list(graph.nodes)
    return data


class _Writer:
    """Writes one document into ``out``; each distinct record is made a line once, however
    many steps hold it (a tensor no step changed is the same record in process and after the
    pipe, and an equal one, encoded alike, read back from a file)."""

    FLUSH = 4096  # pieces made before they are handed on

    def __init__(self, write: Callable[[str], None]) -> None:
        self.sink = write
        self.out: List[str] = []
        self.texts: Dict[int, str] = {}  # id of a record -> its line; the traces keep them alive
        self.lines: Dict[bytes, str] = {}  # a record's encoding -> its line
        self.keys: Dict[str, str] = {}  # a key as JSON: a step repeats the same 22

    def record(self, value: msgspec.Struct) -> str:
        text = self.texts.get(id(value))
        if text is None:
            data = _encode(value)
            text = self.lines.get(data)
            if text is None:
                text = self.lines[data] = _line(data)
            self.texts[id(value)] = text
        return text

    def flush(self) -> None:
        if self.out:
            self.sink("".join(self.out))
            self.out.clear()  # in place: the writes under way append to this very list

    def write(self, value: Any, depth: int, indent: str) -> None:
        """``value`` as JSON: containers indented, records (``RECORD_DEPTH``) on one line."""
        if type(value) is _Lazy:
            if len(self.out) > self.FLUSH:
                self.flush()
            value = value.make(value.arg)
        out = self.out
        if type(value) is _Verbatim:
            out.append(value)
        elif isinstance(value, msgspec.Struct):
            out.append(self.record(value))
        elif type(value) is dict:
            if not value or (depth >= RECORD_DEPTH and not _is_record_list(value.get("nodes"))):
                out.append(_compact(value))
                return
            inner = indent + "  "
            start = "{\n"
            keys = self.keys
            for key, item in value.items():
                spelled_key = keys.get(key)
                if spelled_key is None:
                    spelled_key = keys[key] = _string(key)
                head = start + inner + spelled_key + ": "
                start = ",\n"
                spelled = _scalar(item)
                if spelled is not None:  # most of a step's fields
                    out.append(head + spelled)
                else:
                    out.append(head)
                    # the setup is step 0
                    self.write(item, depth + 1 if depth or key != "setup" else STEP_DEPTH, inner)
            out.append("\n" + indent + "}")
        elif type(value) is list or type(value) is tuple:
            if not value or not any(isinstance(v, _NESTED) for v in value):
                out.append("[" + ", ".join([_compact(v) for v in value]) + "]")  # numbers, flags
                return
            inner = indent + "  "
            separator = "[\n"
            for item in value:
                out.append(separator + inner)
                self.write(item, depth + 1, inner)
                separator = ",\n"
            out.append("\n" + indent + "]")
        else:
            out.append(_compact(value))


_NESTED = (dict, list, str, msgspec.Struct, _Lazy)  # what a list is written one item a line for


def _scalar(value: Any) -> Any:
    """``value`` as ``_compact`` spells it when it is a string, flag, null, integer or empty
    list, else None."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if (kind is list or kind is tuple) and not value:
        return "[]"
    return None


def _is_record_list(value: Any) -> bool:
    return (
        (type(value) is list or type(value) is tuple)
        and bool(value)
        and (type(value[0]) is dict or isinstance(value[0], msgspec.Struct))
    )


def node_lines(nodes: Tuple[GraphNode, ...]) -> List[str]:
    """Each node of a graph as one line of JSON."""
    return [_compact(node) for node in nodes]


def format_error(exc: InvalidRecord, text: bytes = b"") -> TraceFormatError:
    """A refused document as the one line a user reads (with the line and column of
    malformed JSON)."""
    if exc.offset is not None and text:
        line = text.count(b"\n", 0, exc.offset) + 1
        column = exc.offset - (text.rfind(b"\n", 0, exc.offset) + 1) + 1
        return TraceFormatError(exc.reason, line=line, column=column)
    if isinstance(exc, document.NotThisFormat) or exc.reason.startswith("not valid JSON"):
        return TraceFormatError(exc.reason)
    return TraceFormatError(f"not a valid tensortrace trace: {exc}")


def traces_from_dict(data: object) -> List[Trace]:
    """The traces of a JSON document as Python data: one trace, or a ``{"traces": [...]}`` wrapper.

    A wrapper may carry ``format`` and ``format_version`` like a trace does, or
    (as version 1 wrote it) neither; ``TraceFormatError`` says what is wrong.
    """
    try:
        return document.traces_from_dict(data)
    except InvalidRecord as exc:
        raise format_error(exc) from None


def traces_from_json(text: bytes) -> List[Trace]:
    """``traces_from_dict`` for a document's bytes, decoded straight into the records."""
    try:
        return document.traces_from_json(text)
    except InvalidRecord as exc:
        raise format_error(exc, text) from None
