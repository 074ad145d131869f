"""The tool's two modes on PyTorch's mode stacks, under the user's own, and out of their way.

PyTorch keeps one stack of ``TorchFunctionMode`` objects and one of
``TorchDispatchMode`` objects per thread, and a mode's ``__exit__`` pops
whatever is on top. A mode the user enters in one statement and leaves in
another (``fc.__enter__()`` ... ``fc.__exit__(...)``) would, with the tool's
modes entered above it around each statement, pop the tool's mode and leave
its own running: ``FlopCounterMode`` counted nothing. So the tool's modes
live at the *bottom* of each stack: ``insert`` pushes one below the user's
modes, ``remove`` takes it out from wherever it is and puts the user's back
as they were. Below the user's modes the tool also sees what actually runs:
an operation as the user's modes pass it on.

Infra dispatch modes (``FakeTensorMode`` and kin) are PyTorch's own and stay
below everything; neither function touches them. Both functions push and pop
through PyTorch's stack primitives, not the modes' ``__enter__``: the Python
flags ``TorchDispatchMode.__enter__`` sets (``is_in_torch_dispatch_mode``)
stay as plain Python has them.

``user_modes_aside`` is the context of the tool's own reads between two
statements: no mode of the user's sees them (a logging mode would log the
tool's reads, a counting mode count them).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, List

import torch

_fn_len, _fn_at = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
_fn_pop, _fn_push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
_d_len, _d_at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at
_d_pop, _d_push = torch._C._pop_torch_dispatch_stack, torch._C._push_on_torch_dispatch_stack


class _Stack:
    """One of PyTorch's two mode stacks, through its primitives."""

    __slots__ = ("length", "at", "pop", "push")

    def __init__(self, length: Callable, at: Callable, pop: Callable, push: Callable) -> None:
        self.length, self.at, self.pop, self.push = length, at, pop, push

    def top(self) -> Any:
        n = self.length()
        return self.at(n - 1) if n else None

    def lift(self, stop: Callable[[Any], bool]) -> List[Any]:
        """Pop the modes above the first (from the top) for which ``stop`` holds, or above
        the infra modes; the popped ones, top first."""
        lifted: List[Any] = []
        while True:
            top = self.top()
            if top is None or stop(top) or _infra(top):
                return lifted
            lifted.append(self.pop())

    def restore(self, lifted: List[Any]) -> None:
        for mode in reversed(lifted):
            self.push(mode)


FUNCTION = _Stack(_fn_len, _fn_at, _fn_pop, lambda mode: _fn_push(mode))
DISPATCH = _Stack(_d_len, _d_at, lambda: _d_pop(None), lambda mode: _d_push(mode))


def _infra(mode: Any) -> bool:
    check = getattr(mode, "is_infra_mode", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False


def insert(stack: _Stack, mode: Any) -> None:
    """Push ``mode`` below the user's modes (above the infra modes, if any)."""
    if stack.top() is None:  # the common case: nothing of the user's
        stack.push(mode)
        return
    lifted = stack.lift(lambda m: False)
    stack.push(mode)
    stack.restore(lifted)


def remove(stack: _Stack, mode: Any) -> bool:
    """Take ``mode`` out of the stack, wherever it is, the others left in order; whether it
    was there."""
    if stack.top() is mode:  # the common case
        stack.pop()
        return True
    lifted = stack.lift(lambda m: m is mode)
    found = stack.top() is mode
    if found:
        stack.pop()
    stack.restore(lifted)
    return found


@contextlib.contextmanager
def user_modes_aside() -> Iterator[None]:
    """No mode on either stack (the user's, or the tool's own left on in a ``snoop()`` span)
    sees what runs inside: the tool's reads between two statements. The stacks are as they
    were afterwards."""
    if not _d_len() and not _fn_len():
        yield
        return
    functions = FUNCTION.lift(lambda m: False)
    dispatch = DISPATCH.lift(lambda m: False)
    try:
        yield
    finally:
        DISPATCH.restore(dispatch)
        FUNCTION.restore(functions)


__all__ = ["DISPATCH", "FUNCTION", "insert", "remove", "user_modes_aside"]
