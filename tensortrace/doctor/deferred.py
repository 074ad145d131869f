"""The NaN and Inf watch off the CPU: checks whose answers are read at the next boundary.

Reading a check's result on a GPU waits for the device: a host sync per
operation. So there each checked operation's output is summed on the device
(``finite.first_sum``) and kept with what is needed to describe it later:
weak references to its output and operands with their versions, its line,
the iteration. At each boundary ``flush`` stacks the sums taken since, one
tensor per device, and hands them to ``Readings``, which copies them to
pinned host memory behind the queued work and calls back once they have
arrived. The first sum that is not finite becomes an origin as on the CPU,
with the operands' counts where they are still alive and unchanged.
``NonFiniteWatch(defer=True)`` takes this path on the CPU too, for the tests.
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from typing import Any, Dict, List, Tuple

import msgspec
import torch

from ..trace.nonfinite import Made
from . import finite
from .finite import quiet
from .operands import Origin, Pending, alive, op_name, operands, producers, read_only, ref, spot_at
from .places import user_frame


def defer_op(
    watch: Any, func: Any, args: Any, kwargs: Any, outs: List[Any], before: List[Any], grad: bool
) -> None:
    with quiet():
        sums = [finite.first_sum(t) for t in outs] + before
    plan = watch.plans.get(id(func))
    read = operands(func, args, kwargs)
    pairs = [(n, ref(v)) for n, v in (read_only(func, read, plan) if plan else read)]
    frame = user_frame(sys._getframe(3))
    spot = spot_at(frame)
    phase = "optimizer" if watch.in_step else "forward"
    info = ("op", op_name(func), spot, [weakref.ref(t) for t in outs], len(outs), pairs, phase)
    watch.deferred.append((info + (watch.iteration(),), sums))
    if grad:
        watch.pending = Pending(weakref.ref(outs[0]), op_name(func), spot, tuple(pairs))


def defer_node(
    watch: Any, name: str, pending: Pending, sent: List[Any], received: List[Any]
) -> None:
    with quiet():
        sums = [finite.first_sum(g) for g in sent]
        sums += [finite.first_sum(g) for g in received if finite.checkable(g)]
    info = ("node", name, pending, [weakref.ref(g) for g in sent], len(sent), watch.iteration())
    watch.deferred.append((info, sums))


def flush(watch: Any) -> None:
    """Hand the sums taken since the last boundary to ``Readings``, one copy per device."""
    if not watch.deferred:
        return
    batch, watch.deferred = watch.deferred, []
    with quiet():
        flat = [s.float() for _, sums in batch for s in sums]
        by_device: Dict[Any, List[int]] = {}
        for i, s in enumerate(flat):
            by_device.setdefault(s.device, []).append(i)
        for device, where in by_device.items():
            stacked = torch.stack([flat[i] for i in where])
            watch.readings.add(stacked, functools.partial(_read_batch, watch, batch, where))


def _read_batch(watch: Any, batch: List[Any], where: List[int], values: List[float]) -> None:
    got = dict(zip(where, values))
    i = 0
    for info, sums in batch:
        mine = [got.get(j) for j in range(i, i + len(sums))]
        i += len(sums)
        if any(v is None for v in mine) or all(math.isfinite(v) for v in mine):
            continue
        if info[0] == "op":
            _resolve_op(watch, info, mine)
        else:
            _resolve_node(watch, info, mine)


def _resolve_op(watch: Any, info: Tuple[Any, ...], sums: List[float]) -> None:
    _, op, spot, outs, n_out, pairs, phase, iteration = info
    if all(math.isfinite(v) for v in sums[:n_out]):
        return
    kept = [t for t in (r() for r in outs) if t is not None]
    with quiet():
        bits = finite.kinds_of(kept) if kept else finite.bits_of(sums[:n_out])
        if not bits:
            return
        live = alive(tuple(pairs))
        came = finite.bits_of(sums[n_out:])
        for _, v in live:
            came |= finite.kinds(v) if isinstance(v, torch.Tensor) else finite.number_kinds(v)
    new = bits & ~came
    if not new and watch.entered is not None:
        return
    known = all(v is not None for _, v in live)  # else whether all were finite is not known
    made = watch.made(
        phase, op, None, None, kept, new or bits, live, came == 0 and known, spot=spot
    )
    made = at_iteration(made, iteration)
    origin = Origin(made, spot, producers(live))
    if new:
        watch.add_origin(origin)
    else:
        watch.entered = origin


def _resolve_node(watch: Any, info: Tuple[Any, ...], sums: List[float]) -> None:
    _, name, pending, sent_refs, n_sent, iteration = info
    bits = finite.bits_of(sums[:n_sent])
    came = finite.bits_of(sums[n_sent:])
    if not bits & ~came:
        return
    sent = [t for t in (r() for r in sent_refs) if t is not None]
    made = watch.made(
        "backward",
        pending.op,
        name,
        None,
        sent,
        bits & ~came,
        alive(pending.inputs),
        came == 0,
        spot=pending.spot,
    )
    watch.add_origin(Origin(at_iteration(made, iteration), pending.spot, {}))


def at_iteration(made: Made, iteration: int) -> Made:
    """The record as of the iteration its operation ran in (it is read later)."""
    return msgspec.structs.replace(made, iteration=iteration)
