"""A cheap fingerprint of a tensor's contents: never a copy of a large tensor.

Small tensors (up to ``SMALL_BYTES``) are fingerprinted by all their bytes.
Larger ones by ``SAMPLES`` evenly spaced elements plus their first and last
``EDGE`` elements, read in place through a NumPy view, then hashed. So a write
to a large tensor that changes none of the sampled elements goes unseen:
changing one element of a million rarely shows. docs/doctor.md says so.

Only tensors NumPy can view in place are fingerprinted (CPU, strided, a dtype
NumPy has); the rest get ``None`` and are only version-checked.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

SMALL_BYTES = 4096
SAMPLES = 1024  # evenly spaced elements of a large tensor
EDGE = 256  # and its first and last elements, read as one block each


def fingerprint(t: Any) -> Optional[int]:
    """A number that changes when ``t``'s contents change (a sampled one for large tensors)."""
    try:
        if t.device.type != "cpu" or t.layout is not torch.strided or t.is_conj() or t.is_neg():
            return None
        with torch._C._DisableTorchDispatch():  # our own look: not an operation of the user's
            array = t.detach().numpy()
    except (RuntimeError, TypeError, AttributeError):
        return None
    if array.nbytes <= SMALL_BYTES:
        return hash(array.tobytes())
    if not array.flags.c_contiguous:
        return hash(array.flat[_positions(array.size)].tobytes())
    flat = array.reshape(-1)
    step = max(1, flat.size // SAMPLES)
    return hash(flat[::step].tobytes() + flat[:EDGE].tobytes() + flat[-EDGE:].tobytes())


_INDEXES: Dict[int, Any] = {}  # numel -> the sampled flat positions of a non-contiguous tensor


def _positions(numel: int) -> Any:
    found = _INDEXES.get(numel)
    if found is None:
        found = np.linspace(0, numel - 1, SAMPLES).astype(np.int64)
        if len(_INDEXES) > 4096:
            _INDEXES.clear()
        _INDEXES[numel] = found
    return found
