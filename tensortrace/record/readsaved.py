"""Whether a custom ``autograd.Function``'s backward reads the tensors its forward saved.

A generated node (``MulBackward0``) unpacks every tensor it saved when its
backward runs, so a saved tensor changed in place makes it raise. A custom
Function's node unpacks them only when its ``backward`` reads
``ctx.saved_tensors`` (every one of them is checked then); one that never
reads them runs on, whatever changed. Which it is, is in the backward's own
code: this module reads its bytecode (never runs it), following ``ctx``
from the first argument. Three answers: it reads them (``READS``), it
provably never does (``NEVER``: ``ctx`` is used only for other attributes),
or it cannot be told (``UNKNOWN``: ``ctx`` is passed on, kept in a closure,
or reassigned), which the predictions word as "may fail".
"""

from __future__ import annotations

import dis
import inspect
from typing import Any, Dict, List, Optional

READS, NEVER, UNKNOWN = "reads", "never", "unknown"

# the attributes of ctx that unpack what forward saved
_UNPACKING = frozenset({"saved_tensors", "saved_variables"})
# an instruction that loads one local variable (3.12 added the checked form, 3.14 the borrowed)
_LOAD_ONE = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
# what may follow a load of ctx without passing ctx itself anywhere
_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR"})

_by_function: Dict[Any, str] = {}  # the answer for each backward function, worked out once


def backward_reads_saved(node: Any) -> str:
    """``READS`` for any node but a custom Function's; for one of those, what its code says."""
    function = getattr(type(node), "_forward_cls", None)
    if function is None:
        return READS
    user_fn = _user_backward(function)
    if user_fn is None:
        return UNKNOWN
    try:
        got = _by_function.get(user_fn)
    except TypeError:  # not hashable
        return _answer(user_fn)
    if got is None:
        got = _by_function[user_fn] = _answer(user_fn)
    return got


def _user_backward(function: Any) -> Optional[Any]:
    """The function PyTorch calls for the node's backward: ``vjp`` where it is defined, as
    ``BackwardCFunction.apply`` chooses, else ``backward``; unwrapped (``once_differentiable``)."""
    try:
        import torch

        base = torch.autograd.Function
        chosen = function.vjp if function.vjp is not base.vjp else function.backward
        return inspect.unwrap(chosen)
    except Exception:
        return None


def _answer(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount < 1:
        return UNKNOWN
    ctx = code.co_varnames[0]
    if ctx in code.co_cellvars:  # a nested function keeps it
        return UNKNOWN
    try:
        instructions = list(dis.get_instructions(code))
    except Exception:
        return UNKNOWN
    reads = False
    for at, ins in enumerate(instructions):
        if ins.opname.startswith("STORE_FAST") or ins.opname.startswith("DELETE_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if ctx in names:
                return UNKNOWN
            continue
        if not ins.opname.startswith("LOAD_FAST"):
            continue
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        if ctx not in names:
            continue
        following = instructions[at + 1] if at + 1 < len(instructions) else None
        # ctx must end up on top (3.13 loads two locals in one instruction), for an attribute
        on_top = ins.opname in _LOAD_ONE or (names[-1] == ctx and ctx not in names[:-1])
        if not on_top or following is None or following.opname not in _ATTRIBUTE:
            return UNKNOWN  # ctx itself goes somewhere: a call, a container, a return
        name = following.argval
        if not isinstance(name, str) or name.startswith("__"):
            return UNKNOWN
        if following.opname in ("LOAD_ATTR", "LOAD_METHOD") and name in _UNPACKING:
            reads = True
    return READS if reads else NEVER


def checkpoint_inputs(node: Any, namer: Any) -> Optional[List[Any]]:
    """What a non-reentrant checkpoint saved of its inputs, as ``saved.read_node`` entries,
    when ``node`` saved a tensor under that checkpoint's hooks; else None.

    ``torch.utils.checkpoint(..., use_reentrant=False)`` saves nothing of its
    region: its pack hook keeps a placeholder, and its unpack hook, at
    backward, runs the region again from the inputs, which it saved apart,
    version check included: so an input changed in place since makes backward
    raise there. torch 2.13 keeps them as saved tensors of the checkpoint's
    frame (``saved_args``), earlier releases on a node of their own
    (``frame.input_saver``, outside the outputs' graph). The frame is found in
    the unpack hook's closure, only as that exact class of torch's own module
    (no user object's attribute is read).
    """
    from .saved import read_items, read_node, saved_items

    for item in saved_items(node):
        hook = getattr(item[1], "unpack_hook", None)
        if hook is None:
            continue
        for cell in getattr(hook, "__closure__", None) or ():
            try:
                frame = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            kind = type(frame)
            if kind.__name__ != "_CheckpointFrame" or kind.__module__ != "torch.utils.checkpoint":
                continue
            state = vars(frame)
            saver = state.get("input_saver")
            fn = getattr(saver, "grad_fn", None) if saver is not None else None
            if fn is not None:
                return read_node(fn, namer)
            args = state.get("saved_args") or ()
            saved = [
                (f"inputs[{i}]", arg, None, None)
                for i, arg in enumerate(args)
                if type(arg).__name__ == "SavedTensor"
            ]
            return read_items(saved, namer)
    return None


__all__ = ["NEVER", "READS", "UNKNOWN", "backward_reads_saved", "checkpoint_inputs"]
