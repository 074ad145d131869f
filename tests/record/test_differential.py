"""Random op sequences run traced and untraced must agree on every recorded fact.

Hypothesis draws short sequences of views, in-place changes, no_grad and
inference_mode blocks, detach and ``.data``, and backward calls over a few
names. Each runs in the tracer and as plain Python (``exec`` of each step in
``base_namespace()``, reading the facts after each step). The tracer must
never stop; every fact it records must be what plain PyTorch reports at
that point, a fact PyTorch refuses being recorded as unavailable; and the
code's own results (values, grads, errors, warnings, random numbers) must
not change.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Tuple

import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortrace.record.helpers import base_namespace
from tensortrace.trace import TensorState, encode_number_tree, freeze
from tensortrace.scenario import loads_scenario
from tensortrace.record.tracer import trace

START = "x = torch.tensor([1., 2., 3., 4.], requires_grad=True)\na = x * 2"
OPS = [
    "v = a[1:3]",
    "v = a.view(2, 2)",
    "v.mul_(2)",
    "a.add_(1)",
    "x.add_(1)",
    "with torch.no_grad():\n    v = a[:2]",
    "with torch.no_grad():\n    a.mul_(3)",
    "with torch.no_grad():\n    v.add_(1)",
    "with torch.no_grad():\n    x.sub_(0.5)",
    "with torch.inference_mode():\n    i = torch.ones(4)",
    "with torch.inference_mode():\n    v = a.detach()[::2]",
    "d = a.detach()",
    "d.zero_()",
    "e = a.data",
    "e.add_(1)",
    "y = a.sigmoid()",
    "y.mul_(2)",
    "b = (y * a).sum()",
    "b.backward()",
    "a.sum().backward()",
    "g = a.grad",
    "x.grad = None",
    "a = x * 2",
    "r = torch.randn(2)",
    "w = v.exp()",
    # The tool must never change what PyTorch allows: no weak reference to a tensor
    # (swap_tensors refuses one), no hook reading a functorch wrapper, no call of a
    # method the user's module overrides.
    "s = torch.zeros(4)",
    "torch.utils.swap_tensors(s, d)",
    "torch.utils.swap_tensors(s, x)",
    "j = torch.func.jacrev(torch.sin)(a.detach())",
    "q = torch.func.vmap(torch.func.grad(lambda z: z.sin().sum()))(a.detach().view(2, 2))",
    "jg = torch.func.jacrev(lambda z: (z * z).sum())(x)",
    (
        "class Lin(torch.nn.Linear):\n    def named_parameters(self, *args, **kwargs):\n       "
        " raise RuntimeError('named_parameters called')\n    def named_buffers(self, *args,"
        " **kwargs):\n        raise RuntimeError('named_buffers called')\n    def parameters(self,"
        " *args, **kwargs):\n        raise RuntimeError('parameters called')\nm = Lin(4, 1)"
    ),
    "o = m(a)",
]
FACTS = ("version", "requires_grad", "is_leaf", "grad_fn", "values", "grad")


def _read(t: torch.Tensor, fact: str) -> Any:
    if fact == "version":
        return t._version
    if fact == "requires_grad":
        return bool(t.requires_grad)
    if fact == "is_leaf":
        return bool(t.is_leaf)
    if fact == "grad_fn":
        fn = t.grad_fn
        return None if fn is None else fn.name().rsplit("::", 1)[-1]
    if fact == "values":
        return freeze(encode_number_tree(t.detach().tolist()))
    g = t.grad
    return None if g is None else freeze(encode_number_tree(g.tolist()))


def plain_run(
    steps: List[str],
) -> List[Tuple[Any, List[Tuple[str, str]], Dict[str, Dict[str, Any]]]]:
    """Per step: (error type and message, warnings, facts of every tensor name), read as plain code
    would."""
    torch.manual_seed(0)
    ns = base_namespace()
    out = []
    for code in steps:
        error = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(code, "<plain>", "exec"), ns)
            except Exception as exc:
                error = (type(exc).__name__, str(exc))
        facts: Dict[str, Dict[str, Any]] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, value in _tensors_of(ns):
                facts[name] = {}
                for fact in FACTS:
                    try:
                        facts[name][fact] = _read(value, fact)
                    except Exception:
                        facts[name][fact] = "refused"
        out.append((error, [(w.category.__name__, str(w.message)) for w in caught], facts))
    out.append(torch.get_rng_state())
    return out


def _tensors_of(ns: Dict[str, Any]) -> List[Tuple[str, torch.Tensor]]:
    """The namespace's tensors and its modules' parameters and buffers, read through
    ``nn.Module``'s own methods (a subclass may override them to fail)."""
    found = []
    for name, value in ns.items():
        if isinstance(value, torch.Tensor):
            found.append((name, value))
        elif isinstance(value, torch.nn.Module):
            found += [(f"{name}.{k}", p) for k, p in torch.nn.Module.named_parameters(value)]
            found += [(f"{name}.{k}", b) for k, b in torch.nn.Module.named_buffers(value)]
    return found


def recorded(state: TensorState, fact: str) -> Any:
    if fact in {name for name, _ in state.unavailable}:
        return "refused"
    if fact == "values":
        return state.values.data if state.values.kind == "exact" else state.values
    if fact == "grad":
        return None if state.grad is None else state.grad.data
    return getattr(state, fact)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=7))
def test_traced_facts_equal_plain_pytorch(ops):
    _traced_equals_plain(ops, record_ops=False)


# Without inference_mode, whose scenarios record calls only, every ATen operation is recorded too.
ATEN_RECORDED_OPS = [op for op in OPS if "inference_mode" not in op]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=7))
def test_traced_facts_equal_plain_pytorch_while_recording_operations(ops):
    result = _traced_equals_plain(ops, record_ops=True)
    levels = {op.level for step in result.steps for op in step.ops}
    assert levels == ({"call"} if any("inference_mode" in op for op in ops) else {"call", "aten"})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(ATEN_RECORDED_OPS), min_size=1, max_size=7))
def test_traced_facts_equal_plain_pytorch_while_recording_aten_operations(ops):
    result = _traced_equals_plain(ops, record_ops=True)
    assert any(op.level == "aten" for step in result.steps for op in step.ops)


def _traced_equals_plain(ops, *, record_ops):
    steps = [START] + ops + ["r = torch.randn(3)"]
    plain = plain_run(steps)
    rng_after_plain = plain.pop()
    result = trace(
        loads_scenario(yaml.safe_dump({"title": "random", "steps": steps})),
        safe=False,
        ops=record_ops,
    )
    assert result.aborted is None and len(result.steps) == len(steps)
    for step, (error, warns, facts) in zip(result.steps, plain):
        assert (step.error.type, step.error.message) == error if error else step.status == "ok", (
            step.code
        )
        assert [(w.category, w.message) for w in step.warnings] == warns, step.code
        states = {s.name: s for s in step.tensors}
        assert set(states) == set(facts), step.code
        for name, plain_facts in facts.items():
            for fact, value in plain_facts.items():
                assert recorded(states[name], fact) == value, (step.code, name, fact)
    assert torch.equal(torch.get_rng_state(), rng_after_plain)  # the same random numbers were drawn
    return result


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=7))
def test_reading_saved_tensors_of_every_graph_changes_nothing(ops):
    """Every step draws every graph, so each node's saved tensors are unpacked after every step
    (and the predictions read them too): the code must still see exactly what plain PyTorch gives.
    """
    steps = [START] + ops + ["r = torch.randn(3)"]
    plain = plain_run(steps)
    rng_after_plain = plain.pop()
    spec = {"title": "random", "steps": [{"run": code, "graph": True} for code in steps]}
    result = trace(loads_scenario(yaml.safe_dump(spec)), safe=False)
    assert result.aborted is None and len(result.steps) == len(steps)
    for step, (error, warns, facts) in zip(result.steps, plain):
        assert (step.error.type, step.error.message) == error if error else step.status == "ok", (
            step.code
        )
        assert [(w.category, w.message) for w in step.warnings] == warns, step.code
        states = {s.name: s for s in step.tensors}
        for name, plain_facts in facts.items():
            for fact, value in plain_facts.items():
                assert recorded(states[name], fact) == value, (step.code, name, fact)
        for graph in step.graphs:
            for node in graph.nodes:
                for saved in node.saved:
                    if saved.tensor is not None and saved.version is not None and not saved.freed:
                        assert saved.version == plain_facts_version(facts, saved.tensor), (
                            step.code,
                            saved,
                        )
    assert torch.equal(torch.get_rng_state(), rng_after_plain)


def plain_facts_version(facts: Dict[str, Dict[str, Any]], name: str) -> Any:
    """The version plain PyTorch reported for ``name`` after the step."""
    return facts[name]["version"]
