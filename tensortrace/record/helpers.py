"""What every scenario's namespace starts with: torch, nn, F and the two sharing helpers.

``same_storage`` and ``shares_memory`` are part of the scenario contract, so
they live apart from the recorder: tests and benchmarks that run scenario
code untraced build the same namespace from here.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch


def same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    """x and y live in the same storage allocation.

    Decided from the allocation, never from a start address alone: two live
    allocations never overlap, so storages on one device whose byte ranges
    overlap are the same memory (a tensor made from a NumPy slice that starts
    part-way into an array has its own storage object over the array's
    bytes). Storages without an address (meta tensors all report 0) are the
    same only when they are the same storage. Tensors with no elements address
    no bytes and are never the same storage as anything.
    """
    with torch._C.DisableTorchFunctionSubclass():
        if x.numel() == 0 or y.numel() == 0 or x.device != y.device:
            return False
        sx, sy = x.untyped_storage(), y.untyped_storage()
        nx, ny = sx.nbytes(), sy.nbytes()
        if nx == 0 or ny == 0:
            return False
        px, py = sx.data_ptr(), sy.data_ptr()
        if px == 0 or py == 0:
            return px == py and sx._cdata == sy._cdata
        return px < py + ny and py < px + nx


def shares_memory(x: Any, y: Any) -> bool:
    """The bytes that x and y address overlap (exact, like numpy.shares_memory)."""
    if x.numel() == 0 or y.numel() == 0 or x.device != y.device:
        return False
    if not same_storage(x, y):
        return False
    return _overlap(_byte_set(x), _byte_set(y))


def _byte_set(t: torch.Tensor) -> List[Tuple[int, int]]:
    """The byte ranges a tensor addresses, merged; exact, bounded by its element count."""
    size = t.element_size()
    base = t.data_ptr()
    shape, stride = list(t.shape), list(t.stride())
    lo = base + sum((n - 1) * s * size for n, s in zip(shape, stride) if s < 0)
    hi = base + sum((n - 1) * s * size for n, s in zip(shape, stride) if s > 0) + size
    dims = sorted((abs(s) * size, n) for n, s in zip(shape, stride) if n > 1 and s != 0)
    contiguous = True
    expect = size
    for step, n in dims:
        if step != expect:
            contiguous = False
            break
        expect = step * n
    if contiguous:
        return [(lo, hi)]
    offsets = torch.zeros((), dtype=torch.int64)
    for n, s in zip(shape, stride):
        if n > 1 and s != 0:
            offsets = (
                offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * (s * size)
            ).reshape(-1)
    starts = sorted(set((offsets.reshape(-1) + base).tolist()))
    ranges: List[Tuple[int, int]] = []
    for st in starts:
        if ranges and st <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], st + size))
        else:
            ranges.append((st, st + size))
    return ranges


def _overlap(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] < b[j][1] and b[j][0] < a[i][1]:
            return True
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return False


def base_namespace() -> Dict[str, Any]:
    """What every scenario starts with (the contract's namespace)."""
    return {
        "__name__": "__scenario__",
        "torch": torch,
        "nn": torch.nn,
        "F": torch.nn.functional,
        "same_storage": same_storage,
        "shares_memory": shares_memory,
    }
