"""Why a NaN or Inf was made, from the counted facts of the operation that made it, and the report.

A rule reads an origin's operation (or, in backward, its graph node) and
the counts of its operands taken when it ran: ``log`` of an operand with
zeros is log(0) = -inf, a division whose divisor and dividend both had zeros
is 0/0, the gradient of ``sqrt`` at an operand with zeros is infinite. The
losses before the symptom say whether the run diverged: an overflow after
a loss that grew a thousandfold over a few iterations is a learning rate
too large, whatever operation overflowed first. A rule that does not know
the operation says only what was counted. ``diagnosis`` puts the symptom,
the origin, the rule and the fixes (``nanfix.py``) into one ``NonFinite``.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import torch

from ..trace.doctor import Fix
from ..trace.nonfinite import Made, NonFinite, Operand, Symptom
from . import nanfix
from .finite import kind_names
from .nanfix import base_op, call_text
from .places import Spot, assigned_names, place

__all__ = ["assigned_name", "call_text", "diagnosis"]

GROWTH = 1e3  # a loss this many times its smallest before it: a divergence
_VALUE_WORDS = {"nan": "NaN", "inf": "inf", "-inf": "-inf"}
_POLES = {
    "SqrtBackward0": ("sqrt", "1/(2·sqrt(x))"),
    "RsqrtBackward0": ("rsqrt", "-1/(2·x^1.5)"),
    "LogBackward0": ("log", "1/x"),
    "Log2Backward0": ("log2", "1/(x·ln 2)"),
    "Log10Backward0": ("log10", "1/(x·ln 10)"),
    "ReciprocalBackward0": ("reciprocal", "-1/x²"),
    "DivBackward0": ("division", "-a/b²"),
    "PowBackward0": ("pow", "e·x^(e-1)"),
    "StdBackward0": ("std", "(x - mean)/(n·std)"),
    "AcosBackward0": ("acos", "-1/sqrt(1 - x²)"),
    "AsinBackward0": ("asin", "1/sqrt(1 - x²)"),
}
_OVERFLOWING = {"exp", "exp2", "expm1", "sinh", "cosh"}


def _counts(o: Operand) -> Tuple[Tuple[str, int], ...]:
    return (("NaN", o.nan), ("inf", o.posinf), ("-inf", o.neginf))


def assigned_name(spot: Optional[Spot], op: str) -> Optional[str]:
    """The name the line assigns the operation's result to: only where the operation is the
    whole value (``logp = torch.log(p)``, not ``loss = (d ** 2).mean()`` for the ``**``)."""
    targets, _ = assigned_names(spot)
    if len(targets) != 1:
        return None
    return targets[0] if nanfix.is_whole_value(spot, op) else None


def _who(o: Optional[Operand], fallback: str) -> str:
    if o is None:
        return fallback
    return o.name or fallback


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def _operand(made: Made, *arguments: str) -> Optional[Operand]:
    for argument in arguments:
        for o in made.operands:
            if o.argument == argument:
                return o
    return None


def _limit(dtype: str) -> float:
    try:
        return float(torch.finfo(getattr(torch, dtype)).max)
    except (AttributeError, TypeError):
        return float(torch.finfo(torch.float32).max)


def diverging(losses: Sequence[Tuple[int, float]]) -> Optional[Tuple[int, float, int, float]]:
    """(iteration, loss) at the smallest loss kept and at the last one, when the last has grown
    ``GROWTH``x or more from it and the last three rose; None when the losses did not grow."""
    recent = [(i, abs(v)) for i, v in losses if math.isfinite(v)]
    if len(recent) < 3:
        return None
    last3 = [v for _, v in recent[-3:]]
    if not (last3[0] < last3[1] < last3[2]):
        return None
    low_i, low = min(recent[:-1], key=lambda p: p[1])
    end_i, end = recent[-1]
    if end < GROWTH * max(low, 1e-30):
        return None
    return low_i, low, end_i, end


# --- why: one rule per cause ---------------------------------------------------------------


def explain(
    made: Made, producers: dict, losses: Sequence[Tuple[int, float]]
) -> Tuple[Optional[str], Optional[str]]:
    """(rule, why) for an origin."""
    grew = diverging(losses)
    if made.phase == "backward":
        rule, why = _backward(made)
    else:
        rule, why = _forward(made, producers)
    if grew is not None and rule in (None, "overflow", "exp-overflow", "pow-overflow"):
        i, a, j, b = grew
        return "divergence", (
            f"the loss grew from {a:.3g} at iteration {i} to {b:.3g} at iteration {j}, "
            "then overflowed: the updates are too large"
        )
    return rule, why


def _forward(made: Made, producers: dict) -> Tuple[Optional[str], Optional[str]]:
    op = base_op(made.op)
    x = _operand(made, "self", "input")
    made_nan = "nan" in made.made
    made_inf = "inf" in made.made or "-inf" in made.made
    if op in ("log", "log2", "log10") and x is not None:
        name = _who(x, "its input")
        if made_inf and x.zeros:
            if producers.get(x.argument, "").startswith("SoftmaxBackward"):
                return "softmax-underflow", (
                    f"{name} had {_plural(x.zeros, 'zero')}: the softmax that made it underflowed "
                    "to exactly 0; log(0) = -inf"
                )
            return "log-of-zero", f"{name} had {_plural(x.zeros, 'zero')}; log(0) = -inf"
        if made_nan and x.negatives:
            return "log-of-negative", (
                f"{name} had {_plural(x.negatives, 'negative value')}; the log of a negative "
                "number is NaN"
            )
    if op == "log1p" and x is not None:
        return "log-of-zero", f"{_who(x, 'its input')} reached -1 or below; log1p(-1) = -inf"
    if op in ("div", "true_divide", "remainder", "fmod"):
        num, den = _operand(made, "self"), _operand(made, "other")
        if den is not None and den.zeros:
            dname = _who(den, "the divisor")
            if made_nan and num is not None and num.zeros:
                return "zero-over-zero", (
                    f"{dname} had {_plural(den.zeros, 'zero')} and {_who(num, 'the dividend')} "
                    f"had {num.zeros:,}; 0/0 = NaN"
                )
            return "division-by-zero", f"{dname} had {_plural(den.zeros, 'zero')}; x/0 = ±inf"
    if op in ("reciprocal", "rsqrt") and x is not None and x.zeros:
        return (
            "division-by-zero",
            f"{_who(x, 'its input')} had {_plural(x.zeros, 'zero')}; 1/0 = inf",
        )
    if op in ("sqrt", "rsqrt") and x is not None and x.negatives and made_nan:
        return "sqrt-of-negative", (
            f"{_who(x, 'its input')} had {_plural(x.negatives, 'negative value')}; the square "
            "root of a negative number is NaN"
        )
    if op in ("pow", "float_power"):
        return _pow(made, x, made_nan, made_inf)
    if op in _OVERFLOWING and x is not None and x.largest is not None and made_inf:
        limit = math.log(_limit(made.dtype))
        return "exp-overflow", (
            f"{_who(x, 'its input')} reached {x.largest:.4g}; {op} overflows {made.dtype} "
            f"above {limit:.4g}"
        )
    if op in ("acos", "asin", "atanh", "arccos", "arcsin", "arctanh", "logit", "erfinv"):
        return "out-of-domain", f"{_who(x, 'its input')} went outside {op}'s domain"
    if op in ("var", "std", "var_mean", "std_mean") and made_nan:
        return "variance-of-one", (
            "it was taken over a single value with the default correction of 1: n - 1 = 0, "
            "and 0/0 = NaN"
        )
    if op in ("mean", "nanmean") and made_nan and x is not None and 0 in x.shape:
        return "mean-of-nothing", f"{_who(x, 'its input')} is empty: the mean of 0 values is NaN"
    if op.startswith("nll_loss") and made_nan:
        return "no-target", "every target was ignore_index: the mean over 0 targets is 0/0 = NaN"
    if (op in ("_softmax", "_log_softmax") or op.startswith("_scaled_dot_product")) and made_nan:
        if x is not None and x.neginf:
            return "softmax-all-masked", (
                f"a row of {_who(x, 'its input')} was -inf everywhere (every position masked); "
                "its softmax is 0/0 = NaN"
            )
    if made_inf and made.from_finite:
        largest = max((o.largest or 0.0) for o in made.operands) if made.operands else 0.0
        return "overflow", (
            f"the result passed {made.dtype}'s largest value, {_limit(made.dtype):.3g}; "
            f"the operands reached {largest:.3g}"
        )
    return None, None


def _pow(
    made: Made, base: Optional[Operand], made_nan: bool, made_inf: bool
) -> Tuple[Optional[str], Optional[str]]:
    exponent = _operand(made, "exponent")
    e = _number(exponent)
    bname = _who(base, "the base")
    if base is not None and made_inf and base.zeros and e is not None and e < 0:
        return "division-by-zero", f"{bname} had {_plural(base.zeros, 'zero')}; 0 ** {e:g} = inf"
    if base is not None and made_nan and base.negatives and e is not None and e != int(e):
        return "pow-of-negative", (
            f"{bname} had {_plural(base.negatives, 'negative value')}; a negative number to the "
            f"power {e:g} is NaN"
        )
    if made_inf and made.from_finite:
        largest = base.largest if base is not None and base.largest is not None else 0.0
        power = exponent.value if exponent is not None and exponent.value else "e"
        return "pow-overflow", (
            f"{bname} reached {largest:.3g}; to the power {power} "
            f"it passes {made.dtype}'s largest value, {_limit(made.dtype):.3g}"
        )
    return None, None


def _number(o: Optional[Operand]) -> Optional[float]:
    if o is None or o.value is None:
        return None
    try:
        return float(o.value)
    except ValueError:
        return None


def _backward(made: Made) -> Tuple[Optional[str], Optional[str]]:
    node = made.node or ""
    x = _operand(made, "self", "input")
    grad = _operand(made, "grad_output")
    pole = _POLES.get(node)
    if pole is not None:
        what, slope = pole
        if node == "DivBackward0":
            x = _operand(made, "other")
        zeros = f"{_who(x, 'its input')} had {_plural(x.zeros, 'zero')}; " if x and x.zeros else ""
        masked = ""
        if "nan" in made.made and grad is not None and grad.zeros:
            masked = (
                "; where the incoming gradient is 0 (a torch.where or a mask that dropped the "
                "value), 0 × inf = NaN"
            )
        where = "at ±1" if node in ("AcosBackward0", "AsinBackward0") else "at 0"
        if node == "StdBackward0":
            return "std-at-zero", (
                "the values it was taken over were all equal (std = 0); the gradient of std "
                f"divides by it{masked}"
            )
        rule = "sqrt-at-zero" if node in ("SqrtBackward0", "PowBackward0") else f"{what}-slope"
        return rule, f"{zeros}the derivative of {what}, {slope}, is infinite {where}{masked}"
    if grad is not None and grad.largest is not None and made.from_finite:
        return "overflow", (
            f"the incoming gradient reached {grad.largest:.3g}; the node's gradient passed "
            f"{made.dtype}'s largest value, {_limit(made.dtype):.3g}"
        )
    return None, None


# --- the fixes that fit ----------------------------------------------------------------------


def fixes(rule: Optional[str], origin: Any, symptom: Any) -> Tuple[Fix, ...]:
    made: Optional[Made] = None if origin is None else origin.made
    spot = None if origin is None else origin.spot
    op = "" if made is None else made.op
    found: List[Optional[Fix]] = []
    if rule == "softmax-underflow":
        producer = _producer_spot(origin)
        found += [nanfix.log_softmax(spot, op, producer), nanfix.floor_operand(spot, op, 0)]
    elif rule in ("log-of-zero", "log-slope"):
        found.append(nanfix.floor_operand(spot, op, 0))
    elif rule == "zero-over-zero":
        den = _operand(made, "other")
        if den is not None and den.negatives == 0:
            found.append(nanfix.floor_operand(spot, op, 1))
        found.append(nanfix.nonzero_divisor(spot, op))
    elif rule in ("division-by-zero", "division-slope"):
        found.append(nanfix.nonzero_divisor(spot, op))
    elif rule == "sqrt-of-negative":
        x = _operand(made, "self")
        if x is not None:
            found.append(nanfix.floor_operand(spot, op, 0, "0"))
    elif rule == "sqrt-at-zero":
        found += [nanfix.vector_norm(spot, op), nanfix.epsilon_inside(spot, op)]
    elif rule == "exp-overflow":
        found.append(
            nanfix.exp_bounded(
                spot, op, "10.0" if made and made.dtype in ("float16", "bfloat16") else "80.0"
            )
        )
    elif rule == "variance-of-one":
        found.append(nanfix.add_keyword(spot, op, "correction=0", "take it without the correction"))
    elif rule == "softmax-all-masked":
        found.append(
            nanfix.nan_to_num_around(
                spot, op, "a row that masks every position attends to nothing: make it 0"
            )
        )
    elif rule in ("divergence", "overflow", "pow-overflow"):
        step = getattr(symptom, "step", None)
        found += [nanfix.smaller_lr(step), nanfix.clip_gradients(step)]
    return tuple(f for f in found if f is not None)


def _producer_spot(origin: Any) -> Optional[Spot]:
    """The line that assigned the log's operand (``p = torch.softmax(z, 1)``): the nearest line
    above in the same file that assigns that name."""
    made = origin.made
    x = _operand(made, "self")
    if x is None or x.name is None or origin.spot is None:
        return None
    path, line, function = origin.spot
    for back in range(line - 1, max(0, line - 200), -1):
        targets, _ = assigned_names((path, back, function))
        if x.name in targets:
            return (path, back, function)
    return None


# --- the report --------------------------------------------------------------------------------


def _value(bits_names: Sequence[str]) -> str:
    return bits_names[0] if bits_names else "nan"


def symptom_record(seen: Any) -> Symptom:
    names = kind_names(seen.bits)
    spot, run = seen.backward if seen.backward is not None else (None, 0)
    return Symptom(
        what=seen.what,
        value=_value(names),  # type: ignore[arg-type]
        names=tuple(seen.names),
        place=place(seen.spot),
        iteration=seen.iteration,
        backward=place(spot),
        backward_run=run,
    )


def _subject(s: Symptom) -> str:
    value = _VALUE_WORDS[s.value]
    if s.what == "loss":
        who = s.names[0] if s.names else "the loss"
        return f"{who} became {value} at iteration {s.iteration}"
    if s.what == "gradient":
        who = f"the gradient of {s.names[0]}" if s.names else "a gradient"
        more = f" (and {len(s.names) - 1} more)" if len(s.names) > 1 else ""
        return f"{who}{more} became {value} at iteration {s.iteration}"
    who = s.names[0] if s.names else "a parameter"
    more = f" (and {len(s.names) - 1} more)" if len(s.names) > 1 else ""
    return f"{who}{more} became {value} in the optimizer step of iteration {s.iteration}"


def _at(made: Made) -> str:
    where = "an unknown line" if made.place is None else f"{made.place.path}:{made.place.line}"
    code = made.call or (made.place.code if made.place else made.op)
    if made.phase == "backward":
        return f"in backward, by the gradient of `{code}` ({made.node}) at {where}"
    return f"by `{code}` at {where}"


def headline(
    s: Symptom,
    origin: Optional[Made],
    why: Optional[str],
    entered: Optional[Made],
    level: str,
    rule: Optional[str],
) -> str:
    head = _subject(s)
    if origin is not None:
        reason = f" ({why})" if why else ""
        held = [o for o in origin.operands if o.nan or o.posinf or o.neginf]
        if origin.from_finite or not held:
            return f"{head}: the first non-finite value was made {_at(origin)}{reason}"
        made = " and ".join(_VALUE_WORDS[k] for k in origin.made)
        kinds = sorted({k for o in held for k, n in _counts(o) if n})
        source = (
            "outside the operations watched (data, a constant, or state from before)"
            if level == "every-op"
            else "an operation --nan does not check (--nan-all checks every operation)"
        )
        return (
            f"{head}: the first {made} was made {_at(origin)}{reason}, from "
            f"{', '.join(_who(o, o.argument) for o in held[:2])} that already held "
            f"{' and '.join(kinds)}, made by {source}"
        )
    if entered is not None:
        held = next((o for o in entered.operands if o.nan or o.posinf or o.neginf), None)
        what = _who(held, "an operand") if held is not None else "an operand"
        where = (
            "an unknown line"
            if entered.place is None
            else (f"{entered.place.path}:{entered.place.line}")
        )
        return (
            f"{head}: no operation made it from finite values; {what} already held "
            f"{', '.join(_VALUE_WORDS[k] for k in entered.made)} when {where} read it"
        )
    if rule == "divergence" and why:
        return f"{head}: {why}"
    if level == "losses":  # no operation was checked: nothing is known of what made it
        at = f" ({s.place.path}:{s.place.line})" if s.place is not None else ""
        return f"{head}{at}; run again with --nan to find the operation that made it"
    phase = {
        "loss": "the forward pass made it",
        "gradient": "the backward pass made it (the loss was finite)",
        "parameter": "the step made it from finite gradients",
    }[s.what]
    if level == "every-op":
        return f"{head}: {phase}, from values that came from outside the operations watched"
    return (
        f"{head}: {phase}, but none of the operations --nan checks did; "
        "run again with --nan-all to check every operation"
    )


def diagnosis(seen: Any, level: str) -> NonFinite:
    """The report's record of the run's first NaN or Inf."""
    s = symptom_record(seen)
    origin = seen.origins[0] if seen.origins else None
    then = None
    if origin is not None and "nan" not in origin.made.made and s.value == "nan":
        then = next((o.made for o in seen.origins[1:] if "nan" in o.made.made), None)
    rule = why = None
    if origin is not None:
        rule, why = explain(origin.made, origin.producers, seen.losses)
    else:
        grew = diverging(seen.losses)
        if grew is not None:
            i, a, j, b = grew
            rule, why = (
                "divergence",
                (
                    f"the loss grew from {a:.3g} at iteration {i} to {b:.3g} at iteration {j}, "
                    "then overflowed: the updates are too large"
                ),
            )
    entered = seen.entered.made if seen.entered is not None and origin is None else None
    remedies = fixes(rule, origin, seen)
    if entered is not None and not remedies:
        held = next((o for o in entered.operands if o.nan or o.posinf or o.neginf), None)
        if held is not None and held.name:
            fix = nanfix.nan_to_num_operand(
                seen.entered.spot,
                held.name,
                f"if a NaN in {held.name} means a missing value, replace it where it is read",
            )
            remedies = (fix,) if fix is not None else ()
    return NonFinite(
        headline=headline(s, origin.made if origin else None, why, entered, level, rule),
        symptom=s,
        origin=origin.made if origin else None,
        then=then,
        entered=entered,
        rule=rule,
        why=why,
        losses=tuple(v for _, v in seen.losses[-16:]),
        watch=level,  # type: ignore[arg-type]
        fixes=remedies,
    )
