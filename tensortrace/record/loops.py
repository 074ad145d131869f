"""Where each pass of a step's loop began, marked in the step's op log as it runs.

A step whose code is (or holds, inside ``with``, ``if`` or ``try``) one outermost
``for`` or ``while`` loop is compiled with one statement added as the first of
the loop's body, and one after the loop: a call of ``MARKER``, which the tracer
puts in the step's builtins while the step runs. Each call notes how long the
step's lists were at that moment (operations, backward calls, warnings) and the
values of the scenario's one-element floating-point tensors on the CPU (a loss,
a learning rate). Nothing else is read and nothing is written: the marks cost a
Python call a pass, and a renderer can then show a loop's first pass in full and
sum up the rest (``render/loops.py``). The code the user reads, its lines and
its tracebacks are those of the step as written.

The recorded ``Loop`` goes with the step (``Step.loop``); ``--format json``
keeps every mark.
"""

from __future__ import annotations

import ast
import copy
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..trace import Loop, LoopPass
from ..trace.numbers import spell

MARKER = "__tensortrace_pass__"
MAX_MARKS = 1000  # passes marked per step; the rest are counted
MAX_SCALARS = 8  # one-element tensors read at each mark
_LOOPS = (ast.For, ast.While)
_BLOCKS = (ast.With, ast.If, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _outermost_loops(body: Sequence[ast.stmt], path: Tuple[Any, ...], found: List[Any]) -> None:
    for position, node in enumerate(body):
        here = path + ((body, position),)
        if isinstance(node, _LOOPS):
            found.append(here)
        elif isinstance(node, _BLOCKS):
            for name in ("body", "orelse", "finalbody"):
                _outermost_loops(getattr(node, name, None) or (), here + (name,), found)
            for handler in getattr(node, "handlers", None) or ():
                _outermost_loops(handler.body, here + ("handlers", handler), found)


def _call(line: int, column: int, *args: int) -> ast.stmt:
    call = ast.Call(
        func=ast.Name(id=MARKER, ctx=ast.Load()),
        args=[ast.Constant(value=a) for a in args],
        keywords=[],
    )
    stmt = ast.Expr(value=call)
    for node in ast.walk(stmt):
        node.lineno, node.end_lineno = line, line
        node.col_offset, node.end_col_offset = column, column
    return stmt


def marked(tree: ast.Module) -> Optional[ast.Module]:
    """``tree`` with its one outermost loop marked (a copy: ``tree`` is left as it was), or
    None when it holds no loop or several outside any function."""
    found: List[Any] = []
    _outermost_loops(tree.body, (), found)
    if len(found) != 1:
        return None
    return _rebuilt(tree, list(found[0]))


def _rebuilt(tree: ast.Module, path: List[Any]) -> ast.Module:
    """A copy of the nodes along ``path`` down to the loop, the loop's body and the body
    around it given the marks; every other node is shared with ``tree``, unchanged."""
    top = copy.copy(tree)
    holder: Any = top
    field = "body"
    i = 0
    while True:
        body, position = path[i]
        body = list(getattr(holder, field))
        node = copy.copy(body[position])
        body[position] = node
        if i == len(path) - 1:  # the loop itself
            first = node.body[0]
            node.body = [_call(first.lineno, first.col_offset, node.lineno)] + list(node.body)
            body.insert(position + 1, _call(node.lineno, node.col_offset, node.lineno, 1))
            setattr(holder, field, body)
            return top
        setattr(holder, field, body)
        step = path[i + 1]
        if step == "handlers":  # into an ``except`` clause of a ``try``
            handlers = list(node.handlers)
            handler = copy.copy(path[i + 2])
            handlers[handlers.index(path[i + 2])] = handler
            node.handlers = handlers
            holder, field, i = handler, "body", i + 3
        else:
            holder, field, i = node, step, i + 2


class LoopMarks:
    """The marks of one step's loop, kept by its ``ops.OpsRecorder`` until the step ends."""

    def __init__(self, line: Optional[int]) -> None:
        self.line = line
        self.passes = 0
        self.marks: List[Tuple[int, int, int, tuple]] = []
        self.end: Optional[Tuple[int, int, int, tuple]] = None

    def record(self, ops: int, flows: int) -> Loop:
        """The ``Loop`` record, its indexes bounded by the step's ``ops`` and ``flows``."""

        def one(mark: Tuple[int, int, int, tuple]) -> LoopPass:
            return LoopPass(
                op=min(mark[0], ops), flow=min(mark[1], flows), warning=mark[2], scalars=mark[3]
            )

        return Loop(
            line=self.line,
            passes=self.passes,
            marks=tuple(one(m) for m in self.marks),
            end=one(self.end) if self.end is not None else None,
        )


class PassMarker:
    """``MARKER`` itself: called by the marked code at each pass and after the loop.

    ``recorder()`` is the step's ``OpsRecorder`` (None: nothing is recorded); ``caught`` the
    step's warnings; ``namespace`` where the scalars are read; ``place(line)`` the loop's
    line in the scenario file.
    """

    def __init__(
        self,
        recorder: Callable[[], Any],
        caught: List[Any],
        namespace: Dict[str, Any],
        place: Callable[[int], Optional[int]] = lambda line: line,
    ) -> None:
        self.recorder = recorder
        self.caught = caught
        self.namespace = namespace
        self.place = place

    def __call__(self, line: int = 0, end: int = 0) -> None:
        rec = self.recorder()
        if rec is None:
            return
        marks = rec.loop
        if marks is None:
            marks = rec.loop = LoopMarks(self.place(line) if line else None)
        if not end:
            marks.passes += 1
            if len(marks.marks) >= MAX_MARKS:
                return
        paused, rec.paused = rec.paused, True  # the tool's reads are not the code's
        try:
            mark = (len(rec.raw), len(rec.flow.calls), len(self.caught), self._scalars())
        finally:
            rec.paused = paused
        if end:
            marks.end = mark
        else:
            marks.marks.append(mark)

    def _scalars(self) -> tuple:
        found = []
        with torch._C.DisableTorchFunction():
            for name, value in list(self.namespace.items()):
                if type(value) is not torch.Tensor and type(value) is not torch.nn.Parameter:
                    continue
                if name.startswith("_"):
                    continue
                try:
                    if (
                        value.layout is not torch.strided
                        or value.device.type != "cpu"
                        or not value.is_floating_point()
                        or value.is_complex()
                        or value.numel() != 1
                    ):
                        continue
                    number = value.item()
                except Exception:  # a tensor PyTorch will not read (meta, inference): skipped
                    continue
                found.append((name, number if math.isfinite(number) else spell(number)))
                if len(found) >= MAX_SCALARS:
                    break
        return tuple(found)


__all__ = ["MARKER", "MAX_MARKS", "MAX_SCALARS", "LoopMarks", "PassMarker", "marked"]
