"""Watch a run in this process: what autograd saves, what writes into it, where links are cut.

Three light instruments, on only between ``Recorder.start`` and ``stop``:

* ``saved_tensors_hooks``: the pack hook returns a ``SavedTensor`` holding the
  tensor (never a copy) with its version, its memory's address, the sequence
  number of the graph node that saved it and the user's line, and a
  fingerprint of its contents (``fingerprint.py``) taken before anything
  could change them without a version bump: at the save for memory NumPy
  shares, else just before the first ``.data``-style write the watch sees,
  the first ``.numpy()`` of its memory, or a ``.data =`` rebinding. A saved
  *output* is held as its ``detach()`` alias (same memory, same version
  counter): holding the output itself would make a cycle through the graph's
  C++ objects that Python's collector cannot free, and every step would leak
  its graph. Under hooks PyTorch skips its own version check, so the unpack
  hook makes it, raising the very error PyTorch raises, word for word; during
  a backward it also compares a fingerprint taken, which finds writes that
  bump no version (``.data``, NumPy), and notes which node read what, so that
  a later backward through a freed graph can be told which node it needed,
  which line saved it and whether its tensors changed since.
* a ``TorchFunctionMode`` (``watch.py``) sees each torch function the code
  calls, from start to stop, and looks while a saved tensor is alive and no
  backward runs: a call that writes into the memory of a live saved tensor
  (an in-place method, ``+=``, ``x[i] =``, ``inplace=True``, ``out=``) is
  recorded with the user's line, the name that line used, and the module or
  optimizer that wrote.
* ``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped (which
  covers ``Tensor.backward``) to know each backward's line and run, and to
  read a failure while its graph and frame still exist (``diagnose.py``);
  ``taps.py`` wraps what cuts the graph, shares memory with NumPy, rebinds
  ``.data``, freezes parameters or steps an optimizer; ``aside.py`` steps out
  of the way of code that refuses saved-tensor hooks (``torch.func``).

Nothing here changes what the user's code computes, raises or keeps alive
beyond the graph's own lifetime: a record lives as long as the graph node
that saved it (the notes of the last few backward calls keep weak references
and numbers only).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import time
import warnings
import weakref
from collections import deque
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch.overrides import _get_current_function_mode as _current_mode
from torch.overrides import _pop_mode_temporarily

from .fingerprint import fingerprint
from .messages import stale_message
from .places import Spot, is_user_code, spot_of, storage_key, user_frame
from .warnplace import Redirect
from .watch import Call, SavedTensor, Watch, WriteSeen, op_name

MAX_WRITES = 16  # writes kept per saved tensor
MAX_CUTS = 64  # recent cuts kept
MAX_HISTORY = 4  # backward calls whose notes (nodes read, inputs used) are kept
MAX_NODES_NOTED = 200_000  # graph nodes noted per backward call
MAX_ORIGINAL_BYTES = 64 << 20  # copies kept of saved tensors before a .data-style write
_SEQ = torch._C._autograd._get_sequence_nr  # the sequence number the next graph node gets
_NO_DISPATCH = torch._C._DisableTorchDispatch
_CURRENT_NODE = torch._C._current_autograd_node
_AUTOGRAD = torch._C._autograd


_WRAPPERS = tuple(
    os.path.join(os.path.dirname(torch.__file__), *parts)
    for parts in (
        ("_dynamo", ""),
        ("_compile.py",),
        ("utils", "_python_dispatch.py"),
        ("overrides.py",),
    )
)
_TORCH = os.path.join(os.path.dirname(torch.__file__), "")
_FUNCTORCH = os.path.join(_TORCH, "_functorch", "")
_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
_KINDS = (os.path.join(_TORCH, "nn", ""), os.path.join(_TORCH, "optim", ""))


def _caller(frame: Any) -> Any:
    """The first frame out that is not doctor's own (another watch's wrapper of backward)."""
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_HERE):
        frame = frame.f_back
    return frame


def outside(frame: Any) -> Any:
    """The first frame out from a mode's handler that is not torch's wrapping of it."""
    while frame is not None and frame.f_code.co_filename.startswith(_WRAPPERS):
        frame = frame.f_back
    return frame


def _torch_between(frame: Any, user: Any) -> Tuple[Optional[str], Any]:
    """(``file:function`` of the torch.nn or torch.optim frame between a write and the user's
    line, the nn.Module whose forward it is, if one) -- the outermost such frame."""
    found: Tuple[Optional[str], Any] = (None, None)
    while frame is not None and frame is not user:
        name = frame.f_code.co_filename
        if name.startswith(_KINDS):
            owner = frame.f_locals.get("self")
            module = owner if isinstance(owner, torch.nn.Module) else None
            if module is not None or found[0] is None or found[1] is None:
                found = (f"{name}:{frame.f_code.co_name}", module or found[1])
        frame = frame.f_back
    return found


def _spot(frame: Any) -> Optional[Spot]:
    if frame is None:
        return None
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _holder(saved: SavedTensor) -> Tuple[Any, int]:
    """(a weak reference that reads the saved tensor's version counter after the graph let it
    go, its version when saved): the base of a view (``weight.t()`` dies with the graph, the
    weight does not), else the tensor as the code had it."""
    t = saved.tensor
    if t._is_view() and t._base is not None:
        return weakref.ref(t._base), saved.version
    return saved.original, saved.version


class Recorder:
    """The state of one watched run, and the hooks that feed it."""

    def __init__(self) -> None:
        from .taps import Taps

        self.busy = False  # inside our own hook: our operations are not the user's
        self.index: Dict[Optional[int], List[Any]] = {}  # memory address -> weakrefs to SavedTensor
        self.saved = 0
        self.writes = 0
        self.calls: deque = deque(maxlen=256)
        self.history: deque = deque(maxlen=MAX_HISTORY)  # the last calls, with their notes
        self.runs: Dict[Optional[Spot], int] = {}  # backward calls per line
        self.backwards = 0
        self.current: Optional[Call] = None
        self.cuts: deque = deque(maxlen=MAX_CUTS)  # (kind, spot, key, backward count)
        self.numpy_views: Dict[Optional[int], Optional[Spot]] = {}  # memory NumPy shares
        self.stale: Optional[Tuple[SavedTensor, int, Optional[str]]] = None
        self.pending: List[Tuple[WriteSeen, SavedTensor]] = []  # writes whose bump is not read yet
        self.hits: List[Tuple[SavedTensor, Any]] = []  # silent changes read by the running backward
        self.silent: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
        self.originals: Dict[int, Any] = {}  # id(SavedTensor) -> its contents before a write
        self.original_bytes = 0
        self.altered: Dict[int, Tuple[int, ...]] = {}  # id(SavedTensor) -> inputs it alters
        self.substitute: Dict[int, Any] = {}  # id(SavedTensor) -> what unpack hands out instead
        self.packed: Dict[int, List[Any]] = {}  # node sequence number -> its SavedTensors (weak)
        self.last_step: Dict[int, int] = {}  # id(optimizer) -> backward count at its last step
        self.steps: deque = deque(maxlen=32)  # (line, weakref to optimizer, backward count)
        self.starved: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
        self.asides: Dict[Tuple[str, Optional[Spot]], int] = {}
        self.hooks_off = False  # stepped aside: our hooks are off the stack for the while
        self.passing = 0  # inside a backward call left to run untouched (a transform's)
        self.failures: deque = deque(maxlen=8)  # (the exception, its Failure), the latest
        self.started = time.monotonic()
        self.failed_after: Optional[float] = None  # seconds from start to the first failure
        self.taps = Taps(self)
        self._undo: List[Callable[[], None]] = []
        self._hooks: Any = None
        self._mode: Optional[Watch] = None
        self._watching = False  # whether the mode is on the function mode stack
        self.nonfinite: Any = None  # nonfinite.NonFiniteWatch: NaN and Inf, set by the session

    # switching on and off ---------------------------------------------------------
    def start(self) -> None:
        from . import aside
        from .messages import learn

        learn()  # PyTorch's wording of the in-place error, before any hook of ours is on
        self.started = time.monotonic()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        self.patch(torch.autograd, "backward", self._wrap(torch.autograd.backward, "backward"))
        self.patch(torch.autograd, "grad", self._wrap(torch.autograd.grad, "autograd.grad"))
        graph = torch.autograd.graph
        self.patch(
            graph,
            "disable_saved_tensors_hooks",
            aside.wrap(self, graph.disable_saved_tensors_hooks),
        )
        self.taps.install()
        # a warning from under the watch, shown at the caller's line (doctor/warnplace.py)
        self.patch(warnings, "showwarning", Redirect(warnings.showwarning))
        self._mode = Watch(self)
        self._mode.__enter__()
        self._watching = True

    def stop(self) -> None:
        self.settle_writes()
        if self._mode is not None and self._watching:
            if _current_mode() is not self._mode:  # a mode of the code's own still on top
                self._leave_under()
            else:
                self._mode.__exit__(None, None, None)
        self._mode, self._watching = None, False
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
        while self._undo:
            self._undo.pop()()

    def _leave_under(self) -> None:
        """Take the watch out of the function mode stack from under modes still on it."""
        above = []
        while _current_mode() is not None and _current_mode() is not self._mode:
            above.append(torch.overrides._pop_mode())
        if _current_mode() is self._mode:
            torch.overrides._pop_mode()
        for mode in reversed(above):
            torch.overrides._push_mode(mode)

    def patch(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    def undo(self, action: Callable[[], None]) -> None:
        self._undo.append(action)

    # saved tensors ----------------------------------------------------------------
    def pack(self, t: Any) -> Any:
        if self.busy:
            return t
        self.busy = True
        try:
            g = t.grad_fn
            seq = _SEQ() - 1  # the node being built (for an output: its grad_fn)
            is_output = g is not None and g._sequence_nr() == seq
            if is_output:
                with _NO_DISPATCH():  # an alias for autograd's own use: not the code's operation
                    keep = t.detach()
            else:
                keep = t
            key = storage_key(t)
            fp = fingerprint(t) if key in self.numpy_views else None
            saved = SavedTensor(t, keep, fp, key, spot_of(sys._getframe(1)), g, is_output, seq)
        except Exception:
            return t
        finally:
            self.busy = False
        self.saved += 1
        ref = weakref.ref(saved)
        self.index.setdefault(key, []).append(ref)
        self.packed.setdefault(seq, []).append(ref)
        nan = self.nonfinite
        if nan is not None and nan.origins and not nan.switch.on:  # its mode rests: on again
            nan.switch.wake()
            if is_output:  # its operation ran before the wake
                nan.unwatched_output(t)
        return saved

    def unpack(self, saved: Any) -> Any:
        if not isinstance(saved, SavedTensor):
            return saved
        if self.substitute and id(saved) in self.substitute:
            return self.substitute[id(saved)]  # the contents as saved, for silent.py's probe
        t = saved.tensor
        now = t._version
        if now != saved.version:
            node = _CURRENT_NODE()
            name = None if node is None else node.name()
            self.stale = (saved, now, name)
            raise RuntimeError(stale_message(saved, now, name))  # PyTorch's words
        call = self.current
        if call is not None and not self.busy:
            self._note_read(call, saved, t)
        if saved.fp is not None and call is not None and not self.busy:
            self.busy = True
            try:
                changed = fingerprint(t) != saved.fp
            finally:
                self.busy = False
            if changed:
                self.hits.append((saved, _CURRENT_NODE()))
        return t

    def _note_read(self, call: Call, saved: SavedTensor, t: Any) -> None:
        """Which node read what, for a later backward that finds this graph freed."""
        nodes = call.nodes
        entry = nodes.get(saved.seq)
        if entry is None:
            if len(nodes) >= MAX_NODES_NOTED:
                return
            # every tensor the node saved, read by this backward or not (a gradient it did not
            # need leaves some unread): what retain_graph would keep
            kept = [s for s in (r() for r in self.packed.pop(saved.seq, ())) if s is not None]
            entry = nodes[saved.seq] = (
                saved.spot,
                [_holder(s) for s in kept] or [_holder(saved)],
            )
        if not saved.is_output:
            g = t.grad_fn  # an input from another graph node: where a freed graph may begin
            if g is not None and len(call.uses) < MAX_NODES_NOTED:
                call.uses.append((g._sequence_nr(), saved.spot))

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
        if len(self.packed) > 4 * len(self.index) + 1024:  # graphs dropped without a backward
            for seq in [s for s, refs in self.packed.items() if all(r() is None for r in refs)]:
                del self.packed[seq]
        for key in [k for k, ref in self.originals.items() if ref[0]() is None]:
            self.original_bytes -= self.originals.pop(key)[2]
            self.altered.pop(key, None)

    # writes -----------------------------------------------------------------------
    def note_writes(self, func: Any, targets: List[Any], kwargs: Any) -> None:
        for t in targets:
            if isinstance(t, torch.Tensor):
                self._note_write(func, t, kwargs)

    def _note_write(self, func: Any, t: Any, kwargs: Any) -> None:
        key = storage_key(t)
        targets = self.live(key)
        if not targets:
            return
        from .places import name_in

        caller = outside(sys._getframe(3))
        frame = user_frame(caller)
        via, module = _torch_between(caller, frame)
        op = op_name(func, kwargs)
        owner = None if module is None else weakref.ref(module)
        seen = WriteSeen(
            op, _spot(frame), name_in(frame, t, key), targets[0].tensor._version, via, owner
        )
        self.writes += 1
        self.fingerprint(targets, keep=True)  # before the write runs: the contents as saved
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
            else:
                self.originals.pop(id(saved), None)  # a bump: backward will raise, not mislead
        self.pending.clear()

    def fingerprint(self, targets: List[SavedTensor], keep: bool = False) -> None:
        """Fingerprint the saved tensors that have none yet (their contents still as saved);
        with ``keep``, also keep a copy of small enough ones, to tell later which gradients
        the change altered."""
        busy, self.busy = self.busy, True
        try:
            for saved in targets:
                if saved.fp is None:
                    saved.fp = fingerprint(saved.tensor)
                    if keep:
                        self._keep_original(saved)
        finally:
            self.busy = busy

    def _keep_original(self, saved: SavedTensor) -> None:
        t = saved.tensor
        size = t.numel() * t.element_size()
        if self.original_bytes + size > MAX_ORIGINAL_BYTES or id(saved) in self.originals:
            return
        try:
            with _NO_DISPATCH(), torch.no_grad():
                copy = t.detach().clone()
        except Exception:
            return
        self.originals[id(saved)] = (weakref.ref(saved), copy, size)
        self.original_bytes += size

    def shared(self, key: Optional[int], spot: Optional[Spot]) -> None:
        """NumPy shares the memory at ``key`` from now on: writes through it bump no version."""
        self.fingerprint(self.live(key))
        if key not in self.numpy_views or spot is not None:
            self.numpy_views[key] = spot
        if len(self.numpy_views) > 4096:
            self.numpy_views.pop(next(iter(self.numpy_views)))

    def rebinding(self, t: Any, frame: Any) -> None:
        """``t.data = value``: a graph that saved ``t`` itself reads the new memory at backward,
        with no version bump. Noted as a write into those saved tensors, contents kept first."""
        targets = [s for s in self.live(storage_key(t)) if s.tensor is t]
        if not targets:
            return
        from .places import name_in

        user = user_frame(frame)
        alias = name_in(user, t, storage_key(t))
        name = alias[len(".data of ") :] if alias and alias.startswith(".data of ") else alias
        seen = WriteSeen(
            ".data =", _spot(user), f".data of {name}" if name else ".data", None, None
        )
        self.writes += 1
        self.fingerprint(targets, keep=True)
        for saved in targets:
            if len(saved.writes) < MAX_WRITES:
                saved.writes.append(seen)

    # cuts, steps, asides ------------------------------------------------------------
    def note_cut(self, kind: str, frame: Any, key: Optional[int] = None) -> Optional[Spot]:
        if frame is not None and is_user_code(frame.f_code):
            spot = _spot(frame)
            self.cuts.append((kind, spot, key, self.backwards))
            return spot
        return None

    def starve(self, optimizer: Any, frame: Any) -> None:
        """Before an optimizer step: its parameters that no backward gave a gradient, though
        a ``detach()`` since its last step cut a graph that reached them."""
        since = self.last_step.get(id(optimizer), -1)
        cuts = [spot for kind, spot, _, count in self.cuts if kind == "detach()" and count >= since]
        if not cuts:
            return
        hungry = [
            p
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is None and p.requires_grad
        ]
        if not hungry:
            return
        from .silent import starved_entry

        self.busy = True
        try:
            starved_entry(self, optimizer, hungry, cuts, frame)
        finally:
            self.busy = False

    def starved_records(self) -> Tuple[Any, ...]:
        from .silent import starved_records

        return starved_records(self)

    def note_aside(self, what: str, spot: Optional[Spot]) -> None:
        key = (what, spot)
        self.asides[key] = self.asides.get(key, 0) + 1

    @contextlib.contextmanager
    def stepped_aside(self) -> Iterator[None]:
        """Doctor's hooks and write watch off for a region, back on after it."""
        _AUTOGRAD._pop_saved_tensors_default_hooks()
        self.hooks_off = True
        mode = _pop_mode_temporarily() if self._watching and _current_mode() is self._mode else None
        try:
            with self.nan_off():
                if mode is None:
                    yield
                else:
                    with mode:
                        yield
        finally:
            self.hooks_off = False
            _AUTOGRAD._push_saved_tensors_default_hooks(self.pack, self.unpack)

    # backward calls ---------------------------------------------------------------
    def _wrap(self, original: Callable, kind: str) -> Callable:
        recorder = self
        signature = inspect.signature(original)

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if (
                recorder.current is not None  # a backward inside a backward (a hook's)
                or recorder.hooks_off  # stepped aside
                or recorder.passing  # the same call again, through the watch's handler
            ):
                return original(*args, **kwargs)
            if _caller(sys._getframe(1)).f_code.co_filename.startswith(_FUNCTORCH):  # a transform's
                recorder.passing += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder.passing -= 1
            frame = user_frame(sys._getframe(1))
            recorder.settle_writes()
            try:
                bound = signature.bind(*args, **kwargs).arguments
            except TypeError:
                bound = {}
            retain = bound.get("retain_graph")
            retain = bool(bound.get("create_graph", False)) if retain is None else bool(retain)
            spot = _spot(frame)
            recorder.backwards += 1
            run = recorder.runs[spot] = recorder.runs.get(spot, 0) + 1
            this = Call(recorder.backwards, kind, spot, retain, _SEQ(), run)
            recorder.current = this
            roots = bound.get("tensors", bound.get("outputs"))
            if recorder.originals:
                recorder.probe_changes(roots)
            try:
                with recorder.nan_off():
                    return original(*args, **kwargs)
            except RuntimeError as exc:
                recorder.on_failure(exc, this, roots, frame)
                raise
            finally:
                recorder.current = None
                recorder.calls.append(this)
                if len(recorder.history) == recorder.history.maxlen:
                    gone = recorder.history[0]  # its notes go: only the last few calls keep them
                    gone.nodes, gone.uses = {}, []
                recorder.history.append(this)
                recorder.prune()  # what this backward freed leaves the index
                if recorder.nonfinite is not None:
                    recorder.nonfinite.rest()
                if recorder.hits:
                    recorder.settle(this, frame)

        return call

    def nan_off(self) -> Any:
        """The NaN watch's dispatch mode off while backward runs (its operations are autograd's,
        checked by hooks on graph nodes) or doctor steps aside; ``nanmode.py``."""
        if self.nonfinite is None:
            return contextlib.nullcontext()
        return self.nonfinite.switch.off()

    def probe_changes(self, roots: Any) -> None:
        """Before a backward: for saved tensors changed since a kept copy, which inputs of
        their node get other gradients from the new values (``silent.py``)."""
        from .silent import probe_changes

        self.busy = True
        try:
            probe_changes(self, roots)
        except Exception:
            pass
        finally:
            self.busy = False

    def on_failure(self, exc: BaseException, call: Call, roots: Any, frame: Any) -> None:
        from .diagnose import diagnose

        if self.failed_after is None:
            self.failed_after = time.monotonic() - self.started
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
        from .silent import silent_entry

        hits, self.hits = self.hits, []
        self.busy = True
        try:
            for saved, node in hits:
                silent_entry(self, saved, node, call, frame)
        finally:
            self.busy = False
