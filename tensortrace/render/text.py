"""Plain-text spellings of recorded facts, shared by every text renderer.

Each function turns one fact of the model into a short string, the same way in
the console, in Markdown and in the summary of what differs between variants,
so that a reader who learns one output can read the others. Text that came
from a scenario or its run goes through ``visible.visible`` first.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..trace import ErrorInfo, SavedTensor, Step, Summary, TensorState, Values
from .facts import is_contiguous
from .visible import visible

# A row or a dimension longer than this is shown as its first and last items.
EDGE_ITEMS = 3
MAX_ITEMS = 2 * EDGE_ITEMS
ELLIPSIS = "…"
NONE = "None"


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
