"""Whether a tensor holds NaN or infinities, at the least cost, and the counts that explain it.

The first look is one ``sum``: a sum is finite only when every element is
(a NaN or an infinity makes it NaN or infinite), so a finite sum ends the
check with one reduction, which costs about a third of an elementwise
operation on the same tensor (``torch.isfinite(t).all()`` costs far more on
the CPU: a boolean tensor, then a reduction over it). Only a sum that is not
finite (a NaN, an infinity, or a finite sum too large for the dtype) is
looked at element by element. Half-precision tensors are summed in float32,
so that their sums rarely overflow.

On the CPU the answer is read at once. On another device reading it would
wait for the device (a host sync per operation), so ``Readings`` copies
the sums to the host as the device gets to them and hands them over at the
next boundary (a backward call, an optimizer step), once they have arrived.

Every operation here runs with autograd and dispatch modes off: it is the
doctor's, not the code's, and makes no graph node.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import torch

from ..trace.nonfinite import Operand

NAN, POSINF, NEGINF = 1, 2, 4  # the kinds of non-finite values, as bits
KIND_NAMES = ((NAN, "nan"), (POSINF, "inf"), (NEGINF, "-inf"))
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_HALF = (torch.float16, torch.bfloat16)


class quiet:
    """Autograd and dispatch modes off: the doctor's own operations are not the code's.

    A class rather than a generator: it is entered for every operation checked."""

    __slots__ = ("grad", "dispatch")

    def __enter__(self) -> None:
        self.grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        self.dispatch = torch._C._DisableTorchDispatch()
        self.dispatch.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.dispatch.__exit__(*exc)
        finally:
            torch._C._set_grad_enabled(self.grad)


def checkable(t: Any) -> bool:
    """A plain, dense tensor of floating or complex numbers with elements (not a subclass, not
    a meta or fake tensor)."""
    return (
        type(t) in _PLAIN
        and (t.is_floating_point() or t.is_complex())
        and t.layout is torch.strided
        and not t.is_meta
        and t.numel() > 0
    )


def first_sum(t: Any) -> Any:
    """The one-reduction look at ``t`` (a 0-dim tensor on its device). Call under ``quiet``."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.sum(dtype=torch.float32) if t.dtype in _HALF else t.sum()


def kinds(t: Any) -> int:
    """The kinds of non-finite values in ``t`` (bits of NAN, POSINF, NEGINF); 0 when all are
    finite. Call under ``quiet``."""
    if not checkable(t):
        return 0
    if math.isfinite(first_sum(t).item()):
        return 0
    return exact_kinds(t)


def exact_kinds(t: Any) -> int:
    """``kinds`` element by element (after a sum that was not finite). Call under ``quiet``."""
    if t.is_complex():
        t = torch.view_as_real(t)
    found = 0
    if bool(torch.isnan(t).any()):
        found |= NAN
    if bool((t == math.inf).any()):
        found |= POSINF
    if bool((t == -math.inf).any()):
        found |= NEGINF
    return found


def kinds_of(values: Sequence[Any]) -> int:
    """The kinds found in any of ``values`` (tensors; other values count as finite)."""
    found = 0
    for v in values:
        found |= kinds(v)
    return found


def number_kinds(value: Any) -> int:
    """The kinds of a Python number (a float NaN or infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return NAN if value != value else (POSINF if value > 0 else NEGINF)
    if isinstance(value, complex):
        return number_kinds(value.real) | number_kinds(value.imag)
    return 0


def kind_names(bits: int) -> Tuple[str, ...]:
    return tuple(name for bit, name in KIND_NAMES if bits & bit)


def count_nonfinite(t: Any) -> int:
    """How many elements of ``t`` are NaN or infinite. Call under ``quiet``."""
    if not checkable(t):
        return 0
    if t.is_complex():
        t = torch.view_as_real(t)
    return int((~torch.isfinite(t)).sum())


def operand(t: Any, argument: str, name: Optional[str]) -> Operand:
    """The counted facts of one operand (a tensor or a Python number). Call under ``quiet``."""
    if not isinstance(t, torch.Tensor):
        bits = number_kinds(t)
        real = float(t.real if isinstance(t, complex) else t)
        finite = math.isfinite(real)
        return Operand(
            argument=argument,
            name=name,
            shape=(),
            dtype="number",
            zeros=int(real == 0),
            negatives=int(real < 0),
            nan=int(bool(bits & NAN)),
            posinf=int(bool(bits & POSINF)),
            neginf=int(bool(bits & NEGINF)),
            largest=abs(real) if finite else None,
            value=repr(t),
        )
    dtype = str(t.dtype).replace("torch.", "")
    v = t.detach()
    if v.is_complex():
        v = torch.view_as_real(v)
    if not v.is_floating_point():
        v = v.double()
    finite = torch.isfinite(v)
    magnitudes = v.abs()[finite]
    return Operand(
        argument=argument,
        name=name,
        shape=tuple(t.shape),
        dtype=dtype,
        zeros=int((v == 0).sum()),
        negatives=int((v < 0).sum()),
        nan=int(torch.isnan(v).sum()),
        posinf=int((v == math.inf).sum()),
        neginf=int((v == -math.inf).sum()),
        largest=float(magnitudes.max()) if magnitudes.numel() else None,
    )


def tensors_in(value: Any) -> List[Any]:
    """The tensors of an operation's output (one, or a list or tuple of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


class Readings:
    """Device values read without waiting for the device.

    ``add(values, then)``: ``values`` is a 1-D tensor of sums; ``then(list)`` is
    called with them as Python floats once they are on the host. On the CPU
    that is at once. Elsewhere they are copied to pinned host memory behind
    the work already queued, and ``poll()`` (at each boundary) hands over
    those whose copy has finished; ``poll(wait=True)`` (at the end) waits for
    all. ``defer`` makes the CPU take the same path (for the tests).
    """

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer
        self.waiting: Deque[Tuple[Any, Any, Callable[[List[float]], None]]] = deque()

    def add(self, values: Any, then: Callable[[List[float]], None]) -> None:
        if values.device.type == "cpu" and not self.defer:
            then(values.tolist())
            return
        if values.device.type == "cpu":
            self.waiting.append((None, values.clone(), then))
            return
        host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        host.copy_(values, non_blocking=True)
        event = _device_event(values.device)
        self.waiting.append((event, host, then))

    def poll(self, wait: bool = False) -> None:
        while self.waiting:
            event, host, then = self.waiting[0]
            if event is not None and not wait and not event.query():
                return
            if event is not None:
                event.synchronize()
            self.waiting.popleft()
            then(host.tolist())


def _device_event(device: Any) -> Any:
    """An event recorded on ``device``'s current stream (CUDA and devices shaped like it)."""
    module = getattr(torch, device.type)
    event = module.Event()
    event.record()
    return event


class Looked:
    """Tensors looked at with one reduction apiece, and how to tell, when the sums are read,
    which of them hold what. On the CPU the sums are read at once, while the tensors are
    held. Elsewhere they are read later: weak references then, and a tensor still alive and
    unchanged is looked at element by element, else its sum decides (a NaN sum: a NaN; an
    infinite one: an infinity)."""

    __slots__ = ("held", "owners", "later")

    def __init__(
        self, readings: Readings, tensors: Sequence[Any], owners: Optional[Sequence[Any]] = None
    ) -> None:
        pairs = [
            (t, o)
            for t, o in zip(tensors, owners if owners is not None else tensors)
            if checkable(t)
        ]
        self.later = bool(pairs) and (readings.defer or pairs[0][0].device.type != "cpu")
        if self.later:
            self.held: List[Any] = [(weakref.ref(t), t._version) for t, _ in pairs]
            self.owners: List[Any] = [weakref.ref(o) for _, o in pairs]
        else:
            self.held = [t for t, _ in pairs]
            self.owners = [o for _, o in pairs]

    def tensors(self) -> List[Any]:
        return [r() for r, _ in self.held] if self.later else self.held

    def kinds(self, values: Sequence[float]) -> Tuple[int, List[Any]]:
        """(kinds found, the owners of the tensors that hold them)."""
        bits, owners = 0, []
        with quiet():
            for held, owner, value in zip(self.held, self.owners, values):
                if math.isfinite(value):
                    continue
                t = held
                if self.later:
                    t = held[0]()
                    t = t if t is not None and t._version == held[1] else None
                    owner = owner()
                found = kinds(t) if t is not None else bits_of([value])
                if found:
                    bits |= found
                    owners.append(owner)
        return bits, owners


def look(readings: Readings, looked: Looked, then: Callable[[List[float]], None]) -> None:
    """One reduction per tensor, read now on the CPU, at a later boundary elsewhere."""
    tensors = looked.tensors()
    if not tensors:
        then([])
        return
    with quiet():
        if not looked.later:
            then([float(first_sum(t)) for t in tensors])
            return
        devices = {t.device for t in tensors}
        if len(devices) == 1:
            readings.add(torch.stack([first_sum(t).float() for t in tensors]), then)
            return
        # tensors on several devices: one copy per device, then looked at together, in order
        got: Dict[int, float] = {}
        for device in devices:
            where = [i for i, t in enumerate(tensors) if t.device == device]

            def gather(values: List[float], where: List[int] = where) -> None:
                got.update(zip(where, values))
                if len(got) == len(tensors):
                    then([got[i] for i in range(len(tensors))])

            sums = torch.stack([first_sum(tensors[i]).float() for i in where])
            readings.add(sums, gather)


def bits_of(values: Sequence[float]) -> int:
    bits = 0
    for v in values:
        if v != v:
            bits |= NAN
        elif v in (math.inf, -math.inf):
            bits |= POSINF if v > 0 else NEGINF
    return bits


def exact(tensors: Sequence[Any]) -> Tuple[int, List[int]]:
    """(kinds, positions of the tensors that hold them), element by element."""
    bits, where = 0, []
    with quiet():
        for i, t in enumerate(tensors):
            found = kinds(t)
            if found:
                bits |= found
                where.append(i)
    return bits, where
