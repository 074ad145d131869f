"""Which storages a step provably did not write: from the ATen operations it ran.

The snapshot cache (``reuse.SnapshotCache``) must never show a value that
memory no longer holds, and the version counter alone does not say
(``x.data``, NumPy, ``detach()`` aliases write without counting). Reading a
large tensor's memory again at every step is exact but costs its size.
Between two snapshots, though, the step's recording (``ops.py``) saw every
ATen operation the step ran, each with the arguments its schema says it
writes (``Tensor(a!)``), whichever alias or ``.data`` view it wrote through:
a write lands in a storage, and the operation names that storage. A storage
that no operation wrote, whose memory was never handed to anything outside
PyTorch's dispatch, holds what it held at the previous snapshot.

``WriteWatch.window`` turns one step's recording into a ``Window``, or None
when the step's writes cannot all have been seen; from the first such step
on, none is proven (what ran unseen may have handed memory out), and the
cache reads memory as before. A window is given only when:

* the run is in safe mode: the sandbox refuses what writes around dispatch
  (``ctypes``, ``memoryview``, threads, processes, ``__dlpack__``,
  ``frombuffer``, ``from_file``, ``share_memory_``, finalisers);
* the scenario's code defines no class, generator or coroutine, never names
  ``dlpack``, and assigns no attribute that could stand in for a method
  (``t.numel = f``): then no code of the scenario's runs while the tool
  reads, outside the recording (a ``__str__`` of an exception, a
  ``named_parameters`` of a module, a generator's ``finally``);
* operations are recorded at the ATen level (not ``--ops none``, nor a
  scenario that uses ``torch.compile`` or ``inference_mode``: ``ops.UNRECORDABLE``),
  and none was left unrecorded (``ops.MAX_OPS``);
* the step has no expectations: they are evaluated after the recording;
* every tensor that an operation wrote, or that a call handed out
  (``numpy()``, ``__array__``, ``__dlpack__``, ``untyped_storage()``,
  ``storage()``), can still be found, with its storage.

A schema says what an operation may write, not all that its kernel does:
``native_batch_norm`` updates the running statistics it takes as plain
``Tensor?`` arguments, and ``Tensor.apply_``/``map_`` write through a Python
callable with no ATen operation at all. So the proof covers only memory that
no recorded operation was handed, in any argument, nor a recorded call under
which no ATen operation ran; memory handed so without a declared write is
compared by fingerprint. A view operation (every tensor argument aliased by
its result and unwritten, ``Tensor(a)``: ``detach``, ``view``, ``slice``)
touches no byte, and is no reason to compare.

In a window a storage is ``UNWRITTEN`` when no recorded operation or call
was handed it, it was never handed out (for the rest of the run: a NumPy
array over it may write at any time), and it owns its memory
(``resizable()``: allocated by PyTorch, not taken from NumPy, a buffer or
DLPack). Otherwise it is ``WRITTEN`` (an operation's schema writes it: its
values are read again) or ``READ`` (its memory may have changed unseen:
compared by fingerprint at this snapshot; at every later one when handed out).
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import Any, Dict, Optional

import torch

READ, WRITTEN, UNWRITTEN = 0, 1, 2

#: Calls after which memory may be written by something other than an ATen
#: operation: NumPy arrays over it, DLPack capsules, storage objects.
HANDED_OUT = frozenset(
    {
        "numpy",
        "__array__",
        "__array_wrap__",
        "__dlpack__",
        "untyped_storage",
        "storage",
        "_typed_storage",
        "share_memory_",
        "__reduce_ex__",
        "__reduce__",
        "__getstate__",
    }
)


def _data_descriptors() -> frozenset:
    """Attributes of a tensor that no instance attribute can stand in for (``grad``, ``data``, ...).

    Only those that are not methods of the other objects the tool reads
    (modules, storages): ``nbytes`` is a tensor's property but a storage's method.
    """
    names = {
        n for n in dir(torch.Tensor) if inspect.isdatadescriptor(getattr(torch.Tensor, n, None))
    }
    for cls in (torch.nn.Module, torch.UntypedStorage, torch.TypedStorage, BaseException):
        names = {
            n
            for n in names
            if not hasattr(cls, n) or inspect.isdatadescriptor(getattr(cls, n, None))
        }
    return frozenset(n for n in names if not n.startswith("_"))


_ASSIGNABLE: Optional[frozenset] = None


def code_reason(sources: Any) -> Optional[str]:
    """Why code in ``sources`` could run while the tool reads, or reach memory around
    dispatch; None if it cannot."""
    for source, mode in sources:
        reason = _piece_reason(source, mode)
        if reason is not None:
            return reason
    return None


@functools.lru_cache(maxsize=4096)
def _piece_reason(source: str, mode: str) -> Optional[str]:
    """``code_reason`` of one piece of code, parsed once per text (a run, its variants and
    re-runs share them)."""
    global _ASSIGNABLE
    if _ASSIGNABLE is None:
        _ASSIGNABLE = _data_descriptors()
    if "dlpack" in source:
        return "the scenario names dlpack"
    try:
        tree = ast.parse(source, mode=mode)
    except SyntaxError:
        return None  # never runs
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            return "the scenario defines a class"
        if isinstance(
            node,
            (
                ast.Yield,
                ast.YieldFrom,
                ast.AsyncFunctionDef,
                ast.Await,
                ast.AsyncFor,
                ast.AsyncWith,
            ),
        ):
            return "the scenario defines a generator or coroutine"
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and node.attr not in _ASSIGNABLE
        ):
            return f"the scenario assigns the attribute {node.attr!r}"
    return None


class Window:
    """One step's proof: which storages it cannot have written since the previous snapshot."""

    __slots__ = ("written", "handed", "touched")

    def __init__(
        self, written: Dict[int, Any], handed: Dict[int, Any], touched: Dict[int, Any]
    ) -> None:
        self.written, self.handed, self.touched = written, handed, touched

    def state(self, storage: Any) -> int:
        """``UNWRITTEN``, ``WRITTEN`` or ``READ`` (see the module's docstring) for a storage
        object."""
        key = id(storage)
        ref = self.handed.get(key)
        if ref is not None and ref() is storage:
            return READ
        try:
            if not storage.resizable():
                return READ
        except Exception:
            return READ
        ref = self.written.get(key)
        if ref is not None and ref() is storage:
            return WRITTEN
        ref = self.touched.get(key)  # handed to an operation: its kernel may write undeclared
        return READ if ref is not None and ref() is storage else UNWRITTEN


class WriteWatch:
    """Per run: the storages handed out so far, and the proof of each step's window."""

    def __init__(self, scenario: Any, *, safe: bool) -> None:
        self.handed: Dict[int, Any] = {}  # id(storage) -> weak reference, for the rest of the run
        self.reason: Optional[str] = None if safe else "the scenario runs without safe mode"
        if self.reason is None:  # all the code that runs: the modules beside a file's too
            self.reason = code_reason(
                [(code.source(mode), mode) for _, code, mode in scenario.all_code()]
                + [(m.source, "exec") for m in getattr(scenario, "modules", ())]
            )

    def window(self, level: Optional[str], recorder: Any, expectations: bool) -> Optional[Window]:
        """The proof for the step that ``recorder`` recorded, or None (and None from then on)."""
        if self.reason is None:
            if level != "aten":
                self.reason = "operations are not recorded at the ATen level"
            elif recorder is None:
                self.reason = "a step's code did not run under the recording"
            elif expectations:
                self.reason = "a step's expectations ran after the recording"
            elif recorder.count > len(recorder.raw):
                self.reason = "operations beyond the recording's limit were not recorded"
            else:
                written: Dict[int, Any] = {}
                touched: Dict[int, Any] = {}
                if not self._read(recorder.raw, written, touched):
                    self.reason = "a tensor written or handed out could not be found"
        if self.reason is not None:
            return None
        if (
            len(self.handed) > 1024
        ):  # forget storages that died (a new one at the same id is not handed out)
            self.handed = {k: ref for k, ref in self.handed.items() if ref() is not None}
        return Window(written, self.handed, touched)

    def _read(self, raw: Any, written: Dict[int, Any], touched: Dict[int, Any]) -> bool:
        parents = {entry.parent for entry in raw if entry.level == "aten"}
        for index, entry in enumerate(raw):
            ins = entry.ins
            if entry.level == "aten":
                for i in entry.written:
                    key = ins[i][2]
                    if key is not None:
                        ref = key[3]
                        storage = ref()
                        if storage is not None:
                            written[id(storage)] = ref
                    elif not self._note(ins[i], written):
                        return False
            elif getattr(entry.what, "__name__", None) in HANDED_OUT:
                for g in list(ins) + list(entry.outs):
                    if not self._note(g, self.handed):
                        return False
            if entry.level == "aten" and entry.what.views_only:
                continue
            if entry.level == "call" and index in parents:  # its ATen operations tell
                continue
            for g in ins:  # a kernel, or a call's own C++ (apply_), may write it undeclared
                key = g[2]
                if key is not None:
                    ref = key[3]
                    storage = ref()
                    if storage is not None:
                        touched[id(storage)] = ref
        return True

    @staticmethod
    def _note(grabbed: Any, into: Dict[int, Any]) -> bool:
        """Add the storage of a tensor an operation touched to ``into``; False when it cannot
        be found."""
        key = grabbed[
            2
        ]  # read while the operation held the tensor: the tool keeps no reference to it
        storage = key[3]() if key is not None else None
        if storage is None:
            return False
        into[id(storage)] = key[3]
        return True


__all__ = ["READ", "UNWRITTEN", "WRITTEN", "Window", "WriteWatch", "code_reason"]
