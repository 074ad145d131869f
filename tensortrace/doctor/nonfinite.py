"""Watch a run for its first NaN or infinity: where it showed, and which operation made it.

Two layers, each at its own cost:

* **Symptoms**, checked only at boundaries (``symptoms.py``): the roots of
  each backward call (the loss) and what ``torch.autograd.grad`` returns; with
  ``every_op`` also the gradients an optimizer is about to apply and the
  parameters after its step. One reduction per tensor, nothing per
  operation. The first one found NaN or infinite is the run's symptom.
* **Origins**, looked for per operation (``--nan``, ``--nan-all``; not by
  default, ``LEVELS``): the NaN watch's dispatch mode hands an
  operation here (``call``) and its output is checked; one that holds a kind
  of non-finite value (NaN, +inf, -inf) that none of its operands held is an
  origin, recorded with its line and its operands counted. Gradients are
  checked the same way by a post-hook on the graph node of each checked
  operation: a node that sends on NaN or infinities it did not receive made
  them. ``--nan`` checks the operations that make NaN or infinities out of
  ordinary finite numbers (``RISKY``: log, division, sqrt, exp, pow, ...);
  ``every_op`` (``--nan-all``) checks every operation's output and every
  node's gradient, the optimizer's step included, and keeps the dispatch
  mode on between steps. By default (``losses``) there is no dispatch mode
  at all: only the symptoms are looked at, one reduction per backward, and
  a report with no origin says to run again with ``--nan``.

Each boundary where everything was finite starts a new window; at the
symptom, the window's origins, oldest first, are what made it
(``nanrules.py`` says why, ``nanfix.py`` what to change). After the symptom
nothing more is checked. Nothing here changes what the code computes: the
checks are reductions made with autograd and dispatch off, the hooks return
nothing. ``operands.py`` decides which operations are checked and lists what
they read; ``deferred.py`` is the path off the CPU, where a check's answer is
read at the next boundary instead of at once.
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..trace.nonfinite import Made
from . import deferred, finite
from .finite import quiet
from .operands import (
    RISKY,
    Origin,
    Pending,
    Plan,
    alive,
    inputs,
    local_name,
    needs_grad,
    node_op,
    op_name,
    operands,
    plan_of,
    producers,
    read_only,
    spot_at,
)
from .nanmode import Switch
from .places import Spot, place, user_frame

MAX_ORIGINS = 8  # origins kept per window
MAX_LOSSES = 32  # losses kept for the history
# how much is watched: "losses" (the default: symptoms only), "risky" (--nan: and the
# operations in RISKY), "every-op" (--nan-all: and every operation)
LEVELS = ("losses", "risky", "every-op")


class NonFiniteWatch:
    """One run's watch for NaN and infinities; ``rec`` is the doctor's ``Recorder``."""

    def __init__(self, rec: Any, level: str = "risky", defer: bool = False) -> None:
        if level not in LEVELS:
            raise ValueError(f"the NaN watch's level is one of {LEVELS}, not {level!r}")
        self.rec = rec
        self.level = level
        self.every_op = level == "every-op"
        self.origins = level != "losses"  # whether operations are checked (a dispatch mode)
        self.active = False
        self.plans: Dict[int, Any] = {}  # id of an OpOverload -> its Plan, or False
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
        self.provisional: Optional[Tuple[Any, List[Any], int]] = None  # and its window
        self.windows = 0  # windows begun: the clean boundaries so far
        self.backward_runs: Dict[Any, int] = {}  # a backward line -> its calls so far
        self.last_backward: Optional[Tuple[Any, int]] = None  # (line, its run) of the last one
        self.started = time.monotonic()
        self.step_names: Dict[int, Dict[int, str]] = {}  # id(optimizer) -> its parameters' names
        self.last_step: Optional[Any] = None  # symptoms.StepSeen of the last optimizer step
        self._hooked = -1  # the sequence number of the node hooked last
        self.broken: Optional[str] = None  # the watch's own error, when it had to stop
        self._undo: List[Callable[[], None]] = []
        self.switch = Switch(rec, self)  # the dispatch mode that hands operations to ``call``

    # switching on and off ---------------------------------------------------------
    def start(self) -> None:
        from . import symptoms

        symptoms.start(self)
        self.active = True
        if self.origins:
            self.switch.wake()

    def stop(self) -> None:
        self.active = False
        self.pending = None
        self.switch.stop()
        while self._undo:
            self._undo.pop()()

    def rest(self) -> None:
        """After a backward: the mode rests while no saved tensor is alive (it stays on when
        every operation is checked)."""
        self.switch.rest(self.every_op)

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
        if self.pending is None and self.plans.get(id(func)) is False:
            return func(*args, **kwargs)  # most operations: nothing to check, nothing pending
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
        plan = self.plans.get(id(func))  # by id: an OpOverload hashes in Python, and lives on
        if plan is None:
            plan = self.plans[id(func)] = plan_of(func, self.every_op) or False
        if not plan or not self.active:
            return None
        before = 0
        sums: List[Any] = []
        if plan.inplace:
            with quiet():
                for i in plan.inplace:
                    for t in finite.tensors_in(args[i] if i < len(args) else None):
                        if not finite.checkable(t):
                            continue
                        if t.device.type == "cpu" and not self.readings.defer:
                            before |= finite.kinds(t)
                        else:
                            sums.append(finite.first_sum(t))
        return plan, before, sums

    def _after(
        self, func: Any, args: Any, kwargs: Any, out: Any, held: Tuple[Plan, int, List[Any]]
    ) -> None:
        plan, before, sums = held
        outs = [t for t in finite.tensors_in(out) if finite.checkable(t)]
        if not outs:
            return
        grad = needs_grad(args)
        if outs[0].device.type != "cpu" or self.readings.defer:
            deferred.defer_op(self, func, args, kwargs, outs, sums, grad)
            return
        with quiet():
            bits = finite.kinds_of(outs)
        if bits:
            self.found_in_forward(func, args, kwargs, outs, bits, before, plan)
        if grad:
            self.pending = Pending(
                weakref.ref(outs[0]),
                op_name(func),
                spot_at(user_frame(sys._getframe(2))),
                inputs(func, args, kwargs) if plan.risky else (),
            )

    def unwatched_output(self, t: Any) -> None:
        """An operation ran while the dispatch mode rested (the first of a graph, saving only
        its output: ``torch.sqrt(w)``); its output is saved now: check it, and hook its node."""
        if not self.active or not self.origins:
            return
        try:
            node = t.grad_fn
            op = node_op(node.name())
            if not (self.every_op or op in RISKY or f"_{op}" in RISKY) or not finite.checkable(t):
                return
            spot = spot_at(user_frame(sys._getframe(2)))
            if t.device.type == "cpu" and not self.readings.defer:
                with quiet():
                    bits = finite.kinds(t)
                if bits:
                    made = self.made(
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
            pairs = read_only(func, operands(func, args, kwargs), plan)
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
        made = self.made(
            "optimizer" if self.in_step else "forward",
            op_name(func),
            None,
            frame,
            outs,
            bits if not new else new,
            pairs,
            came == 0,
        )
        origin = Origin(made, spot_at(frame), producers(pairs))
        if new:
            self.add_origin(origin)
        else:
            self.entered = origin

    def made(
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

        spot = spot_at(frame) if spot is None else spot
        texts = operand_texts(spot, op)  # in backward: the forward operation's operands
        forward = [p for p in pairs if not p[0].startswith("grad_output")]
        with quiet():
            bad = next((t for t in outs if finite.kinds(t)), outs[0]) if outs else None
            operands = tuple(
                finite.operand(value, argument, None)
                for argument, value in pairs
                if argument.startswith("grad_output")
            )[:4] + tuple(
                finite.operand(value, argument, local_name(frame, value) or _text(texts, i))
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

    def flush(self) -> None:
        """Off the CPU: hand the sums taken since the last boundary over to be read."""
        deferred.flush(self)

    def add_origin(self, origin: Origin) -> None:
        if len(self.window) < MAX_ORIGINS:
            self.window.append(origin)

    def clean(self) -> None:
        """Everything checked at a boundary was finite: a new window begins."""
        self.window.clear()
        self.entered = None
        self.windows += 1

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
            deferred.defer_node(
                self, name, pending, sent, [g for g in grad_outputs if g is not None]
            )
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
        pairs += alive(pending.inputs)
        with quiet():
            inputs_finite = all(
                not finite.kinds(v) for _, v in pairs if isinstance(v, torch.Tensor)
            )
        made = self.made(
            "backward", pending.op, name, None, sent, new, pairs, inputs_finite, spot=pending.spot
        )
        self.add_origin(Origin(made, pending.spot, producers(pairs)))
        self.backward_made = True


def _text(texts: Sequence[Optional[str]], i: int) -> Optional[str]:
    return texts[i] if i < len(texts) else None
