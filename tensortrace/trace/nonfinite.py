"""The records of doctor's NaN and Inf finding: where the first non-finite value was made, and why.

A ``NonFinite`` is made once per run, for the first loss, gradient or
parameter found NaN or infinite (the ``Symptom``); its ``origin`` is the
operation that first made a NaN or an infinity out of values that held
none, in forward (an operation's output) or backward (a graph node's
gradient), with the counted ``Operand`` facts that explain it. Fixes are
``doctor.py``'s ``Fix`` records: edits of the lines they name, so that they
can be applied to a copy of the script and run. Plain frozen values.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import msgspec

from .doctor import Fix, Place

Kind = Literal["nan", "inf", "-inf"]


class Operand(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One input of the operation that made the value, counted when it ran."""

    argument: (
        str  # the schema's name for it: "self", "other", "exponent"; "grad_output" in backward
    )
    name: Optional[str]  # what the code called it, where known
    shape: Tuple[int, ...]
    dtype: str  # "float32"; "number" for a Python number
    zeros: int
    negatives: int
    nan: int
    posinf: int
    neginf: int
    largest: Optional[float]  # the largest finite magnitude; None when there is none
    value: Optional[str] = None  # a Python number's value, as repr() writes it


class Made(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An operation whose output held a kind of non-finite value its operands did not."""

    phase: Literal["forward", "backward", "optimizer"]
    op: str  # the ATen operation, e.g. aten.log (in backward, the one inside the node)
    node: Optional[str]  # backward: the graph node, e.g. SqrtBackward0
    place: Optional[Place]  # the line that ran it; in backward, the forward line that made the node
    call: Optional[str]  # the call on that line, e.g. torch.log(p), where it can be told
    name: Optional[str]  # the tensor it made, where known (the line's assignment target)
    made: Tuple[Kind, ...]  # what appeared
    count: Optional[int]  # elements of its output NaN or infinite; None: gone before counted
    shape: Tuple[int, ...]
    dtype: str
    operands: Tuple[Operand, ...]
    from_finite: bool  # every operand was finite
    iteration: int  # backward calls before it


class Symptom(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The first loss, gradient or parameter that was NaN or infinite."""

    what: Literal["loss", "gradient", "parameter"]
    value: Kind  # nan when any element is NaN, else the sign of the first infinity
    names: Tuple[str, ...]  # the loss's name, or the parameters' (first 8)
    place: Optional[Place]  # the backward call, or the optimizer's step
    iteration: int  # backward calls before it
    backward: Optional[Place] = None  # the backward call it showed at, or the last one before
    backward_run: int = 0  # which of that line's calls it was (1: the first)


class NonFinite(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The first NaN or Inf of a run: what showed it, what made it, why, and what to change."""

    headline: str  # the first line shown: the line that made it, then why
    symptom: Symptom
    origin: Optional[Made]  # the first non-finite value made since everything was last finite
    then: Optional[Made] = None  # the first NaN made after an origin that made only infinities
    entered: Optional[Made] = None  # no origin: the first operation seen reading a non-finite input
    rule: Optional[str] = None  # e.g. log-of-zero, zero-over-zero, sqrt-at-zero, divergence
    why: Optional[str] = None  # the rule's sentence, with the counted facts
    losses: Tuple[float, ...] = ()  # the finite losses of the last iterations before, oldest first
    # what was checked: the losses only (by default), the operations that make NaN or Inf from
    # ordinary numbers (--nan: risky), every operation (--nan-all: every-op); "default" is
    # what a report written before --nan-all called "risky"
    watch: Literal["losses", "risky", "every-op", "default"] = "default"
    fixes: Tuple[Fix, ...] = ()  # each an edit of the lines it names, run on a copy if checked
