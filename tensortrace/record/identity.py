"""Who a tensor object is, without a weak reference to it.

PyTorch refuses ``torch.utils.swap_tensors`` (and so ``Module._apply`` once
``torch.__future__.set_swap_module_params_on_conversion(True)``, ``lin.double()``,
``load_state_dict``) on a tensor that any weak reference points to, Python's or
C++'s. The tool must never change what PyTorch allows, so it never takes a weak
reference to a tensor: it tells tensors apart by a *mark*, the address of the
``TensorImpl`` the object holds (``_cdata``), which keeps nothing alive. Storages
(``UntypedStorage`` objects, NumPy arrays) may be weakly referenced:
``swap_tensors`` checks only the two tensors.

The ``TensorImpl`` is the tensor PyTorch knows: the Python object over it may be
made anew (a gradient made inside the engine and read later as ``x.grad``) and
still be the same tensor. A mark can outlive its tensor, and a new
``TensorImpl`` at the address of a dead one gets its mark, so callers compare
more: the object's ``id`` where the object is in hand (the snapshot cache and
the op recorder's per-step reads), the storage's liveness where it is not (a
tensor keeps its storage alive, so a mark whose storage died names no tensor
alive now). ``swap_tensors`` exchanges the ``TensorImpl`` under an object, so
a swapped tensor gets a new mark and is read again, as it should be.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

import torch

Mark = int

_CDATA = torch._C.TensorBase.__dict__["_cdata"].__get__
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_mode_on = torch._C._is_torch_function_mode_enabled
_off = torch._C.DisableTorchFunction


def mark(t: Any) -> Optional[Mark]:
    """The mark of tensor ``t`` (None for an object that is no tensor), read without any
    ``__torch_function__`` seeing the read."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        if type(t) in _PLAIN and not _mode_on():
            return _CDATA(t)
        with _off():
            return _CDATA(t)
    except Exception:  # a tensor-like object without a TensorImpl
        return None


def storage_ref(t: Any) -> Optional[Any]:
    """A weak reference to the storage of tensor ``t`` (allowed: it is no tensor), or None."""
    try:
        with _off():
            return weakref.ref(t.untyped_storage())
    except Exception:  # sparse, nested, functorch-wrapped and other storage-less tensors
        return None


__all__ = ["Mark", "mark", "storage_ref"]
