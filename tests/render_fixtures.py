"""Fixed traces for the renderer tests, built from the model records directly.

The facts in them (values, versions, error messages) are what PyTorch really
does for the code shown; only storage pointers are made up, and renderers
must never show those.

Golden files live in ``tests/gold/`` and are compared exactly. To rewrite them
on purpose after a deliberate change to a renderer, run::

    TENSORTRACE_REGEN_GOLD=1 python -m pytest tests/render

then read the diff of ``tests/gold/`` before keeping it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from tensortrace.trace import evolve
from tensortrace.trace import (
    Declared,
    Environment,
    ErrorInfo,
    ExpectationResult,
    Explanation,
    Graph,
    GraphNode,
    Prediction,
    SavedTensor,
    ScenarioInfo,
    Step,
    StorageInfo,
    Summary,
    TensorState,
    Trace,
    Values,
    WarningInfo,
)

GOLD = Path(__file__).parent / "gold"
REGEN = os.environ.get("TENSORTRACE_REGEN_GOLD") == "1"


def assert_gold(name: str, text: str) -> None:
    """``text`` equals ``tests/gold/<name>`` (rewritten instead when REGEN is set)."""
    path = GOLD / name
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; run with TENSORTRACE_REGEN_GOLD=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"output differs from {path} (TENSORTRACE_REGEN_GOLD=1 rewrites it)"


# --- builders ---------------------------------------------------------------------

ENV = Environment(tensortrace="0.1.0", torch="2.13.0", python="3.11.9", device="cpu")
# Made-up addresses, distinctive enough that a test can tell they were never rendered.
_PTR = {f"S{i}": 94_871_230_000_000 + i * 4_096 for i in range(1, 10)}


def exact(data: Any) -> Values:
    return Values(kind="exact", data=data)


def _shape_of(data: Any) -> Tuple[int, ...]:
    shape = []
    while isinstance(data, tuple):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    return tuple(shape)


def _stride_of(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return tuple(reversed(stride))


def tensor(
    name: str,
    data: Any = None,
    *,
    storage: Optional[str] = "S1",
    offset: int = 0,
    version: int = 0,
    requires_grad: bool = False,
    is_leaf: bool = True,
    grad_fn: Optional[str] = None,
    grad: Any = None,
    dtype: str = "torch.float32",
    is_view: bool = False,
    base: Optional[str] = None,
    values: Optional[Values] = None,
    shape: Optional[Tuple[int, ...]] = None,
    kind: str = "tensor",
    nbytes: int = 12,
) -> TensorState:
    values = values if values is not None else exact(data)
    shape = shape if shape is not None else _shape_of(data)
    ptr = _PTR.get(storage or "", None)
    return TensorState(
        name=name,
        kind=kind,
        shape=shape,
        stride=_stride_of(shape),
        dtype=dtype,
        device="cpu",
        storage=storage,
        storage_ptr=ptr,
        storage_nbytes=nbytes,
        storage_offset=offset,
        data_ptr=None if ptr is None else ptr + 4 * offset,
        version=version,
        requires_grad=requires_grad,
        is_leaf=is_leaf,
        retains_grad=False,
        grad_fn=grad_fn,
        grad=None if grad is None else (grad if isinstance(grad, Values) else exact(grad)),
        is_view=is_view,
        base=base,
        values=values,
    )


def storages(*labels: Tuple[str, Sequence[str]]) -> Tuple[StorageInfo, ...]:
    return tuple(
        StorageInfo(label=label, nbytes=12, device="cpu", ptr=_PTR[label], names=tuple(names))
        for label, names in labels
    )


def ok(expr: str, line: Optional[int] = None) -> ExpectationResult:
    return ExpectationResult(expr=expr, passed=True, line=line)


# --- the scenario of the format's own example -----------------------------------------

DETACH_EXPLANATION = Explanation(
    title="backward() of a tensor that is not part of a graph",
    what=(
        "`b` does not require grad and has no `grad_fn`, so there is nothing to "
        "differentiate: `detach()` cut it off the graph."
    ),
    fix=(
        "Call `backward()` on a result computed from `a`, or set `requires_grad=True` "
        "on a leaf before computing with it."
    ),
    topic="detach",
)


def detach_trace() -> Trace:
    """``b = a.detach()``: same storage, no graph; writing through b changes a."""
    a0 = tensor("a", (1.0, 2.0, 3.0), requires_grad=True)
    b0 = tensor("b", (1.0, 2.0, 3.0))
    a1 = tensor("a", (0.0, 0.0, 0.0), requires_grad=True, version=1)
    b1 = tensor("b", (0.0, 0.0, 0.0), version=1)
    a2 = tensor("a", (0.0, 0.0, 0.0), requires_grad=True, version=1, grad=(2.0, 2.0, 2.0))
    out = tensor(
        "out",
        0.0,
        storage="S2",
        requires_grad=True,
        is_leaf=False,
        grad_fn="SumBackward0",
        nbytes=4,
    )
    out_graph = Graph(
        tensor="out",
        root="N1",
        nodes=(
            GraphNode("N1", "SumBackward0", next=("N2",)),
            GraphNode(
                "N2", "MulBackward0", next=("N3",), saved=(SavedTensor("other", freed=True),)
            ),
            GraphNode("N3", "AccumulateGrad", leaf="a"),
        ),
    )
    freed = Prediction(
        kind="backward_freed",
        tensor="out",
        node="MulBackward0",
        saved="other",
        changed_at_step=5,
        message=(
            "backward through `out` a second time will fail: its saved tensors were freed at step 5"
            " (`out.backward()`); MulBackward0 needs its saved `other`."
        ),
    )
    steps = (
        Step(
            index=1,
            code="a = torch.tensor([1., 2., 3.], requires_grad=True)",
            line=13,
            tensors=(a0,),
        ),
        Step(
            index=2,
            code="b = a.detach()",
            line=14,
            note="b is a new Python object on the *same storage*.",
            expectations=(
                ok("same_storage(a, b)", 17),
                ok("not b.requires_grad", 18),
                ok("b.is_leaf and b.grad_fn is None", 19),
            ),
            tensors=(a0, b0),
        ),
        Step(
            index=3,
            code="b.zero_()",
            line=20,
            note="Writing through b changes a too, and bumps the shared version counter.",
            expectations=(ok("a.tolist() == [0., 0., 0.]", 23), ok("a._version == 1", 24)),
            tensors=(a1, b1),
        ),
        Step(
            index=4,
            code="b.sum().backward()",
            line=25,
            status="raised",
            error=ErrorInfo(
                type="RuntimeError",
                qualname="RuntimeError",
                message="element 0 of tensors does not require grad and does not have a grad_fn",
                line=25,
                explanation=DETACH_EXPLANATION,
            ),
            raises=Declared("RuntimeError", "does not require grad"),
            raised_as_declared=True,
            tensors=(a1, b1),
        ),
        Step(
            index=5,
            code="out = (a * 2).sum()\nout.backward()\n",
            line=29,
            expectations=(ok("a.grad.tolist() == [2., 2., 2.]", 34),),
            tensors=(a2, b1, out),
            graphs=(out_graph,),
            predictions=(freed,),
        ),
    )
    return Trace(
        scenario=ScenarioInfo(
            title="detach() shares storage but leaves the graph",
            description=(
                "`b = a.detach()` is a new tensor on the same memory as `a`, with\n"
                "`requires_grad=False` and no `grad_fn`.\n"
            ),
            tags=("detach", "storage", "version-counter"),
            source="scenarios/detach.yaml",
        ),
        environment=ENV,
        setup=Step(index=0, code="import torch.nn.functional as F", line=10),
        steps=steps,
        storages=storages(("S1", ("a", "b")), ("S2", ("out",))),
    )


# --- a scenario where things go wrong ---------------------------------------------------


def troubled_trace() -> Trace:
    """Views with offsets, other dtypes, a large tensor, output, warnings and failures."""
    grid = ((0.0, 1.0, 2.0), (3.0, 4.0, 5.0))
    grid10 = ((0.0, 10.0, 20.0), (3.0, 4.0, 5.0))
    a = tensor("a", grid, nbytes=24)
    a2 = tensor("a", grid10, version=1, nbytes=24)
    v = tensor("v", (1.0, 2.0), offset=1, is_view=True, base="a", nbytes=24)
    v2 = tensor("v", (10.0, 20.0), offset=1, is_view=True, base="a", version=1, nbytes=24)
    n = tensor("n", (0, 1, 2), storage="S2", dtype="torch.int64", nbytes=24)
    big = tensor(
        "big",
        storage="S3",
        values=Values(
            kind="summary",
            summary=Summary(
                numel=10000,
                min=-3.8,
                max=3.62,
                mean=0.0042,
                std=1.003,
                nan_count=2,
                head=(0.1, -0.25, 1.5),
            ),
        ),
        shape=(100, 100),
        nbytes=40000,
    )
    steps = (
        Step(
            index=1, code="a = torch.arange(6.).reshape(2, 3)\nv = a[0, 1:]", line=8, tensors=(a, v)
        ),
        Step(
            index=2,
            code="n = torch.arange(3)\nbig = torch.randn(100, 100)",
            line=10,
            tensors=(a, v, n, big),
        ),
        Step(
            index=3,
            code="v.mul_(10)",
            line=12,
            note="`v` is a view of the first row of `a`.",
            tensors=(a2, v2, n, big),
            expectations=(
                ExpectationResult(
                    "a[0, 0] == 1", passed=False, line=15, op="==", left="tensor(0.)", right="1"
                ),
                ExpectationResult(
                    "v.grad.sum() == 0",
                    passed=False,
                    line=16,
                    error="AttributeError: 'NoneType' object has no attribute 'sum'",
                ),
            ),
            behaved=False,
            failures=(
                "expectation failed: a[0, 0] == 1 (line 15)",
                "expectation failed: v.grad.sum() == 0 (line 16)",
            ),
        ),
        Step(
            index=4,
            code="print(a.sum())\nw = n / 0",
            line=17,
            stdout="tensor(42.)\n",
            warnings=(WarningInfo("UserWarning", "a made-up warning for the test", 18),),
            tensors=(
                a2,
                v2,
                n,
                big,
                tensor("w", ("inf", "nan", "inf"), storage="S4", dtype="torch.float32"),
            ),
        ),
        Step(
            index=5,
            code="n.requires_grad_()",
            line=19,
            status="raised",
            error=ErrorInfo(
                type="RuntimeError",
                qualname="RuntimeError",
                message="only Tensors of floating point and complex dtype can require gradients",
                line=19,
            ),
            behaved=False,
            failures=("raised RuntimeError, which the step did not declare",),
            tensors=(a2, v2, n, big),
        ),
        Step(
            index=6,
            code="while True: pass",
            line=20,
            status="timeout",
            behaved=False,
            failures=("the step ran longer than 10 s",),
            tensors=(a2, v2, n, big),
        ),
    )
    return Trace(
        scenario=ScenarioInfo(title="views, dtypes and trouble", source="scenarios/trouble.yaml"),
        environment=Environment(
            tensortrace="0.1.0", torch="2.13.0", python="3.11.9", device="cpu", safe=False
        ),
        setup=Step(index=0, code="print('setting up')", line=5, stdout="setting up\n"),
        steps=steps,
        storages=storages(("S1", ("a", "v")), ("S2", ("n",)), ("S3", ("big",)), ("S4", ("w",))),
        notices=("`ghost` is named in show but never bound",),
        aborted="step 6 ran out of time; the remaining steps did not run",
    )


# --- variants: .data vs .detach() ---------------------------------------------------------

MODIFIED_INPLACE = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: [torch.FloatTensor [3]], which is output 0 of Sigmoid, is at version 1; "
    "expected version 0 instead. Hint: enable anomaly detection to find the operation that "
    "failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
)

INPLACE_EXPLANATION = Explanation(
    title="a tensor that backward needs was changed in place",
    what=(
        "`sigmoid` saves its output for the backward pass. `z.zero_()` wrote into that "
        "output through a tensor sharing its memory and its version counter, so autograd "
        "noticed the version moved from 0 to 1."
    ),
    fix="Do not write into tensors the graph still needs; write into a `clone()` instead.",
    topic="version-counter",
)


def variant_traces() -> Tuple[Trace, Trace]:
    """The format's variant example: ``z = y.detach()`` against ``z = y.data``."""
    sig = (0.7311, 0.8808, 0.9526)
    zero = (0.0, 0.0, 0.0)

    def run(variant: str) -> Trace:
        alias = "y.detach()" if variant == "detach" else "y.data"
        x = tensor("x", (1.0, 2.0, 3.0), requires_grad=True)
        y = tensor(
            "y", sig, storage="S2", requires_grad=True, is_leaf=False, grad_fn="SigmoidBackward0"
        )
        z = tensor("z", sig, storage="S2")
        y4 = tensor(
            "y",
            zero,
            storage="S2",
            requires_grad=True,
            is_leaf=False,
            grad_fn="SigmoidBackward0",
            version=1 if variant == "detach" else 0,
        )
        z4 = tensor("z", zero, storage="S2", version=1)
        if variant == "detach":
            step5 = Step(
                index=5,
                code="y.sum().backward()",
                line=12,
                status="raised",
                error=ErrorInfo(
                    "RuntimeError", "RuntimeError", MODIFIED_INPLACE, 12, INPLACE_EXPLANATION
                ),
                raises=Declared("RuntimeError"),
                raised_as_declared=True,
                tensors=(x, y4, z4),
            )
        else:
            x5 = tensor("x", (1.0, 2.0, 3.0), requires_grad=True, grad=zero)
            step5 = Step(
                index=5,
                code="y.sum().backward()",
                line=12,
                tensors=(x5, y4, z4),
                expectations=(ok("x.grad.tolist() == [0., 0., 0.]", 14),),
            )
        steps = (
            Step(
                index=1,
                code="x = torch.tensor([1., 2., 3.], requires_grad=True)",
                line=8,
                tensors=(x,),
            ),
            Step(index=2, code="y = x.sigmoid()", line=9, tensors=(x, y)),
            Step(index=3, code=f"z = {alias}", line=10, tensors=(x, y, z)),
            Step(index=4, code="z.zero_()", line=11, tensors=(x, y4, z4)),
            step5,
        )
        return Trace(
            scenario=ScenarioInfo(
                title=".data vs .detach() after an in-place change",
                source="scenarios/data_vs_detach.yaml",
                variant=variant,
            ),
            environment=ENV,
            steps=steps,
            storages=storages(("S1", ("x",)), ("S2", ("y", "z"))),
        )

    return run("detach"), run("data")


# --- graphs -----------------------------------------------------------------------------


def shared_graph() -> Graph:
    """``out = (y * y).sum()`` with ``y = a * b``: the node of y is reached twice."""
    return Graph(
        tensor="out",
        root="N1",
        nodes=(
            GraphNode("N1", "SumBackward0", next=("N2",)),
            GraphNode(
                "N2",
                "MulBackward0",
                next=("N3", "N3"),
                saved=(SavedTensor("other", "y", "S3", 0, 0), SavedTensor("self", "y", "S3", 0, 0)),
            ),
            GraphNode(
                "N3",
                "MulBackward0",
                next=("N4", "N5"),
                saved=(
                    SavedTensor("other", "b", "S2", 0, 1, stale=True),
                    SavedTensor("self", "a", "S1", 0, 0),
                ),
            ),
            GraphNode("N4", "AccumulateGrad", leaf="a"),
            GraphNode("N5", "AccumulateGrad", leaf="b"),
        ),
    )


def chain_graph(length: int, name: str = "MulBackward0") -> Graph:
    """``x * 2`` applied ``length`` times, then summed."""
    nodes = [GraphNode("N1", "SumBackward0", next=("N2",))]
    for i in range(2, length + 2):
        nodes.append(GraphNode(f"N{i}", name, next=(f"N{i + 1}",)))
    nodes.append(GraphNode(f"N{length + 2}", "AccumulateGrad", leaf="x"))
    return Graph(tensor="y", root="N1", nodes=tuple(nodes))


def alternating_graph(length: int) -> Graph:
    """``x = x * 2 + 1`` repeated: a chain whose names alternate, so nothing collapses."""
    nodes = []
    for i in range(1, length + 1):
        name = "AddBackward0" if i % 2 else "MulBackward0"
        nodes.append(GraphNode(f"N{i}", name, next=(f"N{i + 1}",)))
    nodes.append(GraphNode(f"N{length + 1}", "AccumulateGrad", leaf="x"))
    return Graph(tensor="y", root="N1", nodes=tuple(nodes))


def wide_graph(width: int) -> Graph:
    """``torch.stack(xs).sum()`` over ``width`` leaves."""
    leaves = tuple(f"N{i}" for i in range(3, width + 3))
    nodes = [
        GraphNode("N1", "SumBackward0", next=("N2",)),
        GraphNode("N2", "StackBackward0", next=leaves),
    ]
    nodes += [
        GraphNode(f"N{i}", "AccumulateGrad", leaf=f"xs[{i - 3}]") for i in range(3, width + 3)
    ]
    return Graph(tensor="y", root="N1", nodes=tuple(nodes))


def graph_trace(*graphs: Graph, title: str = "graphs") -> Trace:
    """A one-step trace that draws the given graphs."""
    return Trace(
        scenario=ScenarioInfo(title=title),
        environment=ENV,
        steps=(Step(index=1, code="y = f(x)", line=3, graphs=tuple(graphs)),),
    )


def ladder_graph(length: int) -> Graph:
    """``for w in ws: x = x * w``: deep, and no node has a single next, so nothing collapses."""
    nodes = [GraphNode("N1", "SumBackward0", next=("M1",))]
    for i in range(1, length + 1):
        below = f"M{i + 1}" if i < length else "X"
        nodes.append(GraphNode(f"M{i}", "MulBackward0", next=(below, f"W{i}")))
        nodes.append(GraphNode(f"W{i}", "AccumulateGrad", leaf=f"ws[{i - 1}]"))
    nodes.append(GraphNode("X", "AccumulateGrad", leaf="x"))
    return Graph(tensor="y", root="N1", nodes=tuple(nodes))


def irregular_chain_graph(length: int) -> Graph:
    """A single chain whose names never repeat in a short pattern."""
    names = ("AddBackward0", "MulBackward0", "ExpBackward0", "SinBackward0", "TanhBackward0")
    nodes = []
    for i in range(1, length + 1):
        nodes.append(GraphNode(f"N{i}", names[(i * i) % 5], next=(f"N{i + 1}",)))
    nodes.append(GraphNode(f"N{length + 1}", "AccumulateGrad", leaf="x"))
    return Graph(tensor="y", root="N1", nodes=tuple(nodes))


# --- traces recorded from real scenarios ---------------------------------------------------

# Bundled scenarios whose traces are kept in tests/gold/ as JSON, so that the
# renderers are also tested on what the tracer really records. Regenerating
# (TENSORTRACE_REGEN_GOLD=1) runs them on PyTorch; reading them needs no torch.
RECORDED_SCENARIOS = ("detach", "detach-vs-data")
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def without_pointers(trace: Trace) -> Trace:
    """The trace with raw addresses blanked: they differ on every run and are never shown."""

    def clean(step: Optional[Step]) -> Optional[Step]:
        if step is None:
            return None
        states = tuple(evolve(t, storage_ptr=None, data_ptr=None) for t in step.tensors)
        return evolve(step, tensors=states)

    return evolve(
        trace,
        setup=clean(trace.setup),
        steps=tuple(clean(s) for s in trace.steps),
        storages=tuple(evolve(s, ptr=0) for s in trace.storages),
    )


def trace_scenario(name: str) -> list:
    """Run a bundled scenario now (imports torch), one trace per variant."""
    import tensortrace

    # Unsandboxed, so that the record does not depend on the sandbox of the day;
    # the pages then say, truthfully, that safe mode was off.
    scenario = tensortrace.load_scenario(SCENARIOS / f"{name}.yaml")
    traces = tensortrace.trace_variants(scenario, safe=False)
    relative = f"scenarios/{name}.yaml"  # not this machine's absolute path
    return [
        evolve(without_pointers(t), scenario=evolve(t.scenario, source=relative)) for t in traces
    ]


def recorded_traces(name: str) -> list:
    """The saved traces of a bundled scenario (re-recorded first when REGEN is set)."""
    from tensortrace.render.json import render_json

    path = GOLD / f"trace_{name}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_json(trace_scenario(name)), encoding="utf-8")
    data = json.loads(path.read_text(encoding="utf-8"))
    bodies = data["traces"] if "traces" in data else [data]
    return [Trace.from_dict(body) for body in bodies]
