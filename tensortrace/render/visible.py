"""Text that came from a scenario or its run, made safe to show.

``visible`` spells control characters as escapes, so that a title, a message
or printed output can never move the cursor, rewrite the clipboard or reorder
a line on the reader's terminal; ``visible_record`` and ``visible_traces``
give every text renderer a copy of the records in which every string is
spelled so. JSON writes the original: it escapes control characters itself.
"""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar

import msgspec

from ..trace import GraphNode, Step, Trace, evolve
from ..trace.validate import enc_hook

# Characters that must never reach a terminal or a page as they are: C0 controls
# other than newline and tab, DEL, C1 controls, the bidirectional controls (which
# reorder what the reader sees), lone surrogates (which no encoder accepts), and a
# zero-width joiner that joins nothing (first, last, beside a space or another
# joiner), on which rich's line wrapping fails; one inside an emoji sequence stays.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_INVISIBLE = re.compile(f"[{_CONTROLS}]|(?<![^\\s\u200d])\u200d|\u200d(?![^\\s\u200d])")
# What may need spelling, as one character class (every joiner included): the fast test
# that text needs no change. The lookarounds above cost six times as much per character.
_SUSPECT = re.compile(f"[{_CONTROLS}\u200d]")


def _spelled(match: "re.Match[str]") -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with each control character spelled as Python spells it (``\\x1b``, ``\\u202e``).

    Newlines and tabs stay as they are: code, messages and printed output are
    laid out in lines. The spelling is the one ``repr`` and the files written
    with ``-o`` use, so a reader meets one convention everywhere.
    """
    if _SUSPECT.search(text) is None:
        return text
    return _INVISIBLE.sub(_spelled, text)


def has_invisible(text: str) -> bool:
    """``text`` holds a character ``visible`` would spell (a control, a bidi override, ...)."""
    return _SUSPECT.search(text) is not None and _INVISIBLE.search(text) is not None


_T = TypeVar("_T")


def visible_record(value: _T) -> _T:
    """A copy of a record (a ``Trace``, a ``Step``, ...) in which every string is ``visible``.

    Text renderers read this copy, so no field that holds scenario text can be
    forgotten; parts without such characters are returned as they are, so the
    copy costs little. JSON renders the original: it escapes control characters itself.
    """
    return _visible_value(value, {})


_PLAIN = (int, float, bool, type(None))
_FLAT = frozenset((str,) + _PLAIN)
_INIT_FIELDS: Dict[type, Tuple[str, ...]] = {}  # per record type, the fields its constructor takes


def _visible_value(value: Any, seen: Dict[int, Any]) -> Any:
    """``value`` made visible; ``seen``: each tuple already done (records share them)."""
    cls = type(value)
    if cls is str:
        return visible(value)
    if cls in _PLAIN:
        return value
    if cls is tuple:
        done = seen.get(id(value))
        if done is not None:
            return done[1]
        items = value
        for i, v in enumerate(value):
            new = _visible_value(v, seen)
            if new is not v:
                items = value[:i] + (new,) + tuple(_visible_value(w, seen) for w in value[i + 1 :])
                break
        # the tuple is kept alive with its result, so its id stays its own
        seen[id(value)] = (value, items)
        return items
    if cls is GraphNode:
        return _visible_node(value, seen)
    names = _INIT_FIELDS.get(cls)
    if names is None:
        if isinstance(value, str):
            return visible(value)
        if isinstance(value, (int, float, bool)):
            return value
        if isinstance(value, tuple):
            items = tuple(_visible_value(v, seen) for v in value)
            return value if all(a is b for a, b in zip(items, value)) else items
        if isinstance(value, list):
            items = [_visible_value(v, seen) for v in value]
            return value if all(a is b for a, b in zip(items, value)) else items
        if isinstance(value, dict):
            pairs = [(_visible_value(k, seen), _visible_value(v, seen)) for k, v in value.items()]
            same = all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items()))
            return value if same else dict(pairs)
        names = _record_fields(value)
        if names is None:
            return value
        _INIT_FIELDS[cls] = names
    done = seen.get(id(value))
    if done is not None:
        return done[1]
    values = [getattr(value, name) for name in names]
    # a flat record (a saved tensor, ...): its strings checked at once
    if all(type(v) in _FLAT for v in values):
        if _SUSPECT.search("".join([v for v in values if type(v) is str])) is None:
            return value
    elif _holds_none(value):
        return value
    changes = {}
    for name in names:
        old = getattr(value, name)
        new = _visible_value(old, seen)
        if new is not old:
            changes[name] = new
    result = evolve(value, **changes) if changes else value
    seen[id(value)] = (value, result)  # a record the snapshots share is made visible once
    return result


# In JSON text, a control below 0x20 but newline and tab is escaped (\b \f \r \u00XX), the
# rest of what ``visible`` spells stands as it is (in ASCII text, only DEL). A literal
# backslash before b, f, r or u00 matches too: that record is walked, slower, never wrong.
_INVISIBLE_IN_JSON = re.compile(_SUSPECT.pattern + r"|\\[bfr]|\\u00")
_INVISIBLE_IN_ASCII_JSON = (b"\\b", b"\\f", b"\\r", b"\\u00", b"\x7f")
_JSON = msgspec.json.Encoder(enc_hook=enc_hook)  # a str subclass (torch.__version__) as a str


def _holds_none(value: Any) -> bool:
    """Whether no string anywhere in ``value`` holds a character ``visible`` spells.

    One encoding and one search in C, where walking the record visits every
    element of every tensor's values; ASCII text (most traces) is searched for
    five byte strings, several times cheaper than the character class. A record
    the encoder refuses (a lone surrogate, an unknown type) is walked instead.
    """
    try:
        data = _JSON.encode(value)
        if data.isascii():
            return not any(part in data for part in _INVISIBLE_IN_ASCII_JSON)
        text = data.decode()
    except (TypeError, ValueError, UnicodeError, msgspec.EncodeError):
        return False
    return _INVISIBLE_IN_JSON.search(text) is None


def _record_fields(value: Any) -> Optional[Tuple[str, ...]]:
    """The fields a record's constructor takes (a dataclass, or a struct naming them), else None.

    A record type this does not know would be shown as it is, unescaped, so
    both kinds of record the model may be made of are read here.
    """
    struct_fields = getattr(type(value), "__struct_fields__", None)
    if isinstance(struct_fields, tuple):
        return struct_fields
    if is_dataclass(value) and not isinstance(value, type):
        return tuple(f.name for f in fields(value) if f.init)
    return None


def _visible_node(node: GraphNode, seen: Dict[int, Any]) -> GraphNode:
    """A graph node made visible.

    Its own strings are checked at once (a large graph has 100,000 nodes).
    """
    saved = _visible_value(node.saved, seen)
    try:
        text = node.id + node.name + (node.leaf or "") + "".join(node.next)
    except TypeError:  # not all strings (a hand-made record): field by field
        text = "\x00"
    if _SUSPECT.search(text) is None:
        return node if saved is node.saved else evolve(node, saved=saved)
    changes = {}
    for name in ("id", "name", "leaf", "next"):
        old = getattr(node, name)
        new = _visible_value(old, seen)
        if new is not old:
            changes[name] = new
    if saved is not node.saved:
        changes["saved"] = saved
    return evolve(node, **changes) if changes else node


def visible_traces(traces: Sequence[Trace]) -> List[Trace]:
    """Each trace as ``visible_record`` makes it."""
    return [trace if _clean_trace(trace) else visible_record(trace) for trace in traces]


def _clean_trace(trace: Trace) -> bool:
    """Whether no string in ``trace`` holds a character ``visible`` spells, each tensor's
    record read once.

    Steps share the record of a tensor that did not change, and one encoding of
    the whole trace would write it again for every step (at 40 tensors, 40
    records a step where one is new). Here each record is encoded once, the
    steps without their tensors in one more encoding.
    """
    if type(trace) is not Trace or type(trace.steps) is not tuple:
        return False
    records: Dict[int, Any] = {}
    bare = []
    for step in trace.steps:
        if type(step) is not Step or type(step.tensors) is not tuple:
            return False
        for state in step.tensors:
            records[id(state)] = state
        bare.append(evolve(step, tensors=()))
    return _holds_none(list(records.values())) and _holds_none(evolve(trace, steps=tuple(bare)))


__all__ = ["has_invisible", "visible", "visible_record", "visible_traces"]
