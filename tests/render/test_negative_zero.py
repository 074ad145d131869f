"""A zero that changes sign is a change: ``-0.0 == 0.0`` in Python, but PyTorch prints the
two apart, and so must every output, also where unchanged tensors are drawn or written once."""

from __future__ import annotations

import json

import tensortrace
from tensortrace.render import RenderOptions, render
from tensortrace.render.json import traces_from_json

SCENARIO = """\
title: negative zero
steps:
  - run: |
      x = torch.zeros(2)
      y = torch.ones(1)
  - y.add_(1)
  - x.data.neg_()
"""


def _row(text: str, step: int, name: str) -> str:
    """The row of ``name`` in the table of step ``step``, its spaces squeezed."""
    block = text.split(f"Step {step} ")[1].split("\nStep ")[0]
    row = next(line for line in block.splitlines() if line.startswith(f"  {name} "))
    return " ".join(row.split())


def test_a_zero_that_changes_sign_is_shown_and_marked_in_the_console_and_json():
    trace = tensortrace.trace(tensortrace.loads_scenario(SCENARIO, path="z.yaml"), safe=False)
    first, _, last = (step.tensors[0] for step in trace.steps)
    assert str(last.values.data) == "(-0.0, -0.0)"  # what PyTorch holds after neg_
    assert first == last  # the trap: the two records compare equal
    document = render([trace], "json")
    steps = json.loads(document)["steps"]
    # step 2 shares step 1's record (written as a reference); step 3's, equal to it by ==,
    # is not that record: it is written in full, its sign kept
    assert steps[1]["tensors"][0] == ["x", 1]
    assert [str(steps[i]["tensors"][0]["values"]["data"]) for i in (0, 2)] == [
        "[0.0, 0.0]",
        "[-0.0, -0.0]",
    ]
    for traces in ([trace], traces_from_json(document)):  # in process, and read back
        text = render(traces, "console", RenderOptions(width=100, color=False))
        assert _row(text, 2, "x") == "x [0., 0.] S1 0 False True None None"
        assert _row(text, 3, "x") == "x [-0., -0.]* S1 0 False True None None"


def test_only_values_and_grad_of_a_tensors_record_hold_floats():
    """``same`` compares the rest of a record with ``==``: exact for what is not a float."""
    import typing

    from tensortrace.render.facts import FLOAT_FIELDS
    from tensortrace.trace import TensorState, Values

    def holds_floats(kind) -> bool:
        if kind is float or kind is Values:
            return True
        return any(holds_floats(k) for k in typing.get_args(kind))

    hints = typing.get_type_hints(TensorState, include_extras=True)
    assert tuple(f for f, kind in hints.items() if holds_floats(kind)) == FLOAT_FIELDS
