"""Plain-text spellings of recorded facts, shared by every text renderer.

Each function turns one fact of the model into a short string, the same way in
the console, in Markdown and in the summary of what differs between variants,
so that a reader who learns one output can read the others.

It is also the one place where text that came from a scenario or its run is
made safe to show: ``visible`` spells control characters as escapes, so that
a title, a message or printed output can never move the cursor, rewrite the
clipboard or reorder a line on the reader's terminal.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields, is_dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar

import msgspec


from ..trace import (
    ErrorInfo,
    GraphNode,
    SavedTensor,
    Step,
    Summary,
    TensorState,
    Trace,
    Values,
    evolve,
)
from ..trace.validate import enc_hook
from .facts import is_contiguous

# A row or a dimension longer than this is shown as its first and last items.
EDGE_ITEMS = 3
MAX_ITEMS = 2 * EDGE_ITEMS
ELLIPSIS = "…"
NONE = "None"

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


def as_int(value: Any) -> Optional[int]:
    """``value`` as an integer the renderer formats itself, or None where ``int()`` refuses it.

    Ids, anchors and attributes that must be numbers are written from this, so
    a string where a record should hold a number never reaches them as text.
    """
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def count_text(value: Any) -> str:
    """A count with thousands separators (``4,998``); anything but a number as ``visible`` text."""
    if type(value) is int:
        return f"{value:,}"
    return visible(str(value))


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


def format_number(value: Any) -> str:
    """One element, spelled close to how ``print(tensor)`` spells it."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value.is_integer() and abs(value) < 1e16:
            return f"{int(value)}." if value != 0 or math.copysign(1, value) > 0 else "-0."
        return f"{value:.4g}"
    if value is None:
        return NONE
    return str(value)  # "nan", "inf", "(1+2j)": already spelled


def _edges(items: list) -> list:
    if len(items) <= MAX_ITEMS:
        return items
    return items[:EDGE_ITEMS] + [ELLIPSIS] + items[-EDGE_ITEMS:]


def format_data(data: Any) -> str:
    """Nested sequences as ``[[1., 2.],\\n [3., 4.]]``: one line per innermost row."""
    if not isinstance(data, (list, tuple)):
        return format_number(data)
    depth = 0
    probe = data
    while isinstance(probe, (list, tuple)):
        depth += 1
        if not probe:
            break
        probe = probe[0]
    return _format_nested(data, depth)


def _format_nested(data: Any, depth: int) -> str:
    # Dimensions are few (a tensor has at most a few dozen), so this is
    # recursion over dimensions, never over elements.
    if depth <= 1 or not isinstance(data, (list, tuple)):
        items = data if isinstance(data, (list, tuple)) else [data]
        return (
            "["
            + ", ".join(x if x is ELLIPSIS else format_number(x) for x in _edges(list(items)))
            + "]"
        )
    parts = [
        ELLIPSIS if part is ELLIPSIS else _format_nested(part, depth - 1).replace("\n", "\n ")
        for part in _edges(list(data))
    ]
    return "[" + ",\n ".join(parts) + "]"


def format_summary(summary: Summary, shape: Optional[tuple] = None) -> str:
    """A large tensor on a few short lines: first values, size, then the statistics kept."""
    lines = []
    if summary.head:
        head = ", ".join(format_number(x) for x in summary.head)
        lines.append(f"[{head}, {ELLIPSIS}]")
    size = f"{summary.numel:,} values"
    if shape is not None:
        size += f", shape {format_shape(shape)}"
    lines.append(size)
    stats = []
    for label in ("min", "max", "mean", "std"):
        value = getattr(summary, label)
        if value is not None:
            stats.append(f"{label} {format_number(value)}")
    if stats:
        lines.append(", ".join(stats[:2]))
    if len(stats) > 2:
        lines.append(", ".join(stats[2:]))
    counts = []
    if summary.nan_count:
        counts.append(f"{summary.nan_count:,} nan")
    if summary.inf_count:
        counts.append(f"{summary.inf_count:,} inf")
    if counts:
        lines.append(", ".join(counts))
    return "\n".join(lines)


def format_values(values: Optional[Values], shape: Optional[tuple] = None) -> str:
    """Values as a table cell shows them; ``shape`` is added to a summary, which lacks it."""
    if values is None:
        return NONE
    if values.kind == "exact":
        return format_data(values.data)
    if values.kind == "summary" and values.summary is not None:
        return format_summary(values.summary, shape)
    return f"({values.reason or 'values unavailable'})"


def step_place(step: Step) -> str:
    """Where a step's code is: ``cell 3, line 1`` for a notebook's step, ``line 1``, or nothing."""
    line = f"line {step.line}" if step.line is not None else ""
    if step.cell is None:
        return line
    return f"cell {step.cell}, {line}" if line else f"cell {step.cell}"


def one_line(text: str, limit: int = 60) -> str:
    """Text squeezed onto one line, cut with an ellipsis past ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        return flat[: limit - 1] + ELLIPSIS
    return flat


def format_storage(state: TensorState) -> str:
    """The storage label; a view or an offset element adds ``+offset`` (``S1+1``)."""
    if state.storage is None:
        return "—"
    if state.is_view or state.storage_offset:
        return f"{state.storage}+{state.storage_offset}"
    return state.storage


def format_shape(shape: tuple) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def format_stride(state: TensorState) -> str:
    """The stride as ``tensor.stride()`` gives it; ``—`` where it does not describe the shape."""
    if len(state.stride) != len(state.shape):
        return "—"
    return format_shape(state.stride)


def format_dtype(dtype: str) -> str:
    return dtype[len("torch.") :] if dtype.startswith("torch.") else dtype


def format_flag(value: Optional[bool]) -> str:
    return "—" if value is None else ("True" if value else "False")


def format_version(value: Optional[int]) -> str:
    return "—" if value is None else str(value)


def format_grad_fn(value: Optional[str]) -> str:
    return NONE if value is None else value


UNAVAILABLE = "?"  # a fact PyTorch refused to give (the trace keeps its reason)


def fact_text(state: TensorState, field: str) -> str:
    """One fact of a tensor as a table cell spells it; every renderer asks here.

    A fact PyTorch refused to give is ``?``: its recorded placeholder is not a value.
    """
    if field in {name for name, _ in getattr(state, "unavailable", ())}:
        return UNAVAILABLE
    if field == "values":
        return format_values(state.values, state.shape)
    if field == "grad":
        return format_values(state.grad, state.shape)
    if field == "shape":
        return format_shape(state.shape)
    if field == "stride":
        return format_stride(state)
    if field == "contiguous":
        return format_flag(is_contiguous(state))
    if field == "dtype":
        return format_dtype(state.dtype)
    if field == "device":
        return state.device
    if field == "storage":
        return format_storage(state)
    if field == "version":
        return format_version(state.version)
    if field == "grad_fn":
        return format_grad_fn(state.grad_fn)
    return format_flag(getattr(state, field))


def storage_with_partners(step: Step, state: TensorState) -> str:
    """``S1 (with a, b)``: the label and the other names on that storage, for variant cells."""
    partners = [n for n in storage_names(step, state) if n != state.name]
    return format_storage(state) + (f" (with {', '.join(partners)})" if partners else "")


def storage_names(step: Step, state: TensorState) -> tuple:
    """Every name of the step on ``state``'s storage, in table order (``()`` without one)."""
    if state.storage is None:
        return ()
    return tuple(t.name for t in step.tensors if t.storage == state.storage)


def outcome(step: Optional[Step]) -> str:
    """A step's outcome in a few words: ``ok``, ``raised RuntimeError``, ..."""
    if step is None:
        return "not run"
    if step.status == "timeout":
        return "timed out"
    if step.status == "killed":
        return "was killed"
    if step.error is not None:
        return f"raised {step.error.type}"
    if step.status not in ("ok", "raised"):
        return step.status
    return "ok"


def declared_raise_met(step: Step) -> bool:
    """The step declared ``raises`` and raised just that (decided by the tracer)."""
    return step.raised_as_declared


def declared_warn_met(step: Step) -> bool:
    """The step declared ``warns`` and emitted such a warning (decided by the tracer)."""
    return step.warned_as_declared


def error_headline(error: ErrorInfo) -> str:
    return f"{error.type}: {error.message}" if error.message else error.type


def plural(count: int, word: str, many: Optional[str] = None) -> str:
    return f"{count_text(count)} {word if count == 1 else (many or word + 's')}"


def saved_tensor_text(saved: SavedTensor) -> str:
    """One tensor a graph node saved, and why it breaks backward, if it does.

    For example ``other = v (S2) v0``.
    """
    if saved.freed:
        return f"{saved.attr}: freed by backward ✗"
    who = saved.tensor if saved.tensor is not None else "unnamed"
    where = f" ({saved.storage})" if saved.storage else ""
    if saved.saved_version is None:
        return f"{saved.attr} = {who}{where}, version unknown"
    if saved.stale:
        return (
            f"{saved.attr} = {who}{where} saved at v{saved.saved_version}, "
            f"now v{saved.version} ✗ stale"
        )
    return f"{saved.attr} = {who}{where} v{saved.saved_version}"


def saved_text(saved: Sequence[SavedTensor]) -> str:
    """What a node saved, on one line; empty when it saved no tensor."""
    if not saved:
        return ""
    parts = [saved_tensor_text(s) for s in saved if not s.freed]
    freed = [s.attr for s in saved if s.freed]
    if freed:
        parts.append(f"{', '.join(freed)}: freed by backward ✗")
    return "saved: " + "; ".join(parts)
