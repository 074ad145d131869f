"""Where each pass of a step's loop begins, marked in the op log while the loop runs."""

from __future__ import annotations

import ast
import builtins

import pytest

from tensortrace.record.loops import MARKER, marked
from tensortrace.record.tracer import trace
from tensortrace.scenario import loads_scenario

from conftest import has_sandbox, state, step_of

MODES = [True, False] if has_sandbox() else [False]

LOOP = """
title: a loop of five passes
setup: |
  w = torch.zeros(3)
steps:
  - run: |
      total = torch.tensor(0.)
      for i in range(5):
          w.add_(1.)
          total = w.sum()
      done = w * 2
"""


def _trace(text: str, safe: bool = True, ops: bool = True):
    return trace(loads_scenario(text), safe=safe, ops=ops)


@pytest.mark.parametrize("safe", MODES)
def test_each_pass_is_marked_where_its_first_operation_is(safe):
    step = step_of(_trace(LOOP, safe=safe), 1)
    loop = step.loop
    assert loop is not None and loop.passes == 5 and len(loop.marks) == 5
    assert loop.line == 8  # the for statement's line in the text (it opens with a blank line)
    calls = [op.name for op in step.ops]
    for mark in loop.marks:  # every pass begins with its own w.add_(1.)
        assert calls[mark.op] == "torch.Tensor.add_"
    # before the loop: the tensor() call; after it, from ``end``: w * 2
    assert calls[: loop.marks[0].op][0] == "torch.tensor"
    assert loop.end is not None and "torch.Tensor.mul" in calls[loop.end.op :]
    assert "torch.Tensor.mul" not in calls[: loop.end.op]
    # the scalars as each pass began: total was 0, then the sum after each pass
    totals = [dict(m.scalars).get("total") for m in loop.marks]
    assert totals == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert dict(loop.end.scalars)["total"] == 15.0
    assert state(step, "w").values.data == (5.0, 5.0, 5.0)  # the marks changed nothing


def test_the_marker_is_among_the_builtins_only_while_the_loop_step_runs():
    check = f"torch.tensor(hasattr(builtins, {MARKER!r}))"
    text = LOOP.replace("      done = w * 2", f"      done = w * 2\n      during = {check}")
    text = text.replace("setup: |\n", "setup: |\n  import builtins\n")
    result = _trace(text + f"  - run: after = {check}\n", safe=False)
    assert state(step_of(result, 1), "during").values.data is True
    assert state(step_of(result, 2), "after").values.data is False
    assert not hasattr(builtins, MARKER)


def test_a_loop_inside_with_is_marked_and_two_loops_or_none_are_not():
    inside = marked(ast.parse("with torch.no_grad():\n    for p in ps:\n        p.add_(1)\n"))
    assert inside is not None
    assert MARKER in ast.unparse(inside)
    assert marked(ast.parse("for a in b: pass\nfor c in d: pass\n")) is None
    assert marked(ast.parse("def f():\n    for a in b: pass\n")) is None
    tree = ast.parse("for a in b:\n    x = 1\ny = 2\n")
    before = ast.dump(tree)
    assert marked(tree) is not None and ast.dump(tree) == before  # the tree it was given: as it was


def test_a_loop_that_raises_has_no_end_and_a_break_still_ends_it():
    raised = step_of(
        _trace(
            "title: t\nsteps:\n  - run: |\n      x = torch.ones(2)\n"
            "      for i in range(4):\n          x.add_(1.)\n          if i == 2:\n"
            "              raise ValueError('stop')\n    raises: ValueError\n"
        ),
        1,
    )
    assert raised.loop.passes == 3 and raised.loop.end is None and raised.error is not None
    broke = step_of(
        _trace(
            "title: t\nsteps:\n  - run: |\n      x = torch.ones(2)\n"
            "      while True:\n          x.add_(1.)\n          if x[0] > 3:\n              break\n"
        ),
        1,
    )
    assert broke.loop.passes == 3 and broke.loop.end is not None


def test_without_recording_no_loop_is_marked():
    assert step_of(_trace(LOOP, ops=False), 1).loop is None


def test_a_marked_loop_computes_what_plain_python_computes():
    plain = {"torch": __import__("torch")}
    exec("w = torch.zeros(3)", plain)
    exec(loads_scenario(LOOP).steps[0].run.text, plain)
    step = step_of(_trace(LOOP, safe=False), 1)
    assert state(step, "done").values.data == tuple(plain["done"].tolist())
    assert state(step, "w").version == plain["w"]._version
