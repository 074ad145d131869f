"""What a tensor's or a NumPy array's values are recorded as: exact, or a summary.

A tensor of at most ``EXACT_LIMIT`` elements is recorded exactly; a larger one
as a summary (count, min, max, mean, std, NaN and infinity counts, the first
``HEAD`` elements), read chunk by chunk through views, never copies, so the
extra memory is bounded by ``CHUNK`` elements whatever the tensor's size. Only
the distinct elements are read, in memory order: an expanded tensor costs its
storage, a transposed view what its base costs. This is apart from
``probe.py``, which reads every other fact of a tensor, because it owns the
one cost that grows with the tensor.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from ..trace import Summary, Values, encode_number_tree, freeze
from .stats import moments

EXACT_LIMIT = 64  # tensors with at most this many elements are recorded exactly
HEAD = 8  # elements shown at the start of a summary
# elements summarised at a time for large tensors (bounds the extra memory: 2 MiB, in cache)
CHUNK = 1 << 18

try:  # NumPy is optional: torch works without it
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None


def is_ndarray(obj: Any) -> bool:
    return _np is not None and isinstance(obj, _np.ndarray)


def tensor_values(
    t: torch.Tensor, cache: Optional[Dict[Any, Any]] = None, memo: Any = None
) -> Values:
    """Exact values of a small tensor, a summary of a large one.

    ``cache`` (one per snapshot) lets tensors over the same elements, such as
    ``a`` and ``a.t()``, share one pass over their memory; ``memo`` (a
    ``reuse.SnapshotCache``) reuses a summary across steps while the memory's
    fingerprint holds.
    """
    try:
        if t.is_meta:
            return Values(kind="unavailable", reason="a meta tensor has no data")
        if t.layout != torch.strided:
            t = t.to_dense() if t.numel() <= EXACT_LIMIT else t
            if t.layout != torch.strided:
                return Values(kind="unavailable", reason=f"{t.layout} layout")
        if t.is_quantized:
            t = t.dequantize() if t.numel() <= EXACT_LIMIT else t
            if t.is_quantized:
                return Values(kind="unavailable", reason="quantized tensor")
        with torch.no_grad():
            if t.numel() <= EXACT_LIMIT:
                return Values(
                    kind="exact", data=freeze(encode_number_tree(t.detach().cpu().tolist()))
                )
            return Values(kind="summary", summary=_summarise(t.detach(), cache, memo))
    except Exception as exc:  # an exotic tensor: say so rather than fail the trace
        return Values(
            kind="unavailable", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        )


def iter_chunks(t: Any, limit: int) -> Iterator[Any]:
    """Views (never copies) of ``t`` in row-major order, each at most ``limit`` elements.

    Lazy: only one view per level of nesting exists at a time, so walking a
    tensor of 10^8 elements costs a handful of small view objects.
    """
    stack = [_parts(t, limit)]
    while stack:
        cur = next(stack[-1], None)
        if cur is None:
            stack.pop()
            continue
        n = cur.size if is_ndarray(cur) else cur.numel()
        if n <= limit or cur.ndim == 0:
            if n:
                yield cur
        else:
            stack.append(_parts(cur, limit))


def _parts(t: Any, limit: int) -> Iterator[Any]:
    n = t.size if is_ndarray(t) else t.numel()
    if n <= limit or t.ndim == 0:
        yield t
        return
    rows = t.shape[0]
    per_row = n // rows
    if per_row > limit:
        for i in range(rows):
            yield t[i]
    else:
        take = max(1, limit // per_row)
        for i in range(0, rows, take):
            yield t[i : i + take]


def _distinct(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """A view of ``t``'s distinct elements in memory order, and how often each repeats.

    An expanded tensor (stride 0) repeats every element of its storage the
    same number of times, so its statistics follow from the storage's: a
    ``torch.ones(1).expand(10**12)`` costs one element, not 10^12. Ordering
    the dimensions by stride reads memory front to back, so a transposed
    view costs what its base costs.
    """
    repeat = 1
    kept: List[Tuple[int, int]] = []
    for n, s in zip(t.shape, t.stride()):
        if n == 1:
            continue
        if s == 0:
            repeat *= n
        else:
            kept.append((abs(s), n))
    if repeat == 1 and kept == sorted(kept, reverse=True):
        return t, 1
    kept.sort(reverse=True)
    view = t.as_strided([n for _, n in kept], [s for s, _ in kept], t.storage_offset())
    return view, repeat


def _summarise(
    t: torch.Tensor, cache: Optional[Dict[Any, Any]] = None, memo: Any = None
) -> Summary:
    numel = t.numel()
    head: List[Any] = []
    for chunk in iter_chunks(t, HEAD):
        head.extend(chunk.reshape(-1).cpu().tolist())
        if len(head) >= HEAD:
            break
    head = head[:HEAD]
    if t.is_complex():
        return Summary(numel=numel, head=freeze(encode_number_tree(head)))
    distinct, repeat = _distinct(t)
    key = None
    if cache is not None:
        try:
            key = (
                str(t.device),
                t.dtype,
                distinct.data_ptr(),
                tuple(distinct.shape),
                tuple(distinct.stride()),
            )
        except Exception:
            key = None
    stats = cache.get(key) if key is not None else None
    if stats is None:
        if memo is not None and key is not None:
            stats = memo.summary_stats(key, distinct, lambda: _moments(distinct))
        else:
            stats = _moments(distinct)
        if key is not None:
            cache[key] = stats
    count, mean, m2, lo, hi, nan_count, inf_count = stats
    count, m2 = count * repeat, m2 * repeat
    std = math.sqrt(m2 / (count - 1)) if count > 1 else (0.0 if count == 1 else None)
    return Summary(
        numel=numel,
        min=lo,
        max=hi,
        mean=mean if count else None,
        std=std,
        nan_count=nan_count * repeat,
        inf_count=inf_count * repeat,
        head=freeze(encode_number_tree(head)),
    )


def _moments(
    t: torch.Tensor,
) -> Tuple[int, float, float, Optional[float], Optional[float], int, int]:
    """(count, mean, M2, min, max) of the finite elements, and the NaN and infinity counts.

    As ``stats.moments`` computes them, chunk by chunk.
    """
    return moments(t, iter_chunks(t, CHUNK), CHUNK)


def ndarray_values(arr: Any) -> Values:
    try:
        if arr.dtype.kind not in "biufc":
            return Values(kind="unavailable", reason=f"dtype {arr.dtype}")
        if arr.size <= EXACT_LIMIT:
            return Values(kind="exact", data=freeze(encode_number_tree(arr.tolist())))
        head: List[Any] = []
        for chunk in iter_chunks(arr, HEAD):
            head.extend(chunk.reshape(-1).tolist())
            if len(head) >= HEAD:
                break
        if arr.dtype.kind == "c":
            return Values(
                kind="summary",
                summary=Summary(numel=int(arr.size), head=freeze(encode_number_tree(head[:HEAD]))),
            )
        nan_count = inf_count = count = 0
        lo = hi = None
        mean = m2 = 0.0  # merged per chunk as stats.moments merges them (Chan et al.): summing
        # squares first cancels to 0.0 for values far from zero (1e10 + arange(100))
        for chunk in iter_chunks(arr, CHUNK):
            c = chunk.astype(_np.float64).reshape(-1)
            finite = _np.isfinite(c)
            nan_count += int(_np.isnan(c).sum())
            inf_count += int(_np.isinf(c).sum())
            c = c[finite]
            if not c.size:
                continue
            lo = float(c.min()) if lo is None else min(lo, float(c.min()))
            hi = float(c.max()) if hi is None else max(hi, float(c.max()))
            n = int(c.size)
            c_mean = float(c.sum()) / n
            d = c - c_mean
            c_m2 = float(_np.dot(d, d))
            total = count + n
            delta = c_mean - mean
            mean += delta * n / total
            m2 += c_m2 + delta * delta * count * n / total
            count = total
        std = math.sqrt(m2 / (count - 1)) if count > 1 else None
        mean = mean if count else None
        summary = Summary(
            numel=int(arr.size),
            min=lo,
            max=hi,
            mean=mean,
            std=std,
            nan_count=nan_count,
            inf_count=inf_count,
            head=freeze(encode_number_tree(head[:HEAD])),
        )
        return Values(kind="summary", summary=summary)
    except Exception as exc:
        return Values(
            kind="unavailable", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        )
