"""A cheap fingerprint of a tensor's contents: never a copy of a large tensor.

Small tensors (up to ``SMALL_BYTES``) are fingerprinted by all their bytes.
Larger ones by ``SAMPLES`` evenly spaced elements plus their first and last
``EDGE`` elements, read in place through a NumPy view, then hashed. So a write
to a large tensor that changes none of the sampled elements goes unseen:
changing one element of a million rarely shows. docs/doctor.md says so.

Tensors NumPy can view in place (CPU, strided, a dtype NumPy has) are read
through that view. Others (a GPU's memory, bfloat16) are read through
PyTorch: the sampled elements are gathered on their device and copied to the
CPU as bytes, a device-to-host copy of at most a few KiB, and only where a
fingerprint is taken (before a ``.data``-style write, at a backward that
reads a fingerprinted tensor), never per operation. Sparse, quantized and
other layouts get ``None`` and are only version-checked.
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
        if t.layout is not torch.strided or t.is_quantized:
            return None
        with torch._C._DisableTorchDispatch():  # our own look: not an operation of the user's
            if t.device.type != "cpu" or t.is_conj() or t.is_neg():
                return _through_torch(t.detach())
            try:
                array = t.detach().numpy()
            except TypeError:  # a dtype NumPy has not (bfloat16)
                return _through_torch(t.detach())
    except (RuntimeError, TypeError, AttributeError):
        return None
    if array.nbytes <= SMALL_BYTES:
        return hash(array.tobytes())
    if not array.flags.c_contiguous:
        return hash(array.flat[_positions(array.size)].tobytes())
    flat = array.reshape(-1)
    step = max(1, flat.size // SAMPLES)
    return hash(flat[::step].tobytes() + flat[:EDGE].tobytes() + flat[-EDGE:].tobytes())


def _through_torch(t: Any) -> Optional[int]:
    """The fingerprint read with PyTorch's own operations: the sample gathered where the tensor
    lives, then its bytes copied to the CPU."""
    with torch.no_grad():
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        numel = t.numel()
        if numel * t.element_size() <= SMALL_BYTES:
            sample = t.reshape(-1)
        else:
            if t.is_contiguous():
                flat = t.reshape(-1)
                step = max(1, numel // SAMPLES)
                sample = torch.cat([flat[::step], flat[:EDGE], flat[-EDGE:]])
            else:  # take() reads the elements in place, whatever the strides
                sample = torch.take(t, torch.as_tensor(_positions(numel), device=t.device))
        raw = sample.contiguous().cpu()
        return hash(raw.view(torch.uint8).numpy().tobytes()) if raw.numel() else hash(b"")


_INDEXES: Dict[int, Any] = {}  # numel -> the sampled flat positions of a non-contiguous tensor


def _positions(numel: int) -> Any:
    found = _INDEXES.get(numel)
    if found is None:
        found = np.linspace(0, numel - 1, SAMPLES).astype(np.int64)
        if len(_INDEXES) > 4096:
            _INDEXES.clear()
        _INDEXES[numel] = found
    return found
