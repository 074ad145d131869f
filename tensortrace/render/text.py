"""Plain-text spellings of recorded facts, shared by every text renderer.

Each function turns one fact of the model into a short string, the same way in
the console, in Markdown and in the summary of what differs between variants,
so that a reader who learns one output can read the others. Text that came
from a scenario or its run goes through ``visible.visible`` first.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

from ..trace import ErrorInfo, SavedTensor, Step, Summary, TensorState, Values
from .facts import is_contiguous
from .visible import visible

# A row or a dimension longer than this is shown as its first and last items.
EDGE_ITEMS = 3
MAX_ITEMS = 2 * EDGE_ITEMS
ELLIPSIS = "…"
NONE = "None"
# A tensor of more elements than this is said in one line (``value_line``) unless the full
# values are asked for (``--values full``): an 8×4 weight is a block of numbers nobody reads.
# It is where a row of values would start to be cut to its first and last items.
FEW_ELEMENTS = MAX_ITEMS
# The first values a one-line summary ends with.
LINE_HEAD = 3


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


def format_number(value: Any, digits: int = 4) -> str:
    """One element, spelled close to how ``print(tensor)`` spells it (``digits`` significant)."""
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
        spelled = f"{value:.{digits}g}"
        # rounded to a whole number (1.003 to 3 digits): still a float, as torch spells one
        return spelled if "." in spelled or "e" in spelled else spelled + "."
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


def format_values(
    values: Optional[Values],
    shape: Optional[tuple] = None,
    *,
    full: bool = False,
    dtype: Optional[str] = None,
) -> str:
    """Values as a table cell shows them; ``shape`` is added to a summary, which lacks it.

    Past ``FEW_ELEMENTS`` elements they are one line (``value_line``) unless ``full``; then
    they are every recorded element (a large tensor's recorded summary, over a few lines).
    """
    if values is None:
        return NONE
    if values.kind == "exact":
        if not full and _element_count(values.data) > FEW_ELEMENTS:
            return value_line(values, shape, dtype)
        return format_data(values.data)
    if values.kind == "summary" and values.summary is not None:
        if not full:
            return value_line(values, shape, dtype)
        return format_summary(values.summary, shape)
    return f"({values.reason or 'values unavailable'})"


def _element_count(data: Any) -> int:
    if not isinstance(data, (list, tuple)):
        return 1
    if data and isinstance(data[0], (list, tuple)):
        return sum(_element_count(part) for part in data)
    return len(data)


def _flat(data: Any) -> List[Any]:
    if not isinstance(data, (list, tuple)):
        return [data]
    if not data or not isinstance(data[0], (list, tuple)):
        return list(data)
    out: List[Any] = []
    for part in data:  # recursion over dimensions only
        out.extend(_flat(part))
    return out


def _data_shape(data: Any) -> tuple:
    dims = []
    while isinstance(data, (list, tuple)):
        dims.append(len(data))
        if not data:
            break
        data = data[0]
    return tuple(dims)


def value_line(values: Values, shape: Optional[tuple] = None, dtype: Optional[str] = None) -> str:
    """A tensor in one line, as lovely-tensors taught people to read one:
    ``[16, 4] x∈[-2.115, 3.411] μ=0.02231 σ=1.011 [-1.126, -1.152, -0.2506, …]``.

    Numbers have three significant digits. Shape (from the record, or the data's
    nesting; else ``n=`` the element count),
    the dtype when it is not float32,
    the range, mean and standard deviation of the finite elements, the NaN and
    infinity counts when there are any, and the first few values. From exact data
    the statistics are computed here as the recorder computes a summary's.
    """
    if values.kind == "summary" and values.summary is not None:
        s = values.summary
        numel, lo, hi, mean, std = s.numel, s.min, s.max, s.mean, s.std
        nans, infs, head = s.nan_count, s.inf_count, list(s.head)
    elif values.kind == "exact":
        items = _flat(values.data)
        numel = len(items)
        if shape is None:
            shape = _data_shape(values.data)
        lo, hi, mean, std, nans, infs = _moments(items)
        head = items
    else:
        return f"({values.reason or 'values unavailable'})"
    # the shape says how many elements there are; without one, the count does
    parts = ["[" + ", ".join(str(n) for n in shape) + "]" if shape is not None else f"n={numel:,}"]
    if dtype is not None and format_dtype(dtype) != "float32":
        parts.append(format_dtype(dtype))
    if lo is not None and hi is not None:
        parts.append(f"x∈[{format_number(lo, 3)}, {format_number(hi, 3)}]")
    if mean is not None:
        parts.append(f"μ={format_number(mean, 3)}")
    if std is not None:
        parts.append(f"σ={format_number(std, 3)}")
    if nans:
        parts.append(f"nan={nans:,}")
    if infs:
        parts.append(f"inf={infs:,}")
    if head:
        shown = ", ".join(format_number(x, 3) for x in head[:LINE_HEAD])
        parts.append(f"[{shown}, {ELLIPSIS}]" if numel > LINE_HEAD else f"[{shown}]")
    return " ".join(p for p in parts if p)


def value_brief(values: Optional[Values]) -> str:
    """Values in a few words, for a line that says many (a gradient on a flow's edge): a small
    tensor's values on one line, a larger one's shape (or count) and range."""
    if values is None:
        return NONE
    if values.kind == "exact" and _element_count(values.data) <= FEW_ELEMENTS:
        return " ".join(format_data(values.data).split())
    if values.kind == "exact":
        shape = "[" + ", ".join(str(n) for n in _data_shape(values.data)) + "]"
        lo, hi = _moments(_flat(values.data))[:2]
    elif values.kind == "summary" and values.summary is not None:
        shape, lo, hi = f"n={values.summary.numel:,}", values.summary.min, values.summary.max
    else:
        return f"({values.reason or 'values unavailable'})"
    if lo is None or hi is None:
        return shape
    return f"{shape} x∈[{format_number(lo, 3)}, {format_number(hi, 3)}]"


def grad_norm(values: Optional[Values]) -> str:
    """The 2-norm of a gradient, from its recorded values (exact, or a summary's count, mean and
    standard deviation); ``nan`` or ``inf`` when it holds such an element, ``None`` without one."""
    if values is None:
        return NONE
    if values.kind == "exact":
        items = _flat(values.data)
        lo, hi, mean, std, nans, infs = _moments(items)
        count = len(items) - nans - infs
    elif values.kind == "summary" and values.summary is not None:
        s = values.summary
        mean, std, nans, infs = s.mean, s.std, s.nan_count, s.inf_count
        count = s.numel - nans - infs
    else:
        return UNAVAILABLE
    if nans:
        return "nan"
    if infs:
        return "inf"
    if not count or mean is None:
        return "0." if not count else UNAVAILABLE
    if isinstance(mean, str) or isinstance(std, str):  # an overflow, spelled
        return "inf"
    squares = count * mean * mean + (count - 1) * (std or 0.0) ** 2
    return format_number(math.sqrt(max(squares, 0.0)), 3)


_SPELLED = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _moments(items: Sequence[Any]) -> Tuple[Any, Any, Any, Any, int, int]:
    """(min, max, mean, sample std, NaN count, infinity count) of recorded elements; the
    statistics are over the finite ones, None where there are none (or no order: complex)."""
    finite: List[float] = []
    nans = infs = 0
    for x in items:
        if isinstance(x, str):
            x = _SPELLED.get(x)
            if x is None:  # a complex number, spelled: no order
                return None, None, None, None, 0, 0
        if isinstance(x, bool):
            x = int(x)
        if not isinstance(x, (int, float)):
            return None, None, None, None, 0, 0
        if isinstance(x, float) and math.isnan(x):
            nans += 1
        elif isinstance(x, float) and math.isinf(x):
            infs += 1
        else:
            finite.append(x)
    if not finite:
        return None, None, None, None, nans, infs
    mean = math.fsum(finite) / len(finite)
    std = (
        math.sqrt(math.fsum((x - mean) ** 2 for x in finite) / (len(finite) - 1))
        if len(finite) > 1
        else 0.0
    )
    return min(finite), max(finite), mean, std, nans, infs


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


def fact_text(state: TensorState, field: str, full: bool = False) -> str:
    """One fact of a tensor as a table cell spells it; every renderer asks here.

    A fact PyTorch refused to give is ``?``: its recorded placeholder is not a value.
    ``full``: values and grads element by element, however many (``--values full``).
    """
    if field in {name for name, _ in getattr(state, "unavailable", ())}:
        return UNAVAILABLE
    if field == "values":
        return format_values(state.values, state.shape, full=full)
    if field == "grad":
        return format_values(state.grad, state.shape, full=full)
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
