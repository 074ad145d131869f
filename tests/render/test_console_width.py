"""The console at 60, 80 and 120 columns: no line too wide, no number or name cut in two.

A table may wrap between the elements of a value, stack its columns, or
shorten with a visible ellipsis; it may never split ``-0.6543`` into
``-0.654`` and ``3``, nor ``G.weight`` into ``G.weig`` and ``ht``, and the
code the variants compare is wrapped, never cut short.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Set

import pytest

from tensortrace.trace import evolve
from render_fixtures import ENV, exact as exact_values, ok, recorded_traces, tensor
from tensortrace.trace import ScenarioInfo, Step, Trace
from tensortrace.render import RenderOptions, render
from tensortrace.render.text import format_number, grad_norm, value_brief, value_line

WIDTHS = (60, 80, 120)
NUMBER = re.compile(r"(?<![\w.+])-?\d[\d,]*(?:\.\d*)?(?:e[-+]?\d+)?")

WEIGHTS = (
    (-0.6543, 0.419, -1.2875, 0.0031, 2.5617, -0.9999),
    (1.0625, -0.3338, 0.7071, -2.2222, 0.1234, 3.1416),
)
LONG_NAME = "encoder.layers.0.self_attn.in_proj_weight"


def many_elements_trace() -> Trace:
    """A parameter with a short dotted name beside rows of many elements, and its grad."""
    w = tensor(
        "G.weight", WEIGHTS, requires_grad=True, kind="parameter", nbytes=48, grad=WEIGHTS[::-1]
    )
    b = tensor(
        "G.bias",
        WEIGHTS[1][:2],
        storage="S2",
        requires_grad=True,
        kind="parameter",
        grad=(1.0, 1.0),
    )
    y = tensor(
        "y", WEIGHTS[0], storage="S3", requires_grad=True, is_leaf=False, grad_fn="AddmmBackward0"
    )
    return Trace(
        scenario=ScenarioInfo(title="a linear layer"),
        environment=ENV,
        steps=(Step(index=1, code="y = G(x)", line=2, tensors=(w, b, y)),),
    )


def _wide_steps(alias: str) -> tuple:
    w = tensor("G.weight", WEIGHTS, requires_grad=True, kind="parameter", nbytes=48)
    long = tensor(LONG_NAME, WEIGHTS, storage="S2", requires_grad=True, kind="parameter", nbytes=48)
    row = tensor(
        "row",
        WEIGHTS[0],
        offset=6,
        is_view=True,
        base="G.weight",
        nbytes=48,
        requires_grad=True,
        is_leaf=False,
        grad_fn="SelectBackward0",
    )
    w2 = evolve(
        tensor(
            "G.weight", WEIGHTS, requires_grad=True, kind="parameter", nbytes=48, grad=WEIGHTS[::-1]
        )
    )
    return (
        Step(
            index=1,
            code="G = torch.nn.Linear(6, 2)\n" + LONG_NAME.replace(".", "_") + " = 1",
            line=3,
            tensors=(w, long),
        ),
        Step(
            index=2,
            code=f"row = {alias}",
            line=5,
            tensors=(w, long, row),
            expectations=(ok("row.shape == (6,)", 6),),
        ),
        Step(index=3, code="(G.weight * 2).sum().backward()", line=7, tensors=(w2, long, row)),
    )


def wide_trace() -> Trace:
    """Long names, rows of many four-digit elements, a view and a grad."""
    return Trace(
        scenario=ScenarioInfo(title="long names and many elements"),
        environment=ENV,
        steps=_wide_steps("G.weight[1]"),
    )


def wide_variants() -> List[Trace]:
    """Two variants whose code is long enough to be cut if a column were too narrow."""
    codes = {
        "clone-detach": "G.weight.clone().detach().requires_grad_(True)[1]",
        "detach-clone": "G.weight.detach().clone().requires_grad_(True)[1]",
    }
    return [
        Trace(
            scenario=ScenarioInfo(
                title="clone then detach, or detach then clone",
                source="scenarios/order.yaml",
                variant=name,
            ),
            environment=ENV,
            steps=_wide_steps(code),
        )
        for name, code in codes.items()
    ]


def model_trace() -> Trace:
    """A model of 14 parameters with long names: its compact table, then a step that grads them."""
    params = tuple(
        tensor(
            f"{LONG_NAME}.{i}", WEIGHTS, storage=f"S{i + 1}", requires_grad=True, kind="parameter"
        )
        for i in range(14)
    )
    graded = tuple(evolve(p, grad=exact_values(WEIGHTS[::-1])) for p in params)
    return Trace(
        scenario=ScenarioInfo(title="a model"),
        environment=ENV,
        steps=(
            Step(index=1, code="model = make()", line=1, tensors=params),
            Step(index=2, code="model(x).sum().backward()", line=2, tensors=graded),
        ),
    )


CASES = {
    "model": lambda: [model_trace()],
    "recorded detach": lambda: recorded_traces("detach"),
    "recorded detach-vs-data": lambda: recorded_traces("detach-vs-data"),
    "long names": lambda: [wide_trace()],
    "many elements": lambda: [many_elements_trace()],
    "long variants": wide_variants,
}


def _walk(value: object) -> Iterable[object]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            yield item


def allowed_numbers(traces: List[Trace]) -> Set[str]:
    """Every spelling of a number the trace holds, plus small counts the page says itself."""
    found = {str(n) for n in range(0, 21)}
    for trace in traces:
        for step in trace.steps:  # the code's line numbers
            found.update(str(step.line + n) for n in range(len(step.code.splitlines())))
        for item in _walk(trace.to_dict()):
            if isinstance(item, bool):
                continue
            if isinstance(item, (int, float)):
                found.update({format_number(item), format_number(item, 3), str(item), f"{item:,}"})
            elif isinstance(item, str):
                found.update(NUMBER.findall(item))
        for step in trace.steps:  # what a one-line summary computes from a tensor's values
            for t in step.tensors:
                for values in (t.values, t.grad):
                    if values is not None:
                        found.update(NUMBER.findall(value_line(values, t.shape)))
                        found.update(NUMBER.findall(value_brief(values)))
                found.update(NUMBER.findall(grad_norm(t.grad)))
    return found


def console(traces, width: int) -> str:
    return render(list(traces), "console", RenderOptions(width=width))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_line_is_wider_than_the_terminal(case, width):
    text = console(CASES[case](), width)
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, too_long


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_number_shown_is_a_whole_number_of_the_trace(case, width):
    traces = CASES[case]()
    allowed = allowed_numbers(traces)
    text = console(traces, width)
    cut = sorted({n for n in NUMBER.findall(text) if n.rstrip(",") not in allowed})
    assert not cut, cut


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_name_is_cut_across_lines(case, width):
    traces = CASES[case]()
    text = console(traces, width)
    names = {t.name for trace in traces for step in trace.steps for t in step.tensors}
    for name in names:
        # the name's end wrapped to the next line ...
        for cut in range(1, len(name)):
            pattern = re.escape(name[:cut]) + r"\n[\s│]*" + re.escape(name[cut:]) + r"\b"
            assert not re.search(pattern, text), (name, cut)
    # ... or a cell cut short while the row goes on beside it
    words = {w.strip(",()[]:") for w in text.split()}
    cut = sorted(
        w
        for w in words
        if len(w) >= 2
        and w not in names
        and any(n.startswith(w) and n[len(w)].isalnum() for n in names if len(n) > len(w))
    )
    assert not cut, cut


@pytest.mark.parametrize("width", WIDTHS)
def test_the_code_variants_compare_is_shown_whole(width):
    traces = wide_variants()
    text = console(traces, width)
    assert "…" not in "".join(line for line in text.splitlines() if "G.weight." in line)
    flat = " ".join(text.split())
    for trace in traces:
        for step in trace.steps:
            for line in step.code.splitlines():
                assert " ".join(line.split()) in flat, line
