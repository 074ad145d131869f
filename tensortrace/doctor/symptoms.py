"""The boundaries where NaN and infinities show: a backward's loss, an optimizer's gradients and
parameters, what ``torch.autograd.grad`` returns.

``torch.autograd.backward`` and ``grad`` are wrapped once more (outside the
recorder's own wrappers, so the recorder still counts the call), and a
global optimizer step pre-hook and post-hook are registered. The roots of a
backward are looked at with one reduction apiece (``finite.py``), read at
once on the CPU and at a later boundary elsewhere. By default a step is only
noted (its optimizer, line and learning rate): a loss found NaN with nothing
made since the last finite boundary is then traced to the parameters the
step left. With ``every_op`` the gradients before the step and the
parameters after it are looked at too.

A boundary where everything is finite starts a new window of origins
(``NonFiniteWatch.clean``); the first that is not is the run's symptom, and
the watch stops. Gradients a backward origin made NaN are the symptom as of
that backward when nothing finite came between; at the end of a run that
showed nothing, they are looked at once more.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
import time
import weakref
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .finite import Looked, bits_of, exact, look
from .operands import spot_at
from .places import Spot, user_frame

MAX_LEAVES = 100_000  # graph nodes walked to find the leaves a backward reached
MAX_NAMES = 8


class StepSeen:
    """An optimizer's last step: what a divergence's fixes need of it."""

    __slots__ = ("optimizer", "kind", "lr", "spot", "names")

    def __init__(self, optimizer: Any, spot: Optional[Spot], names: Dict[int, str]) -> None:
        self.optimizer = weakref.ref(optimizer)
        self.names = names  # id(parameter) -> its name, taken at the optimizer's first step
        self.kind = type(optimizer).__name__
        groups = getattr(optimizer, "param_groups", None) or [{}]
        lr = groups[0].get("lr")
        self.lr = float(lr) if isinstance(lr, (int, float)) else None
        self.spot = spot


class SymptomSeen:
    """The first loss, gradient or parameter found NaN or infinite, and the window before it."""

    __slots__ = (
        "what",
        "bits",
        "names",
        "spot",
        "iteration",
        "origins",
        "entered",
        "losses",
        "step",
        "backward",
        "after",
    )

    def __init__(
        self,
        what: str,
        bits: int,
        names: Tuple[str, ...],
        spot: Optional[Spot],
        iteration: int,
        watch: Any,
    ) -> None:
        self.what, self.bits, self.names, self.spot, self.iteration = (
            what,
            bits,
            names,
            spot,
            iteration,
        )
        self.origins = list(watch.window)
        self.entered = watch.entered
        self.losses = list(watch.losses)
        self.step = watch.last_step
        self.backward = watch.last_backward  # (spot, run): the backward call it showed at or after
        self.after = time.monotonic() - watch.started  # seconds into the run


def guarded(hook: Callable[..., None]) -> Callable[..., None]:
    """A hook whose own error stops the watch (``broke``) instead of reaching the code."""

    @functools.wraps(hook)
    def run(watch: Any, *args: Any, **kwargs: Any) -> None:
        try:
            hook(watch, *args, **kwargs)
        except Exception as problem:
            watch.broke(problem)

    return run


def start(watch: Any) -> None:
    watch.patch(torch.autograd, "backward", _wrap(watch, torch.autograd.backward, "backward"))
    watch.patch(torch.autograd, "grad", _wrap(watch, torch.autograd.grad, "grad"))
    from torch.optim import optimizer as optim

    pre = getattr(optim, "register_optimizer_step_pre_hook", None)
    post = getattr(optim, "register_optimizer_step_post_hook", None)
    if pre is not None and post is not None:
        for handle in (
            pre(functools.partial(before_step, watch)),
            post(functools.partial(after_step, watch)),
        ):
            watch._undo.append(handle.remove)


def _wrap(watch: Any, original: Callable, kind: str) -> Callable:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if watch.rec.current is not None or not watch.active:
            return original(*args, **kwargs)
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        frame = user_frame(sys._getframe(1))
        before_backward(watch, roots, frame)
        result = original(*args, **kwargs)
        if watch.active:
            after_backward(watch, roots, result if kind == "grad" else None, frame)
        return result

    return call


def _tensors(value: Any) -> List[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


# --- backward calls -------------------------------------------------------------------------


@guarded
def before_backward(watch: Any, roots: Any, frame: Any) -> None:
    watch.readings.poll()
    if watch.pending is not None:
        watch.hook_pending()
    watch.flush()
    watch.in_step = False
    watch.backward_made = False
    runs = watch.backward_runs.get(spot_at(frame), 0) + 1
    watch.backward_runs[spot_at(frame)] = runs
    watch.last_backward = (spot_at(frame), runs)
    looked = Looked(watch.readings, _tensors(roots))
    iteration = watch.rec.backwards
    spot = spot_at(frame)
    tensors = looked.tensors()
    scalar = len(tensors) == 1 and tensors[0].numel() == 1
    step = watch.last_step
    namer = _namer(watch, frame, ()) if step is not None else None

    def read(values: List[float]) -> None:
        if watch.symptom is not None:
            return
        bits = looked.kinds(values)[0] if bits_of(values) else 0
        if not bits:  # all finite (a sum too large for its dtype counts as finite)
            if scalar and values:
                watch.losses.append((iteration, values[0]))
            watch.clean()
            return
        if not watch.window and step is not None and namer is not None:
            if _left_by_step(watch, step, namer, iteration):
                return
        symptom(watch, "loss", bits, root_names(spot), spot, iteration)

    look(watch.readings, looked, read)


def _left_by_step(watch: Any, step: StepSeen, namer: Any, iteration: int) -> bool:
    """A loss found NaN or infinite with no origin since everything was last finite: if the
    last optimizer step left parameters so, they are the symptom (of the iteration before)."""
    optimizer = step.optimizer()
    if optimizer is None:
        return False
    params = _parameters(optimizer)
    bits, where = exact(params)
    if not bits:
        return False
    names = namer([params[i] for i in where])
    symptom(watch, "parameter", bits, names, step.spot, max(0, iteration - 1))
    return True


@guarded
def after_backward(watch: Any, roots: Any, result: Any, frame: Any) -> None:
    iteration = watch.rec.backwards - 1
    spot = spot_at(frame)
    watch.flush()
    if result is not None:  # torch.autograd.grad: what it returns is what the code uses
        looked = Looked(watch.readings, _tensors(result))

        def read(values: List[float]) -> None:
            if watch.symptom is not None or not bits_of(values):
                return
            bits = looked.kinds(values)[0]
            if bits:
                symptom(watch, "gradient", bits, (), spot, iteration)

        look(watch.readings, looked, read)
    if watch.backward_made:
        watch.backward_made = False
        leaves = _bad_leaves(roots, frame)
        if leaves:
            bits, _ = exact([t.grad for t in (r() for r, _ in leaves) if t is not None])
            names = tuple(name for _, name in leaves[:MAX_NAMES])
            seen = SymptomSeen("gradient", bits, names, spot, iteration, watch)
            watch.provisional = (seen, [r for r, _ in leaves], watch.windows)


def _bad_leaves(roots: Any, frame: Any) -> List[Tuple[Any, str]]:
    """(weak reference, name) of the leaves reached from ``roots`` whose gradient is not
    finite."""
    found: List[Tuple[Any, str]] = []
    seen = set()
    todo = deque(t.grad_fn for t in _tensors(roots) if t.grad_fn is not None)
    walked = 0
    names = local_names(frame)
    while todo and walked < MAX_LEAVES:
        node = todo.popleft()
        walked += 1
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            grad = leaf.grad
            if grad is not None:
                bits, _ = exact([grad])
                if bits:
                    found.append((weakref.ref(leaf), names.get(id(leaf), "a leaf")))
            continue
        for following, _ in getattr(node, "next_functions", ()):
            if following is not None and id(following) not in seen:
                seen.add(id(following))
                todo.append(following)
    return found


def root_names(spot: Optional[Spot]) -> Tuple[str, ...]:
    """The loss's name, from the text of its backward line (``loss.backward()``)."""
    if spot is None:
        return ()
    text = linecache.getline(spot[0], spot[1])
    found = re.search(r"([A-Za-z_][\w.]*)\s*\.\s*backward\s*\(", text) or re.search(
        r"backward\s*\(\s*([A-Za-z_][\w.]*)\s*[,)]", text
    )
    return (found.group(1),) if found else ()


# --- optimizer steps ------------------------------------------------------------------------


def _parameters(optimizer: Any) -> List[Any]:
    return [p for group in getattr(optimizer, "param_groups", ()) for p in group.get("params", ())]


@guarded
def before_step(watch: Any, optimizer: Any, args: Any, kwargs: Any) -> None:
    if not watch.active:
        return
    frame = user_frame(sys._getframe(1))
    spot = spot_at(frame)
    names = watch.step_names.get(id(optimizer))
    if names is None:
        names = watch.step_names[id(optimizer)] = local_names(frame)
    watch.last_step = StepSeen(optimizer, spot, names)
    if not watch.every_op:
        return  # by default a step is only noted: the next loss shows what it left
    watch.readings.poll()
    watch.flush()
    iteration = max(0, watch.rec.backwards - 1)
    params = [p for p in _parameters(optimizer) if p.grad is not None]
    namer = _namer(watch, frame, params)
    looked = Looked(watch.readings, [p.grad for p in params], params)

    def read(values: List[float]) -> None:
        if watch.symptom is not None:
            return
        bits, owners = looked.kinds(values) if bits_of(values) else (0, [])
        if not bits:
            watch.clean()
            return
        symptom(watch, "gradient", bits, namer(owners), spot, iteration)

    look(watch.readings, looked, read)
    watch.in_step = True


@guarded
def after_step(watch: Any, optimizer: Any, args: Any, kwargs: Any) -> None:
    watch.in_step = False
    if not watch.active or not watch.every_op:
        return
    watch.flush()
    frame = user_frame(sys._getframe(1))
    spot = spot_at(frame)
    iteration = max(0, watch.rec.backwards - 1)
    params = _parameters(optimizer)
    namer = _namer(watch, frame, params)
    looked = Looked(watch.readings, params)

    def read(values: List[float]) -> None:
        if watch.symptom is not None:
            return
        bits, owners = looked.kinds(values) if bits_of(values) else (0, [])
        if not bits:
            watch.clean()
            return
        symptom(watch, "parameter", bits, namer(owners), spot, iteration)

    look(watch.readings, looked, read)


def _namer(
    watch: Any, frame: Any, params: Sequence[Any]
) -> Callable[[Sequence[Any]], Tuple[str, ...]]:
    """A function naming parameters as the code can reach them (``model.fc.weight``, ``w``).

    Names are worked out only when asked (for a symptom). On the CPU that is at once, while
    the frame runs; elsewhere the answer comes later, so weak references to the modules and
    tensors the frame holds are taken now (a frame kept would keep all its locals)."""
    at_once = not watch.readings.defer and all(p.device.type == "cpu" for p in params[:1])
    if at_once:
        held: List[Any] = [frame]

        def now(chosen: Sequence[Any]) -> Tuple[str, ...]:
            names = local_names(held[0]) if held and held[0] is not None else {}
            held.clear()
            return _named(names, chosen)

        return now
    refs = _holders(frame)

    def later(chosen: Sequence[Any]) -> Tuple[str, ...]:
        names = _names_from([(n, r()) for n, r in refs if r() is not None])
        return _named(names, chosen)

    return later


def _named(names: Dict[int, str], chosen: Sequence[Any]) -> Tuple[str, ...]:
    return tuple(names.get(id(p), "a parameter") for p in chosen[:MAX_NAMES] if p is not None)


def _holders(frame: Any) -> List[Tuple[str, Any]]:
    if frame is None:
        return []
    found = []
    for name, value in list(frame.f_locals.items()):
        if isinstance(value, (torch.nn.Module, torch.Tensor)) and not name.startswith("__"):
            try:
                found.append((name, weakref.ref(value)))
            except TypeError:
                continue
    return found


def local_names(frame: Any) -> Dict[int, str]:
    """id(tensor) -> its name, for the tensors and module parameters a frame's locals hold."""
    if frame is None:
        return {}
    return _names_from(
        [
            (name, value)
            for name, value in list(frame.f_locals.items())
            if isinstance(value, (torch.nn.Module, torch.Tensor)) and not name.startswith("__")
        ]
    )


def _names_from(holders: Sequence[Tuple[str, Any]]) -> Dict[int, str]:
    names: Dict[int, str] = {}
    for name, value in holders:
        if isinstance(value, torch.Tensor):
            names.setdefault(id(value), name)
    for name, value in holders:
        if isinstance(value, torch.nn.Module):
            for pname, p in value.named_parameters():
                names.setdefault(id(p), f"{name}.{pname}")
    return names


# --- the symptom ----------------------------------------------------------------------------


def symptom(
    watch: Any,
    what: str,
    bits: int,
    names: Tuple[str, ...],
    spot: Optional[Spot],
    iteration: int,
) -> None:
    """The first symptom of the run: keep it with the window before it, and stop checking.

    Gradients a backward origin of this window made NaN or infinite came first: they are the
    symptom, at their backward (the step that applied them was not checked)."""
    if watch.symptom is not None:
        return
    early = watch.provisional
    if early is not None and early[2] == watch.windows:
        watch.symptom = early[0]
    else:
        watch.symptom = SymptomSeen(what, bits, names, spot, iteration, watch)
    watch.active = False


def finish(watch: Any) -> Optional[Any]:
    """At the end of the run: read what is still on its way, then the symptom, if any."""
    _finish(watch)
    return watch.symptom


@guarded
def _finish(watch: Any) -> None:
    watch.flush()
    watch.readings.poll(wait=True)
    if watch.symptom is None and watch.provisional is not None:
        # NaN gradients that no loss showed since: do they last? Their leaves gone with the
        # script's namespace are taken as last seen; parameters a step made non-finite count;
        # gradients still non-finite count where no optimizer stepped (a GradScaler skips the
        # steps whose gradients overflowed, and replaces them)
        seen, refs, _ = watch.provisional
        leaves = [t for t in (r() for r in refs) if t is not None]
        grads = [t.grad for t in leaves if t.grad is not None]
        if not leaves or exact(leaves)[0] or (watch.last_step is None and exact(grads)[0]):
            watch.symptom = seen
