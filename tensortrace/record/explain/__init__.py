"""Plain-language readings of the PyTorch errors that copy and autograd code meets.

When a step raises, the trace keeps the exception's class name and message and,
where a rule recognises them, an ``Explanation``: what happened, in terms of the
mechanism (version counters, saved tensors, leaves, views), and what to write
instead. The explanation quotes what the message names (the tensor, the graph
node, the versions, the shapes), so it reads as a statement about the user's own
code rather than a generic hint.

The rules are data: ``explanations.yaml`` holds one entry per known message
(its class names, pattern, title, what happened and fix), in the order they are
tried; ``builders.py`` holds the few readings that need code, and ``rules.py``
reads and checks the file on first use. To explain a new error, edit one data
entry and add one test: ``tests/record/test_explain.py`` raises every error for real
and fails for an entry that no real error reaches, so a PyTorch release that
rewords a message shows up as a failing test rather than a missing explanation.

Some rules match warnings (``UserWarning``) as well, with the warning category
as the class name: the same readings help when a step warns.

This package never imports torch: renderers and readers of saved JSON traces
use it too.
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, Tuple

from ...trace import ErrorInfo, Explanation, TensorState, evolve
from .builders import forward_name, inplace_saved_fix
from .rules import ExplanationDataError, Rule, load_rules

# Only the head of a message is searched: every rule matches the text PyTorch
# puts first, and C++ backtraces appended after it can run to many kilobytes.
_MAX_MESSAGE = 8192

# The rule whose groups name_the_saved_tensor reads.
_SAVED_TENSOR_RULE = "inplace-saved-tensor"


@functools.lru_cache(maxsize=64)
def _match(name: str, head: str) -> Optional[Tuple[Rule, Mapping[str, str]]]:
    """The first rule for this class name and message head, with its groups ('' when absent).

    Cached, so that the tracer's second look at the same error (to name the
    saved tensor) reuses this match instead of searching the message again.
    """
    for rule in load_rules():
        if name not in rule.types:
            continue
        found = rule.pattern.search(head)
        if found is not None:
            return rule, MappingProxyType(found.groupdict(default=""))
    return None


def _lookup(type_name: object, message: object) -> Optional[Tuple[Rule, Mapping[str, str]]]:
    if not isinstance(type_name, str) or not isinstance(message, str):
        return None
    return _match(type_name.rsplit(".", 1)[-1], message[:_MAX_MESSAGE])


def explain(type_name: str, message: str) -> Optional[Explanation]:
    """Match a PyTorch error by its class name and message; None when unknown.

    ``type_name`` may be qualified (``builtins.RuntimeError``); only its last
    part counts. The first rule whose class and pattern both match wins.
    """
    matched = _lookup(type_name, message)
    if matched is None:
        return None
    rule, fields = matched
    title, what, fix = rule.build(fields)
    return Explanation(title=title, what=what, fix=fix, topic=rule.topic)


def name_the_saved_tensor(
    error: ErrorInfo,
    tensors: Sequence[TensorState],
    *,
    proven: Optional[Sequence[str]] = None,
    family: Sequence[str] = (),
) -> ErrorInfo:
    """Say which of the scenario's names PyTorch's saved tensor is.

    PyTorch's message names it as "[torch.FloatTensor [3]], output 0 of Sigmoid".

    Only an error explained by the saved-tensor rule is touched; any other comes
    back as it is. Shape, version and creator are not proof (an unnamed
    ``x.exp()`` and a named ``k`` can agree on all three), so a name is given
    only when the recorder proved by identity that it is the saved tensor:
    ``proven`` lists those names. When the recorder found the saved tensors
    and none is named (``proven`` empty), the explanation says that the
    changed tensor is an unnamed intermediate and names its operation. With
    ``proven`` None (the recorder could not look), or proven names on more
    than one storage (several saved tensors changed, and the message does
    not say which it means), the explanation stays as it was. When a name is
    given, the fix speaks of that name too.
    """
    if error.explanation is None or proven is None:
        return error
    matched = _lookup(error.type, error.message)
    if matched is None or matched[0].id != _SAVED_TENSOR_RULE:
        return error
    fields = matched[1]
    now = fields["now"]
    node = fields["node"]
    candidates = [t for t in tensors if t.name in set(proven) and t.kind != "ndarray"]
    op = forward_name(node) if node else ""
    made_by_op = [t for t in candidates if op and (t.grad_fn or "").startswith(op + "Backward")]
    # of aliases proven to be it (y, z = y.detach()), the one the operation made is it
    if made_by_op:
        candidates = made_by_op
    if candidates:
        storages = {t.storage for t in candidates}
        # several changed saved tensors: PyTorch names one, we cannot tell which
        if len(storages) != 1 or None in storages:
            return error
        names = ", ".join(f"`{t.name}`" for t in candidates)
        which = "that is" if len(candidates) == 1 else "that is the memory of"
        where = f" (storage {candidates[0].storage})"
        note = (
            f" In this scenario {which} {names}{where}, "
            f"saved at version {fields['saved']} and now at version {now}."
        )
    elif family:
        # unnamed, but a view of a named tensor: it lies in its storage and shares its counter
        states = {t.name: t for t in tensors}
        storage = next(
            (states[n].storage for n in family if n in states and states[n].storage), None
        )
        where = f" ({storage})" if storage else ""
        names = ", ".join(f"`{n}`" for n in family)
        note = (
            f" In this scenario that is an unnamed view that lies in the storage of "
            f"{names}{where} and shares its version counter, so writing {names} changed it: "
            f"saved at version {fields['saved']} and now at version {now}."
        )
    else:
        made_by = f", the output of `{op}`" if op else ""
        note = (
            f" In this scenario that is an unnamed intermediate{made_by} "
            "(no name of the scenario refers to it), "
            f"saved at version {fields['saved']} and now at version {now}."
        )
    fix = inplace_saved_fix(candidates[0].name) if candidates else error.explanation.fix
    explanation = evolve(error.explanation, what=error.explanation.what + note, fix=fix)
    return evolve(error, explanation=explanation)


def name_the_carried_state(error: ErrorInfo, carrier: str, *, itself: bool) -> ErrorInfo:
    """Say that a "backward a second time" error came from a state carried over, when the
    recorder found it: the backward started from a graph built after an earlier backward
    freed another, on a tensor of that freed graph (``carrier``: the name still bound to
    that tensor when ``itself``, else the named tensor computed from it). The fix is then to
    detach the carrier, not ``retain_graph=True``. Any other error comes back as it is."""
    matched = _lookup(error.type, error.message)
    if error.explanation is None or matched is None or matched[0].id != "backward-twice":
        return error
    on = (
        f"on `{carrier}`, which belongs to the graph that backward freed"
        if itself
        else f"on a tensor of the graph that backward freed (`{carrier}` is computed from it)"
    )
    what = (
        f"{error.explanation.what} Here this backward started from a graph built after the "
        f"first backward, {on}: a state carried over, as from one loop iteration or chunk to "
        "the next, ties the new graph to the freed one."
    )
    fix = (
        f"Detach the carried state where each iteration or chunk begins (`{carrier} = "
        f"{carrier}.detach()`), so that each backward runs through its own part of the graph "
        "only. `retain_graph=True` is not the fix here: each backward would run again through "
        "every earlier iteration (adding their gradients again, at a cost that grows with each "
        'one), and fail with "modified by an inplace operation" once an optimizer step has '
        "changed a weight they saved."
    )
    explanation = evolve(error.explanation, what=what, fix=fix)
    return evolve(error, explanation=explanation)


def _unique(items: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def __getattr__(name: str) -> Any:
    # RULES and TOPICS are computed on first access, so that importing this
    # package does not read the data file.
    if name == "RULES":
        return load_rules()
    if name == "TOPICS":
        return _unique(tuple(rule.topic for rule in load_rules()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ExplanationDataError",
    "RULES",
    "Rule",
    "TOPICS",
    "explain",
    "load_rules",
    "name_the_carried_state",
    "name_the_saved_tensor",
]
