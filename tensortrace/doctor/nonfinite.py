"""Watch a run for its first NaN or infinity: where it showed, and which operation made it.

Two layers, each at its own cost:

* **Symptoms**, always on, checked only at boundaries: the roots of each
  backward call (the loss), the gradients an optimizer is about to apply (a
  global optimizer step pre-hook), the parameters after the step (a post-hook)
  and what ``torch.autograd.grad`` returns. One reduction per tensor; nothing
  per operation. The first one found NaN or infinite is the run's symptom.
* **Origins**, looked for per operation: the doctor's dispatch mode hands an
  operation here (``call``) and its output is checked; one that holds a kind
  of non-finite value (NaN, +inf, -inf) that none of its operands held is an
  origin, recorded with its line and its operands counted. Gradients are
  checked the same way by a post-hook on the graph node of each checked
  operation: a node that sends on NaN or infinities it did not receive made
  them. By default only the operations that make NaN or infinities out of
  ordinary finite numbers are checked (``RISKY``: log, division, sqrt, exp,
  pow, ...); ``every_op`` (``--nan``) checks every operation's output and
  every node's gradient, the optimizer's step included, and keeps the
  dispatch mode on between steps.

Each boundary where everything was finite starts a new window; at the
symptom, the window's origins, oldest first, are what made it
(``nanrules.py`` says why, ``nanfix.py`` what to change). After the symptom
nothing more is checked. Nothing here changes what the code computes: the
checks are reductions made with autograd and dispatch off, the hooks return
nothing.
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..trace.nonfinite import Made
from . import finite
from .finite import quiet
from .places import Spot, place, spot_of, user_frame

MAX_ORIGINS = 8  # origins kept per window
MAX_LOSSES = 32  # losses kept for the history

# operations that make NaN or infinities from ordinary finite numbers (a pole, a domain
# edge, an overflow at moderate inputs, a count of zero); their in-place forms too
RISKY = frozenset(
    """log log2 log10 log1p div true_divide reciprocal rsqrt sqrt pow float_power exp exp2
    expm1 sinh cosh tan acos asin atanh acosh arccos arcsin arctanh arccosh logit erfinv
    lgamma digamma polygamma mvlgamma xlogy special_xlog1py var std var_mean std_mean mean
    nanmean remainder fmod nll_loss_forward nll_loss2d_forward nll_loss_nd _softmax
    _log_softmax cumprod prod logdet _cdist_forward""".split()
)
_SDPA = "_scaled_dot_product"  # attention kernels: a row that masks every key is NaN
_UNINITIALISED = ("empty", "new_empty", "_empty", "empty_like", "empty_strided", "set_", "resize_")


class Plan:
    """How one ATen operation is checked: which arguments it writes in place (checked before)."""

    __slots__ = ("inplace", "risky")

    def __init__(self, inplace: Tuple[int, ...], risky: bool) -> None:
        self.inplace, self.risky = inplace, risky


def _plan(func: Any, every_op: bool) -> Optional[Plan]:
    try:
        name = func.overloadpacket.__name__
        schema = func._schema
    except AttributeError:
        return None
    base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
    risky = base in RISKY or base.startswith(_SDPA)
    if not (risky or every_op) or base.startswith(_UNINITIALISED):
        return None
    writes = [
        i
        for i, arg in enumerate(schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write and not arg.kwarg_only
    ]
    views = schema.returns and all(r.alias_info is not None for r in schema.returns)
    if views and not writes:
        return None  # a view shows its base's values: finite when its base is
    return Plan(tuple(writes), risky)


def _argument_names(func: Any) -> List[str]:
    try:
        return [a.name for a in func._schema.arguments]
    except AttributeError:
        return []


_NUMBERS = ("self", "other", "exponent", "alpha", "value", "scalar")  # ints that are operands


def _counted(name: str, value: Any) -> bool:
    """Whether an argument can explain a NaN or an infinity: a tensor of floating or complex
    numbers, a float, or an integer operand (``x ** 2``, ``x / 0``; not ``dim=1``)."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    if isinstance(value, bool):
        return False
    if isinstance(value, (float, complex)):
        return True
    return isinstance(value, int) and name.split("[")[0] in _NUMBERS


def _operands(func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """(argument name, value) of each operand that can explain a NaN or an infinity (floating
    tensors, numbers), lists flattened."""
    names = _argument_names(func)
    found: List[Tuple[str, Any]] = []
    items = [(names[i] if i < len(names) else f"arg{i}", a) for i, a in enumerate(args)]
    items += [(k, v) for k, v in kwargs.items() if k != "out"]
    for name, value in items:
        if isinstance(value, (list, tuple)):
            found += [(f"{name}[{i}]", v) for i, v in enumerate(value) if _counted(name, v)]
        elif _counted(name, value):
            found.append((name, value))
    return found


def _read_only(func: Any, pairs: List[Tuple[str, Any]], plan: Plan) -> List[Tuple[str, Any]]:
    """The operands an operation does not write in place."""
    if not plan.inplace:
        return pairs
    names = _argument_names(func)
    written = {names[i] for i in plan.inplace if i < len(names)}
    return [(n, v) for n, v in pairs if n.split("[")[0] not in written]


def _needs_grad(args: Sequence[Any]) -> bool:
    if not torch.is_grad_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.requires_grad:
                return True
        elif isinstance(a, (list, tuple)):
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in a):
                return True
    return False


class Pending:
    """A checked operation whose output's graph node is not attached yet (autograd attaches it
    after the dispatch mode returns): hooked at the next operation or backward call."""

    __slots__ = ("out", "op", "spot", "inputs")

    def __init__(self, out: Any, op: str, spot: Optional[Spot], inputs: Tuple[Any, ...]) -> None:
        self.out, self.op, self.spot, self.inputs = out, op, spot, inputs


class Origin:
    """An origin or a first read, with what the rules and fixes need beyond its record."""

    __slots__ = ("made", "spot", "producers")

    def __init__(self, made: Made, spot: Optional[Spot], producers: Dict[str, str]) -> None:
        self.made = made
        self.spot = spot
        self.producers = producers  # operand name -> the graph node that made it (SoftmaxBackward0)


class NonFiniteWatch:
    """One run's watch for NaN and infinities; ``rec`` is the doctor's ``Recorder``."""

    def __init__(self, rec: Any, every_op: bool = False, defer: bool = False) -> None:
        self.rec = rec
        self.every_op = every_op
        self.active = False
        self.plans: Dict[Any, Any] = {}
        self.readings = finite.Readings(defer)
        self.deferred: List[Tuple[Any, List[Any]]] = []  # (how to read it, its sums): off the CPU
        self.window: List[Origin] = []
        self.entered: Optional[Origin] = None
        self.losses: deque = deque(maxlen=MAX_LOSSES)  # (iteration, value)
        self.symptom: Optional[Any] = None  # symptoms.SymptomSeen
        self.pending: Optional[Pending] = None
        self.in_step = False
        self.backward_made = False  # a node made an origin during the running backward
        # (symptom, leaves): gradients a backward origin made NaN, a symptom if still so at the
        # end of a run without optimizer steps (else a step or the next loss shows them)
        self.provisional: Optional[Tuple[Any, List[Any]]] = None
        self.last_step: Optional[Any] = None  # symptoms.StepSeen of the last optimizer step
        self._hooked = -1  # the sequence number of the node hooked last
        self.broken: Optional[str] = None  # the watch's own error, when it had to stop
        self._undo: List[Callable[[], None]] = []

    # switching on and off ---------------------------------------------------------
    def start(self) -> None:
        from . import symptoms

        symptoms.start(self)
        self.active = True

    def stop(self) -> None:
        self.active = False
        self.pending = None
        while self._undo:
            self._undo.pop()()

    def patch(self, owner: Any, name: str, value: Any) -> None:
        old = getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old))

    def iteration(self) -> int:
        """Backward calls before now (the one running, if any, not counted)."""
        return self.rec.backwards - (1 if self.rec.current is not None else 0)

    # forward: the dispatch mode's operations ---------------------------------------
    def call(self, func: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
        """Run one ATen operation for the dispatch mode, and check it if it is one to check.

        The operation runs exactly once, outside every guard: its own errors are the code's.
        An error of the check itself stops the watch (``broke``), never the code."""
        try:
            before = self._before(func, args)
        except Exception as problem:  # the check's, never the code's
            self.broke(problem)
            before = None
        out = func(*args, **kwargs)
        if before is not None:
            try:
                self._after(func, args, kwargs, out, before)
            except Exception as problem:
                self.broke(problem)
        return out

    def _before(self, func: Any, args: Any) -> Optional[Tuple[Plan, int, List[Any]]]:
        """None when the operation is not checked; else its plan and what it writes in place
        held before it ran (kinds on the CPU, sums elsewhere)."""
        if self.pending is not None:
            self.hook_pending()
        plan = self.plans.get(func)
        if plan is None:
            plan = self.plans[func] = _plan(func, self.every_op) or False
        if not plan or not self.active:
            return None
        before = 0
        deferred: List[Any] = []
        if plan.inplace:
            with quiet():
                for i in plan.inplace:
                    for t in finite.tensors_in(args[i] if i < len(args) else None):
                        if not finite.checkable(t):
                            continue
                        if t.device.type == "cpu" and not self.readings.defer:
                            before |= finite.kinds(t)
                        else:
                            deferred.append(finite.first_sum(t))
        return plan, before, deferred

    def _after(
        self, func: Any, args: Any, kwargs: Any, out: Any, held: Tuple[Plan, int, List[Any]]
    ) -> None:
        plan, before, deferred = held
        outs = [t for t in finite.tensors_in(out) if finite.checkable(t)]
        if not outs:
            return
        grad = _needs_grad(args)
        if outs[0].device.type != "cpu" or self.readings.defer:
            self._defer_op(func, args, kwargs, outs, deferred, grad)
            return
        with quiet():
            bits = finite.kinds_of(outs)
        if bits:
            self.found_in_forward(func, args, kwargs, outs, bits, before, plan)
        if grad:
            self.pending = Pending(
                weakref.ref(outs[0]),
                _op_name(func),
                spot_of(sys._getframe(2)),
                _inputs(func, args, kwargs) if plan.risky else (),
            )

    def unwatched_output(self, t: Any) -> None:
        """An operation ran while the dispatch mode rested (the first of a graph, saving only
        its output: ``torch.sqrt(w)``); its output is saved now: check it, and hook its node."""
        if not self.active:
            return
        try:
            node = t.grad_fn
            op = _node_op(node.name())
            if not (self.every_op or op in RISKY or f"_{op}" in RISKY) or not finite.checkable(t):
                return
            spot = spot_of(sys._getframe(2))
            if t.device.type == "cpu" and not self.readings.defer:
                with quiet():
                    bits = finite.kinds(t)
                if bits:
                    made = self._made(
                        "forward", f"aten.{op}", None, None, [t], bits, [], False, spot=spot
                    )
                    self.add_origin(Origin(made, spot, {}))
            self.pending = Pending(weakref.ref(t), f"aten.{op}", spot, ())
            self.hook_pending()
        except Exception as problem:  # the check's, never the code's
            self.broke(problem)

    def broke(self, problem: BaseException) -> None:
        """The watch's own error: stop watching, and say so in the report's place."""
        if self.broken is None:
            self.broken = f"{type(problem).__name__}: {problem}"[:300]
        self.active = False
        self.pending = None

    def found_in_forward(
        self,
        func: Any,
        args: Any,
        kwargs: Any,
        outs: List[Any],
        bits: int,
        before: int,
        plan: Plan,
    ) -> None:
        """An operation's output holds NaN or infinities: an origin if its operands held none
        of that kind, else (the first time in the window) the first read of one. What it wrote
        in place counts as it was before (``before``): its values now are the output's."""
        with quiet():
            pairs = _read_only(func, _operands(func, args, kwargs), plan)
            came = before
            for _, value in pairs:
                came |= (
                    finite.kinds(value)
                    if isinstance(value, torch.Tensor)
                    else finite.number_kinds(value)
                )
        new = bits & ~came
        if not new and self.entered is not None:
            return
        frame = user_frame(sys._getframe(3))
        made = self._made(
            "optimizer" if self.in_step else "forward",
            _op_name(func),
            None,
            frame,
            outs,
            bits if not new else new,
            pairs,
            came == 0,
        )
        origin = Origin(made, _spot(frame), _producers(pairs))
        if new:
            self.add_origin(origin)
        else:
            self.entered = origin

    def _made(
        self,
        phase: str,
        op: str,
        node: Optional[str],
        frame: Any,
        outs: List[Any],
        bits: int,
        pairs: List[Tuple[str, Any]],
        from_finite: bool,
        spot: Optional[Spot] = None,
    ) -> Made:
        from .nanfix import operand_texts
        from .nanrules import assigned_name, call_text

        spot = _spot(frame) if spot is None else spot
        texts = operand_texts(spot, op)  # in backward: the forward operation's operands
        forward = [p for p in pairs if not p[0].startswith("grad_output")]
        with quiet():
            bad = next((t for t in outs if finite.kinds(t)), outs[0]) if outs else None
            operands = tuple(
                finite.operand(value, argument, None)
                for argument, value in pairs
                if argument.startswith("grad_output")
            )[:4] + tuple(
                finite.operand(value, argument, _local_name(frame, value) or _text(texts, i))
                for i, (argument, value) in enumerate(forward[:8])
                if value is not None
            )
            count = sum(finite.count_nonfinite(t) for t in outs) if outs else None
        return Made(
            phase=phase,  # type: ignore[arg-type]
            op=op,
            node=node,
            place=place(spot),
            call=call_text(spot, op),
            name=assigned_name(spot, op) if phase != "backward" else None,
            made=finite.kind_names(bits),  # type: ignore[arg-type]
            count=count,
            shape=tuple(bad.shape) if bad is not None else (),
            dtype=str(bad.dtype).replace("torch.", "") if bad is not None else "",
            operands=operands,
            from_finite=from_finite,
            iteration=self.iteration(),
        )

    def add_origin(self, origin: Origin) -> None:
        if len(self.window) < MAX_ORIGINS:
            self.window.append(origin)

    def clean(self) -> None:
        """Everything checked at a boundary was finite: a new window begins."""
        self.window.clear()
        self.entered = None

    # backward: a post-hook on the graph node of each checked operation ------------
    def hook_pending(self) -> None:
        pending, self.pending = self.pending, None
        out = pending.out()
        node = None if out is None else out.grad_fn
        if node is None or not self.active:
            return
        try:
            seq = node._sequence_nr()
            if seq == self._hooked:
                return
            self._hooked = seq
            node.register_hook(functools.partial(self.node_done, node.name(), pending))
        except (AttributeError, RuntimeError):
            return

    def node_done(self, name: str, pending: Pending, grad_inputs: Any, grad_outputs: Any) -> None:
        """A node ran: did it send on NaN or infinities it did not receive?"""
        if not self.active:
            return
        try:
            self._node_done(name, pending, grad_inputs, grad_outputs)
        except Exception as problem:  # the check's, never the code's
            self.broke(problem)

    def _node_done(self, name: str, pending: Pending, grad_inputs: Any, grad_outputs: Any) -> None:
        sent = [g for g in grad_inputs if finite.checkable(g)]
        if not sent:
            return
        if sent[0].device.type != "cpu" or self.readings.defer:
            self._defer_node(name, pending, sent, [g for g in grad_outputs if g is not None])
            return
        with quiet():
            bits = finite.kinds_of(sent)
            if not bits:
                return
            came = finite.kinds_of(grad_outputs)
        self.found_in_backward(name, pending, sent, list(grad_outputs), bits, came)

    def found_in_backward(
        self,
        name: str,
        pending: Pending,
        sent: List[Any],
        received: List[Any],
        bits: int,
        came: int,
    ) -> None:
        new = bits & ~came
        if not new:
            return
        pairs: List[Tuple[str, Any]] = [
            (f"grad_output{'' if len(received) == 1 else f'[{i}]'}", g)
            for i, g in enumerate(received)
            if isinstance(g, torch.Tensor)
        ]
        pairs += _alive(pending.inputs)
        with quiet():
            inputs_finite = all(
                not finite.kinds(v) for _, v in pairs if isinstance(v, torch.Tensor)
            )
        made = self._made(
            "backward", pending.op, name, None, sent, new, pairs, inputs_finite, spot=pending.spot
        )
        self.add_origin(Origin(made, pending.spot, _producers(pairs)))
        self.backward_made = True

    # off the CPU: sums read at the next boundary ----------------------------------
    def _defer_op(
        self, func: Any, args: Any, kwargs: Any, outs: List[Any], before: List[Any], grad: bool
    ) -> None:
        with quiet():
            sums = [finite.first_sum(t) for t in outs] + before
        plan = self.plans.get(func)
        operands = _operands(func, args, kwargs)
        pairs = [(n, _ref(v)) for n, v in (_read_only(func, operands, plan) if plan else operands)]
        frame = user_frame(sys._getframe(3))
        spot = _spot(frame)
        phase = "optimizer" if self.in_step else "forward"
        info = ("op", _op_name(func), spot, [weakref.ref(t) for t in outs], len(outs), pairs, phase)
        self.deferred.append((info + (self.iteration(),), sums))
        if grad:
            self.pending = Pending(weakref.ref(outs[0]), _op_name(func), spot, tuple(pairs))

    def _defer_node(
        self, name: str, pending: Pending, sent: List[Any], received: List[Any]
    ) -> None:
        with quiet():
            sums = [finite.first_sum(g) for g in sent]
            sums += [finite.first_sum(g) for g in received if finite.checkable(g)]
        info = ("node", name, pending, [weakref.ref(g) for g in sent], len(sent), self.iteration())
        self.deferred.append((info, sums))

    def flush(self) -> None:
        """Hand the sums taken since the last boundary to ``Readings``, one copy per device."""
        if not self.deferred:
            return
        batch, self.deferred = self.deferred, []
        with quiet():
            flat = [s.float() for _, sums in batch for s in sums]
            by_device: Dict[Any, List[int]] = {}
            for i, s in enumerate(flat):
                by_device.setdefault(s.device, []).append(i)
            for device, where in by_device.items():
                stacked = torch.stack([flat[i] for i in where])
                self.readings.add(stacked, functools.partial(self._read_batch, batch, where))

    def _read_batch(self, batch: List[Any], where: List[int], values: List[float]) -> None:
        got = dict(zip(where, values))
        i = 0
        for info, sums in batch:
            mine = [got.get(j) for j in range(i, i + len(sums))]
            i += len(sums)
            if any(v is None for v in mine) or all(math.isfinite(v) for v in mine):
                continue
            if info[0] == "op":
                self._resolve_op(info, mine)
            else:
                self._resolve_node(info, mine)

    def _resolve_op(self, info: Tuple[Any, ...], sums: List[float]) -> None:
        _, op, spot, outs, n_out, pairs, phase, iteration = info
        if all(math.isfinite(v) for v in sums[:n_out]):
            return
        alive = [t for t in (r() for r in outs) if t is not None]
        with quiet():
            bits = finite.kinds_of(alive) if alive else _sum_kinds(sums[:n_out])
            if not bits:
                return
            live = _alive(tuple(pairs))
            came = _sum_kinds(sums[n_out:])
            for _, v in live:
                came |= finite.kinds(v) if isinstance(v, torch.Tensor) else finite.number_kinds(v)
        new = bits & ~came
        if not new and self.entered is not None:
            return
        known = all(v is not None for _, v in live)  # else whether all were finite is not known
        made = self._made(
            phase, op, None, None, alive, new or bits, live, came == 0 and known, spot=spot
        )
        made = _at_iteration(made, iteration)
        origin = Origin(made, spot, _producers(live))
        if new:
            self.add_origin(origin)
        else:
            self.entered = origin

    def _resolve_node(self, info: Tuple[Any, ...], sums: List[float]) -> None:
        _, name, pending, sent_refs, n_sent, iteration = info
        bits = _sum_kinds(sums[:n_sent])
        came = _sum_kinds(sums[n_sent:])
        if not bits & ~came:
            return
        sent = [t for t in (r() for r in sent_refs) if t is not None]
        made = self._made(
            "backward",
            pending.op,
            name,
            None,
            sent,
            bits & ~came,
            _alive(pending.inputs),
            came == 0,
            spot=pending.spot,
        )
        self.add_origin(Origin(_at_iteration(made, iteration), pending.spot, {}))


def _node_op(name: str) -> str:
    """The operation a graph node is the backward of: ``SqrtBackward0`` -> ``sqrt``."""
    stem = name.split("Backward")[0]
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(stem))


def _op_name(func: Any) -> str:
    try:
        return f"{func.namespace}.{func.overloadpacket.__name__}"
    except AttributeError:
        return str(func)


def _spot(frame: Any) -> Optional[Spot]:
    if frame is None:
        return None
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _text(texts: Sequence[Optional[str]], i: int) -> Optional[str]:
    return texts[i] if i < len(texts) else None


def _local_name(frame: Any, value: Any) -> Optional[str]:
    if frame is None or not isinstance(value, torch.Tensor):
        return None
    for name, v in list(frame.f_locals.items()):
        if v is value and not name.startswith("__"):
            return name
    return None


def _ref(value: Any) -> Any:
    """A weak reference to a tensor with its version (facts are read later only if unchanged);
    a number as itself."""
    if isinstance(value, torch.Tensor):
        return (weakref.ref(value), value._version)
    return value


def _inputs(func: Any, args: Any, kwargs: Any) -> Tuple[Any, ...]:
    return tuple((n, _ref(v)) for n, v in _operands(func, args, kwargs))


def _alive(refs: Sequence[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """The (name, value) of each operand, the value None where a tensor is gone or has changed
    since it was read (its facts then are not known)."""
    found = []
    for name, held in refs:
        if isinstance(held, tuple):
            t = held[0]()
            found.append((name, t if t is not None and t._version == held[1] else None))
        else:
            found.append((name, held))
    return found


def _producers(pairs: Sequence[Tuple[str, Any]]) -> Dict[str, str]:
    found = {}
    for name, value in pairs:
        g = getattr(value, "grad_fn", None)
        if g is not None:
            found[name] = g.name()
    return found


def _sum_kinds(values: Sequence[float]) -> int:
    bits = 0
    for v in values:
        if v != v:
            bits |= finite.NAN
        elif v == math.inf:
            bits |= finite.POSINF
        elif v == -math.inf:
            bits |= finite.NEGINF
    return bits


def _at_iteration(made: Made, iteration: int) -> Made:
    import msgspec

    return msgspec.structs.replace(made, iteration=iteration)
