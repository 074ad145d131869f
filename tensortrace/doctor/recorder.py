"""Watch a run in this process: what autograd saves, what writes into it, where links are cut.

Three light instruments, on only between ``Recorder.start`` and ``stop``:

* ``saved_tensors_hooks``: the pack hook returns a ``SavedTensor`` holding the
  tensor (never a copy) with its version, its memory's address and the
  user's line, and a fingerprint of its contents (``fingerprint.py``) taken
  before anything could change them without a version bump: at the save for
  memory NumPy shares, else just before the first ``.data``-style write the
  watch sees or the first ``.numpy()`` of its memory. A saved *output* is held as its
  ``detach()`` alias (same memory, same version counter): holding the output
  itself would make a cycle through the graph's C++ objects that Python's
  collector cannot free, and every step would leak its graph. Under hooks
  PyTorch skips its own version check, so the unpack hook makes it, raising
  the very error PyTorch raises, word for word; during a backward it also
  compares a fingerprint taken, which finds writes that bump no version
  (``.data``, NumPy).
* a ``TorchDispatchMode`` sees each ATen operation while a saved tensor is
  alive (from the first save until a backward frees the last one: a write
  can hit nothing outside that window, and each operation the mode sees costs
  a Python call): one that writes (``Tensor(a!)`` in its schema) into the
  memory of a live saved tensor is recorded with the user's line and the name
  that line used.
* ``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped (which
  covers ``Tensor.backward``) to know each backward's line, and to read a
  failure while its graph and frame still exist (``diagnose.py``);
  ``torch.no_grad.__enter__``, ``Tensor.detach``, ``torch.detach``,
  ``Tensor.data``, ``Tensor.numpy`` and ``torch.from_numpy`` are wrapped to
  record cuts (the mode is off between steps, when ``h = h.detach()`` is
  typical), and memory NumPy shares.

Nothing here changes what the user's code computes, raises or keeps alive
beyond the graph's own lifetime: a record lives as long as the graph node
that saved it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import weakref
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import _pop_mode_temporarily
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_mode

from .fingerprint import fingerprint
from .messages import stale_message
from .places import Spot, is_user_code, spot_of, storage_key, user_frame
from .watch import Call, SavedTensor, WriteSeen, Watch

MAX_WRITES = 16  # writes kept per saved tensor
MAX_CUTS = 64  # recent cuts kept
_SEQ = torch._C._autograd._get_sequence_nr  # the sequence number the next graph node gets
_NO_DISPATCH = torch._C._DisableTorchDispatch


_WRAPPERS = tuple(
    os.path.join(os.path.dirname(torch.__file__), *parts)
    for parts in (("_dynamo", ""), ("_compile.py",), ("utils", "_python_dispatch.py"))
)
_NN = os.path.join(os.path.dirname(torch.__file__), "nn", "")


def outside(frame: Any) -> Any:
    """The first frame out from a dispatch mode's handler that is not torch's wrapping of it."""
    while frame is not None and frame.f_code.co_filename.startswith(_WRAPPERS):
        frame = frame.f_back
    return frame


def _torch_nn_between(frame: Any, user: Any) -> Optional[str]:
    """``file:function`` of a torch.nn frame between a write and the user's line (``F.relu``)."""
    while frame is not None and frame is not user:
        name = frame.f_code.co_filename
        if name.startswith(_NN):
            return f"{name}:{frame.f_code.co_name}"
        frame = frame.f_back
    return None


class Recorder:
    """The state of one watched run, and the hooks that feed it."""

    def __init__(self) -> None:
        self.busy = False  # inside our own hook: our operations are not the user's
        self.index: Dict[Optional[int], List[Any]] = {}  # memory address -> weakrefs to SavedTensor
        self.saved = 0
        self.writes = 0
        self.calls: deque = deque(maxlen=256)
        self.backwards = 0
        self.current: Optional[Call] = None
        self.cuts: deque = deque(maxlen=MAX_CUTS)  # (kind, spot, key, backward count)
        self.numpy_views: Dict[Optional[int], Optional[Spot]] = {}  # memory NumPy shares
        self.stale: Optional[Tuple[SavedTensor, int, Optional[str]]] = None
        self.pending: List[Tuple[WriteSeen, SavedTensor]] = []  # writes whose bump is not read yet
        self.hits: List[Tuple[SavedTensor, Any]] = []  # silent changes read by the running backward
        # (sequence number of its node, line) of the inputs the running backward read last
        self.unpacked: deque = deque(maxlen=64)
        self.silent: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
        self.failures: deque = deque(maxlen=8)  # (the exception, its Failure), the latest
        self._undo: List[Callable[[], None]] = []
        self._hooks: Any = None
        self._mode: Optional[Watch] = None
        self._watching = False  # whether the mode is on the dispatch mode stack now
        self.nonfinite: Any = None  # nonfinite.NonFiniteWatch: NaN and Inf, set by the session

    # switching on and off ---------------------------------------------------------
    def start(self) -> None:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        self._patch(torch.autograd, "backward", self._wrap(torch.autograd.backward, "backward"))
        self._patch(torch.autograd, "grad", self._wrap(torch.autograd.grad, "autograd.grad"))
        enter = self._cutting(torch.no_grad.__enter__, "torch.no_grad()")
        self._patch(torch.no_grad, "__enter__", enter)
        self._patch(torch.Tensor, "numpy", self._numpy(torch.Tensor.numpy))
        self._patch(torch.Tensor, "detach", self._detaching(torch.Tensor.detach))
        self._patch(torch, "detach", self._detaching(torch.detach))
        self._patch(torch, "from_numpy", self._from_numpy(torch.from_numpy))
        base = torch._C.TensorBase.data
        self._patch(torch.Tensor, "data", property(self._data_get(base.__get__), base.__set__))
        self._mode = Watch(self)
        self._mode.__enter__()
        self._watching = True

    def stop(self) -> None:
        self.settle_writes()
        if self._mode is not None and self._watching:
            self._mode.__exit__(None, None, None)
        self._mode, self._watching = None, False
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    # saved tensors ----------------------------------------------------------------
    def pack(self, t: Any) -> Any:
        if self.busy:
            return t
        self.busy = True
        try:
            g = t.grad_fn
            is_output = g is not None and g._sequence_nr() == _SEQ() - 1
            if is_output:
                with _NO_DISPATCH():  # an alias for autograd's own use: not the code's operation
                    keep = t.detach()
            else:
                keep = t
            key = storage_key(t)
            fp = fingerprint(t) if key in self.numpy_views else None
            saved = SavedTensor(t, keep, fp, key, spot_of(sys._getframe(1)), g, is_output)
        except Exception:
            return t
        finally:
            self.busy = False
        self.saved += 1
        self.index.setdefault(key, []).append(weakref.ref(saved))
        if not self._watching:
            self.wake()
            if self.nonfinite is not None and is_output:  # its operation ran before the wake
                self.nonfinite.unwatched_output(t)
        return saved

    def wake(self) -> None:
        """The write watch on again: a saved tensor is alive. Only from an empty mode stack
        (pushing above a mode of the code's own would break its exit), never inside a backward
        (whose mode stack is popped for the while)."""
        if self._mode is not None and self.current is None and _current_mode() is None:
            self._mode.__enter__()
            self._watching = True

    def rest(self) -> None:
        """The write watch off while no saved tensor is alive: no write can hit one (it stays
        on when every operation is checked for NaN and Inf)."""
        if self.nonfinite is not None and self.nonfinite.every_op:
            return
        if self._watching and not self.index and _current_mode() is self._mode:
            self.settle_writes()
            self._mode.__exit__(None, None, None)
            self._watching = False

    def unpack(self, saved: Any) -> Any:
        if not isinstance(saved, SavedTensor):
            return saved
        t = saved.tensor
        now = t._version
        if now != saved.version:
            node = torch._C._current_autograd_node()
            name = None if node is None else node.name()
            self.stale = (saved, now, name)
            raise RuntimeError(stale_message(saved, now, name))  # PyTorch's words
        if self.current is not None and not saved.is_output:
            g = t.grad_fn  # an input from another graph node: where a freed graph may begin
            if g is not None:
                self.unpacked.append((g._sequence_nr(), saved.spot))
        if saved.fp is not None and self.current is not None and not self.busy:
            self.busy = True
            try:
                changed = fingerprint(t) != saved.fp
            finally:
                self.busy = False
            if changed:
                self.hits.append((saved, torch._C._current_autograd_node()))
        return t

    def live(self, key: Optional[int]) -> List[SavedTensor]:
        """The saved tensors still held by a graph whose memory is at ``key``."""
        refs = self.index.get(key)
        if not refs:
            return []
        found = [s for s in (r() for r in refs) if s is not None]
        if len(found) < len(refs):
            if found:
                self.index[key] = [weakref.ref(s) for s in found]
            else:
                del self.index[key]
        return found

    def prune(self) -> None:
        for key in list(self.index):
            self.live(key)

    # writes and cuts --------------------------------------------------------------
    def note_writes(
        self, func: Any, plan: Tuple[Tuple[int, str], ...], args: Any, kwargs: Any
    ) -> None:
        for position, name in plan:
            value = kwargs.get(name) if position < 0 or position >= len(args) else args[position]
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    self._note_write(func, t)

    def _note_write(self, func: Any, t: Any) -> None:
        key = storage_key(t)
        targets = self.live(key)
        if not targets:
            return
        from .places import name_in

        caller = outside(sys._getframe(3))
        frame = user_frame(caller)
        via = _torch_nn_between(caller, frame)
        op = f"{func.namespace}.{func.overloadpacket.__name__}"
        spot = (
            None
            if frame is None
            else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        )
        seen = WriteSeen(op, spot, name_in(frame, t, key), targets[0].tensor._version, via)
        self.writes += 1
        self.fingerprint(targets)  # before the write runs: the contents as saved
        self.pending.append((seen, targets[0]))
        for saved in targets:
            if len(saved.writes) < MAX_WRITES:
                saved.writes.append(seen)

    def settle_writes(self) -> None:
        """Whether each write just seen moved its saved tensor's version (``.data`` does not).

        PyTorch bumps the version after the dispatch mode returns, so this is read at the
        next operation, or when backward starts."""
        for seen, saved in self.pending:
            if saved.tensor._version == seen.version:
                seen.version = None
        self.pending.clear()

    def fingerprint(self, targets: List[SavedTensor]) -> None:
        """Fingerprint the saved tensors that have none yet (their contents still as saved)."""
        busy, self.busy = self.busy, True
        try:
            for saved in targets:
                if saved.fp is None:
                    saved.fp = fingerprint(saved.tensor)
        finally:
            self.busy = busy

    def shared(self, key: Optional[int], spot: Optional[Spot]) -> None:
        """NumPy shares the memory at ``key`` from now on: writes through it bump no version."""
        self.fingerprint(self.live(key))
        if key not in self.numpy_views or spot is not None:
            self.numpy_views[key] = spot
        if len(self.numpy_views) > 4096:
            self.numpy_views.pop(next(iter(self.numpy_views)))

    def note_cut(self, kind: str, frame: Any, key: Optional[int] = None) -> None:
        if frame is not None and is_user_code(frame.f_code):
            spot = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            self.cuts.append((kind, spot, key, self.backwards))

    def _cutting(self, original: Callable, kind: str) -> Callable:
        recorder = self

        @functools.wraps(original)
        def enter(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():
                recorder.note_cut(kind, sys._getframe(1))
            return original(*args, **kwargs)

        return enter

    def _numpy(self, original: Callable) -> Callable:
        recorder = self

        @functools.wraps(original)
        def numpy(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not recorder.busy:
                frame = sys._getframe(1)
                user = is_user_code(frame.f_code)
                if user and tensor.requires_grad:
                    recorder.note_cut(".numpy()", frame)
                spot = (
                    (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                    if user
                    else spot_of(frame)
                )
                recorder.shared(storage_key(tensor), spot)
            return original(tensor, *args, **kwargs)

        return numpy

    def _from_numpy(self, original: Callable) -> Callable:
        recorder = self

        @functools.wraps(original)
        def from_numpy(array: Any) -> Any:
            made = original(array)
            if not recorder.busy:
                recorder.shared(storage_key(made), spot_of(sys._getframe(1)))
            return made

        return from_numpy

    def _detaching(self, original: Callable) -> Callable:
        recorder = self

        @functools.wraps(original)
        def detach(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not recorder.busy and getattr(tensor, "requires_grad", False):
                recorder.note_cut("detach()", sys._getframe(1))
            return original(tensor, *args, **kwargs)

        return detach

    def _data_get(self, original: Callable) -> Callable:
        recorder = self

        def data(tensor: Any) -> Any:
            if tensor.requires_grad and not recorder.busy:
                recorder.note_cut(".data", sys._getframe(1))
            return original(tensor)

        return data

    # backward calls ---------------------------------------------------------------
    def _wrap(self, original: Callable, kind: str) -> Callable:
        recorder = self
        signature = inspect.signature(original)

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if recorder.current is not None:  # a backward inside a backward (a hook's)
                return original(*args, **kwargs)
            frame = user_frame(sys._getframe(1))
            recorder.settle_writes()
            try:
                bound = signature.bind(*args, **kwargs).arguments
            except TypeError:
                bound = {}
            retain = bound.get("retain_graph")
            retain = bool(bound.get("create_graph", False)) if retain is None else bool(retain)
            spot = (
                None
                if frame is None
                else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            )
            recorder.backwards += 1
            this = Call(recorder.backwards, kind, spot, retain, _SEQ())
            recorder.current = this
            try:
                with recorder.watch_off():
                    return original(*args, **kwargs)
            except RuntimeError as exc:
                recorder.on_failure(exc, this, bound.get("tensors", bound.get("outputs")), frame)
                raise
            finally:
                recorder.current = None
                recorder.unpacked.clear()
                recorder.calls.append(this)
                recorder.prune()  # what this backward freed leaves the index
                recorder.rest()
                if recorder.hits:
                    recorder.settle(this, frame)

        return call

    def watch_off(self) -> Any:
        """The write watch off while backward runs (its operations are autograd's, not the
        code's), when it is the innermost dispatch mode; else left on."""
        if self._mode is not None and _current_mode() is self._mode:
            return _pop_mode_temporarily()
        return contextlib.nullcontext()

    def on_failure(self, exc: BaseException, call: Call, roots: Any, frame: Any) -> None:
        from .diagnose import diagnose

        self.busy = True
        try:
            failure = diagnose(self, exc, call, roots, frame)
        except Exception:  # a report that cannot be made must not hide the user's error
            failure = None
        finally:
            self.busy = False
            self.stale = None
        if failure is not None:
            self.failures.append((exc, failure))

    def failure_for(self, exc: Optional[BaseException]) -> Any:
        """The report made for ``exc`` (or an exception it was raised from or during)."""
        seen = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            for raised, failure in self.failures:
                if raised is exc:
                    return failure
            exc = exc.__cause__ or exc.__context__
        return None

    def settle(self, call: Call, frame: Any) -> None:
        """Group the silent changes the backward just read (by the line that saved them)."""
        from .diagnose import silent_entry

        hits, self.hits = self.hits, []
        self.busy = True
        try:
            for saved, node in hits:
                silent_entry(self, saved, node, call, frame)
        finally:
            self.busy = False
