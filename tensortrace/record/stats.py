"""The statistics of a large tensor's summary: one cache-sized chunk at a time, on one thread.

``moments`` reads min and max first, in the tensor's own dtype (exact, and
cheaper than in float64). A chunk whose min equals its max holds one value:
that is its mean, and its deviations are all zero, exactly (``torch.ones``,
``zeros`` and ``full`` cost one pass). Any other chunk is copied into one
float64 buffer that stays in cache for the passes over it: its sum, then the
squares of its deviations from its own mean (``dot``; exact in float64 where
summing squares first would cancel). The chunks' parts are merged as Chan et
al. merge them. One buffer serves every chunk: freeing and allocating 8 MiB
per chunk made glibc raise its mmap threshold and keep freed chunks in the
heap, a peak 5-10% higher at random.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterable, Iterator, Optional, Tuple

import torch

Moments = Tuple[int, float, float, Optional[float], Optional[float], int, int]


def moments(t: torch.Tensor, chunks: Iterable[torch.Tensor], chunk: int) -> Moments:
    """(count, mean, M2, min, max) of the finite elements of ``t``, and its NaN and infinity counts.

    ``chunks`` are views of ``t`` covering each element once, each of at most ``chunk`` elements.
    """
    nan_count = inf_count = 0
    count = 0
    mean = m2 = 0.0
    lo = hi = None
    buffer = None
    with one_thread():
        for part in chunks:
            n = part.numel()
            if buffer is None:
                buffer = torch.empty(min(chunk, t.numel()), dtype=torch.float64, device=t.device)
            c = None
            if part.is_floating_point():
                extremes = tuple(float(v) for v in torch.aminmax(part))
                # min and max finite: so is every element, and nothing needs counting
                if not all(math.isfinite(v) for v in extremes):
                    c = _copy(buffer, part)
                    finite = torch.isfinite(c)
                    n_finite = int(finite.sum())
                    nans = int(torch.isnan(c).sum())
                    nan_count += nans
                    inf_count += n - n_finite - nans
                    c = c[finite]
                    n = n_finite
                    if not n:
                        continue
                    extremes = tuple(float(v) for v in torch.aminmax(c))
            else:
                c = _copy(buffer, part)
                extremes = tuple(float(v) for v in torch.aminmax(c))
            c_min, c_max = extremes
            lo = c_min if lo is None else min(lo, c_min)
            hi = c_max if hi is None else max(hi, c_max)
            if c_min == c_max:
                c_mean, c_m2 = c_min, 0.0
            else:
                if c is None:
                    c = _copy(buffer, part)
                c_mean = float(c.sum()) / n
                c.sub_(c_mean)
                c_m2 = float(torch.dot(c, c))
            total = count + n  # Chan et al.: merge (count, mean, M2) of two parts
            delta = c_mean - mean
            mean += delta * n / total
            m2 += c_m2 + delta * delta * count * n / total
            count = total
    return count, mean, m2, lo, hi, nan_count, inf_count


def _copy(buffer: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """``part`` in float64, in the front of ``buffer``, flat."""
    c = buffer[: part.numel()]
    c.view(part.shape).copy_(part)
    return c


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run PyTorch's kernels on this thread alone, for a while.

    A pass over a chunk that fits in cache is short; spread over the intra-op
    threads, the threads cost more CPU waiting for work than the pass itself
    (three to ten times over on a busy machine). The setting is restored after.
    """
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["moments", "one_thread"]
