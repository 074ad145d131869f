"""Plain-text spellings of recorded facts, shared by every text renderer.

Each function turns one fact of the model into a short string, the same way in
the console, in Markdown and in the summary of what differs between variants,
so that a reader who learns one output can read the others.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..model import ErrorInfo, Step, Summary, TensorState, Values

# A row or a dimension longer than this is shown as its first and last items.
EDGE_ITEMS = 3
MAX_ITEMS = 2 * EDGE_ITEMS
ELLIPSIS = "…"
NONE = "None"


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
        return "[" + ", ".join(
            x if x is ELLIPSIS else format_number(x) for x in _edges(list(items))
        ) + "]"
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


def format_dtype(dtype: str) -> str:
    return dtype[len("torch."):] if dtype.startswith("torch.") else dtype


def format_flag(value: Optional[bool]) -> str:
    return "—" if value is None else ("True" if value else "False")


def format_version(value: Optional[int]) -> str:
    return "—" if value is None else str(value)


def format_grad_fn(value: Optional[str]) -> str:
    return NONE if value is None else value


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
    return f"{count:,} {word if count == 1 else (many or word + 's')}"
