"""The light wrappers the recorder puts on PyTorch: where the user's code cuts a tensor off
the graph, shares memory with NumPy, rebinds ``.data``, freezes parameters, steps an optimizer.

Each wrapper calls the original and only notes what the user's line did:

* cuts: ``torch.no_grad()`` (entered, or used as a decorator: the decorated
  function is named), ``Tensor.detach``/``torch.detach``, the ``.data``
  getter, ``Tensor.numpy``, ``Tensor.item`` on a tensor that requires grad;
  a ``detach()`` remembers once per line which leaves the detached graph
  reached (so that a later optimizer step can name the cut that starved them);
* NumPy sharing: ``Tensor.numpy`` and ``torch.from_numpy`` (their memory is
  fingerprinted, as writes through NumPy bump no version);
* ``.data = value``: the tensor keeps its identity and takes new memory, so a
  graph that saved the tensor itself reads the new values at backward with no
  version bump; the old contents are fingerprinted first;
* freezing: ``requires_grad = False`` and ``requires_grad_(False)`` on a leaf;
* optimizer steps, through ``torch.optim``'s global step hooks: before a
  step, parameters without a gradient that a ``detach()`` since the
  optimizer's last step cut off (``recorder.starve``); after it, the step's
  line.

Nothing here changes what the wrapped call returns or raises.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Optional, Tuple

import torch

from .graphs import leaf_keys
from .places import Spot, is_user_code, spot_of, storage_key, user_frame

if TYPE_CHECKING:
    from .recorder import Recorder

_CONTEXTLIB = ("torch/utils/_contextlib.py", "torch\\utils\\_contextlib.py")


def _spot(frame: Any) -> Optional[Spot]:
    if frame is None:
        return None
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


class Taps:
    """The wrappers of one recorder; ``install`` puts them on, the recorder's undo list takes
    them off."""

    def __init__(self, rec: "Recorder") -> None:
        self.rec = rec
        self.detach_leaves: Dict[Spot, FrozenSet[Optional[int]]] = {}
        self.freezes: Dict[Optional[int], Spot] = {}  # memory of a leaf -> where it was frozen
        self._handles: list = []
        self._keys: Dict[int, Tuple[int, Any, FrozenSet[Optional[int]]]] = {}

    def install(self) -> None:
        rec, patch = self.rec, self.rec.patch
        patch(torch.no_grad, "__enter__", self._no_grad(torch.no_grad.__enter__))
        patch(torch.Tensor, "numpy", self._numpy(torch.Tensor.numpy))
        patch(torch.Tensor, "detach", self._detaching(torch.Tensor.detach))
        patch(torch, "detach", self._detaching(torch.detach))
        patch(torch.Tensor, "item", self._item(torch.Tensor.item))
        patch(torch, "from_numpy", self._from_numpy(torch.from_numpy))
        patch(torch.Tensor, "requires_grad_", self._freezing(torch.Tensor.requires_grad_))
        data = torch._C.TensorBase.data
        patch(torch.Tensor, "data", property(self._data_get(data.__get__), self._data_set(data)))
        grad = torch._C.TensorBase.requires_grad
        patch(torch.Tensor, "requires_grad", property(grad.__get__, self._grad_set(grad)))
        try:
            import torch.optim.optimizer as optimizer
        except ImportError:  # pragma: no cover - every supported torch has it
            optimizer = None
        pre = getattr(optimizer, "register_optimizer_step_pre_hook", None)
        post = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if pre is not None and post is not None:
            self._handles = [pre(self._before_step), post(self._after_step)]
            rec.undo(self._remove_hooks)

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # cuts ------------------------------------------------------------------------------
    def _no_grad(self, original: Callable) -> Callable:
        rec = self.rec

        @functools.wraps(original)
        def enter(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled() and not rec.busy:
                frame = sys._getframe(1)
                if frame.f_code.co_filename.endswith(_CONTEXTLIB):  # @torch.no_grad() on a def
                    function = frame.f_locals.get("func")
                    name = getattr(function, "__qualname__", None) or "a function"
                    rec.note_cut(f"@torch.no_grad() on {name}", user_frame(frame))
                else:
                    rec.note_cut("torch.no_grad()", frame)
            return original(*args, **kwargs)

        return enter

    def _detaching(self, original: Callable) -> Callable:
        taps, rec = self, self.rec

        @functools.wraps(original)
        def detach(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not rec.busy and getattr(tensor, "requires_grad", False):
                frame = sys._getframe(1)
                spot = rec.note_cut("detach()", frame)
                if spot is not None and spot not in taps.detach_leaves:
                    taps.remember_leaves(spot, tensor)
            return original(tensor, *args, **kwargs)

        return detach

    def remember_leaves(self, spot: Spot, tensor: Any) -> None:
        """Which leaves a ``detach()`` at ``spot`` cut off (walked once per line)."""
        if len(self.detach_leaves) > 256:
            self.detach_leaves.clear()
        rec = self.rec
        rec.busy = True
        try:
            self.detach_leaves[spot] = leaf_keys(tensor.grad_fn)
        except Exception:
            self.detach_leaves[spot] = frozenset()
        finally:
            rec.busy = False

    def _item(self, original: Callable) -> Callable:
        rec = self.rec

        @functools.wraps(original)
        def item(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not rec.busy and tensor.requires_grad:
                rec.note_cut(".item()", sys._getframe(1))
            return original(tensor, *args, **kwargs)

        return item

    def _data_get(self, original: Callable) -> Callable:
        rec = self.rec

        def data(tensor: Any) -> Any:
            if tensor.requires_grad and not rec.busy:
                rec.note_cut(".data", sys._getframe(1))
            return original(tensor)

        return data

    def _data_set(self, descriptor: Any) -> Callable:
        rec = self.rec

        def set_data(tensor: Any, value: Any) -> None:
            if not rec.busy and rec.index:
                rec.rebinding(tensor, sys._getframe(1))
            descriptor.__set__(tensor, value)

        return set_data

    # NumPy ----------------------------------------------------------------------------
    def _numpy(self, original: Callable) -> Callable:
        rec = self.rec

        @functools.wraps(original)
        def numpy(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not rec.busy:
                frame = sys._getframe(1)
                user = is_user_code(frame.f_code)
                if user and tensor.requires_grad:
                    rec.note_cut(".numpy()", frame)
                rec.shared(storage_key(tensor), _spot(frame) if user else spot_of(frame))
            return original(tensor, *args, **kwargs)

        return numpy

    def _from_numpy(self, original: Callable) -> Callable:
        rec = self.rec

        @functools.wraps(original)
        def from_numpy(array: Any) -> Any:
            made = original(array)
            if not rec.busy:
                rec.shared(storage_key(made), spot_of(sys._getframe(1)))
            return made

        return from_numpy

    # freezing ---------------------------------------------------------------------------
    def _note_freeze(self, tensor: Any, frame: Any) -> None:
        user = user_frame(frame)
        if user is not None and len(self.freezes) < 100_000:
            self.freezes[storage_key(tensor)] = _spot(user)  # type: ignore[assignment]

    def _freezing(self, original: Callable) -> Callable:
        taps = self

        @functools.wraps(original)
        def requires_grad_(tensor: Any, requires_grad: bool = True) -> Any:
            if not requires_grad and tensor.requires_grad and not taps.rec.busy:
                taps._note_freeze(tensor, sys._getframe(1))
            return original(tensor, requires_grad)

        return requires_grad_

    def _grad_set(self, descriptor: Any) -> Callable:
        taps = self

        def set_requires_grad(tensor: Any, value: Any) -> None:
            if not value and not taps.rec.busy and descriptor.__get__(tensor):
                taps._note_freeze(tensor, sys._getframe(1))
            descriptor.__set__(tensor, value)

        return set_requires_grad

    # optimizer steps --------------------------------------------------------------------
    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        rec = self.rec
        if rec.busy or not self.detach_leaves:
            return
        try:
            rec.starve(optimizer, user_frame(sys._getframe(1)))
        except Exception:  # a check that cannot be made must not stop the user's step
            pass

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The step's line; a later step looks at the cuts made after this one."""
        rec = self.rec
        try:
            spot = _spot(user_frame(sys._getframe(1)))
            rec.steps.append((spot, weakref.ref(optimizer), rec.backwards))
            rec.last_step[id(optimizer)] = rec.backwards
        except Exception:
            pass

    def keys_of(self, optimizer: Any) -> FrozenSet[Optional[int]]:
        """The memory of an optimizer's parameters (kept while its groups keep their sizes)."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        known = self._keys.get(id(optimizer))
        if known is not None and known[0] == len(params) and known[1]() is optimizer:
            return known[2]
        keys = frozenset(storage_key(p) for p in params)
        if len(self._keys) > 64:
            self._keys.clear()
        self._keys[id(optimizer)] = (len(params), weakref.ref(optimizer), keys)
        return keys


__all__ = ["Taps"]
