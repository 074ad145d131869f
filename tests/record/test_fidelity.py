"""Observe without disturbing: a traced run and a plain run must end the same.

Each scenario runs twice: traced, and as plain Python (``exec`` of each step
in one namespace, nothing else). Final values, grads, versions, autograd
flags, storage sharing and every step's error must be identical. Then two
traced runs must give identical JSON once raw pointers are dropped.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

import tensortrace
from tensortrace.scenario.spec import Scenario
from tensortrace.record.helpers import base_namespace

from conftest import REPO, has_sandbox

EXTRA_SCENARIOS = {
    "inplace-chain": """
        title: in-place chain
        steps:
          - x = torch.tensor([1., 2., 3.], requires_grad=True)
          - y = x * 2
          - z = y.view(3)
          - z.mul_(3)
          - y.sum().backward()
          - w = x.detach()
          - w += 1
          - x.grad.zero_()
        """,
    "data-update": """
        title: parameter updates
        steps:
          - lin = nn.Linear(3, 2)
          - tgt = nn.Linear(3, 2)
          - "for p, q in zip(tgt.parameters(), lin.parameters()): p.data.copy_(q.data)"
          - out = lin(torch.ones(1, 3)).sum()
          - out.backward()
          - opt = torch.optim.SGD(lin.parameters(), lr=0.1)
          - opt.step()
          - |
            with torch.no_grad():
                for p, q in zip(tgt.parameters(), lin.parameters()):
                    p.mul_(0.9).add_(q, alpha=0.1)
        """,
    "errors": """
        title: errors
        steps:
          - a = torch.ones(2, requires_grad=True)
          - a.add_(1)
          - b = (a * a).sum()
          - b.backward()
          - b.backward()
          - c = a.numpy()
          - a.detach().numpy()[0] = 7
          - d = (a * 2)[:1]
          - d.detach_()
        """,
    "numpy": """
        title: numpy
        setup: import numpy as np
        steps:
          - n = np.arange(4.0)
          - t = torch.from_numpy(n)
          - t.add_(1)
          - m = t.numpy()
          - u = torch.as_tensor(n)
          - v = torch.tensor(n)
        """,
    "modes": """
        title: modes
        steps:
          - x = torch.ones(2, requires_grad=True)
          - |
            with torch.no_grad():
                y = x * 2
          - |
            with torch.inference_mode():
                z = x * 2
          - z.add_(1)
          - retained = x * 3
          - retained.retain_grad()
          - retained.sum().backward()
        """,
}


def bundled() -> List[Path]:
    return sorted((REPO / "scenarios").glob("*.yaml"))


def all_scenarios(tmp_path_factory) -> List[Tuple[str, Scenario]]:
    folder = tmp_path_factory.mktemp("extra")
    result = []
    for name, text in EXTRA_SCENARIOS.items():
        path = folder / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        result.append((name, tensortrace.load_scenario(path)))
    for path in bundled():
        result.append((path.stem, tensortrace.load_scenario(path)))
    return result


def run_plain(scenario: Scenario) -> Tuple[Dict[str, Any], List[Optional[Tuple[str, str]]]]:
    """The scenario as plain Python: no tracer, no sandbox, no probing."""
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    torch.manual_seed(scenario.seed)
    ns = base_namespace()
    for code in scenario.setup:
        exec(compile(code.text, "<setup>", "exec"), ns)
    errors: List[Optional[Tuple[str, str]]] = []
    for spec in scenario.steps:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the scenarios' own warnings are not this test's
                exec(compile(spec.run.text, "<step>", "exec"), ns)
        except Exception as exc:
            errors.append((type(exc).__name__, str(exc)))
        else:
            errors.append(None)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    return ns, errors


def _facts(obj: Any) -> Dict[str, Any]:
    if not isinstance(obj, torch.Tensor):  # a NumPy array
        return {"values": obj.tolist(), "shape": tuple(obj.shape)}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad = obj.grad
    try:
        version = obj._version
    except RuntimeError:
        version = None
    return {
        "values": obj.detach().tolist(),
        "shape": tuple(obj.shape),
        "dtype": str(obj.dtype).replace("torch.", ""),
        "version": version,
        "requires_grad": obj.requires_grad,
        "is_leaf": obj.is_leaf,
        "grad_fn": type(obj.grad_fn).__name__ if obj.grad_fn is not None else None,
        "grad": grad.tolist() if grad is not None else None,
    }


def _traced_facts(state) -> Dict[str, Any]:
    from tensortrace.trace import decode_number

    def decode(tree):
        if isinstance(tree, tuple):
            return [decode(v) for v in tree]
        return decode_number(tree)

    if state.kind == "ndarray":
        return {"values": decode(state.values.data), "shape": state.shape}
    return {
        "values": decode(state.values.data),
        "shape": state.shape,
        "dtype": state.dtype,
        "version": state.version,
        "requires_grad": state.requires_grad,
        "is_leaf": state.is_leaf,
        "grad_fn": state.grad_fn,
        "grad": decode(state.grad.data) if state.grad is not None else None,
    }


def _same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN (values are compared exactly otherwise)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b


def _storage_partition(pairs: Dict[str, Optional[str]]) -> List[Tuple[str, ...]]:
    groups: Dict[str, List[str]] = {}
    for name, key in pairs.items():
        if key is not None:
            groups.setdefault(key, []).append(name)
    return sorted(tuple(sorted(g)) for g in groups.values())


def _plain_storage_key(obj: Any) -> Optional[str]:
    if isinstance(obj, torch.Tensor):
        if obj.numel() == 0:
            return None
        return f"{obj.device}:{obj.untyped_storage().data_ptr()}"
    owner = obj
    while getattr(owner, "base", None) is not None and not isinstance(owner, torch.Tensor):
        owner = owner.base
    if isinstance(owner, torch.Tensor):
        return f"{owner.device}:{owner.untyped_storage().data_ptr()}"
    return f"cpu:{owner.__array_interface__['data'][0]}" if owner.size else None


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    return all_scenarios(tmp_path_factory)


MODES = ["trust"] + (["safe"] if has_sandbox() else [])


@pytest.mark.parametrize("mode", MODES)
def test_traced_and_plain_runs_end_identically(scenarios, mode):
    assert len(scenarios) >= len(EXTRA_SCENARIOS) + 1
    for label, scenario in scenarios:
        for variant in scenario.resolved():
            where = f"{label} [{variant.variant or '-'}] ({mode})"
            trace = tensortrace.trace(variant, safe=(mode == "safe"))
            ns, plain_errors = run_plain(variant)
            traced_errors = [
                (s.error.type, s.error.message) if s.status == "raised" else None
                for s in trace.steps
            ]
            assert traced_errors == plain_errors, where
            final = trace.steps[-1]
            keys = {}
            for st in final.tensors:
                obj = eval(st.name, ns)  # names are expressions: a, lin.weight, xs[0], d['k']
                if st.values.kind == "exact":
                    assert _same(_traced_facts(st), _facts(obj)), f"{where}: {st.name}"
                keys[st.name] = _plain_storage_key(obj)
            traced_partition = _storage_partition({st.name: st.storage for st in final.tensors})
            assert traced_partition == _storage_partition(keys), where


def _without_pointers(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: _without_pointers(v)
            for k, v in data.items()
            if k not in ("storage_ptr", "data_ptr", "ptr")
        }
    if isinstance(data, list):
        return [_without_pointers(v) for v in data]
    return data


def test_two_runs_give_identical_json_without_pointers(scenarios):
    for label, scenario in scenarios:
        for variant in scenario.resolved():
            first = json.dumps(
                _without_pointers(tensortrace.trace(variant).to_dict()), sort_keys=True
            )
            second = json.dumps(
                _without_pointers(tensortrace.trace(variant).to_dict()), sort_keys=True
            )
            assert first == second, label


def test_forked_runner_gives_the_same_trace_as_in_process(scenarios):
    from tensortrace.run.runner import Limits, run_scenario

    def unconfined(trace):
        # the forked child is behind the kernel's wall, the in-process run is not; nothing else may
        # differ
        data = _without_pointers(trace.to_dict())
        data["environment"]["confinement"] = None
        return data

    for label, scenario in scenarios[: len(EXTRA_SCENARIOS)]:
        forked = run_scenario(scenario, limits=Limits(timeout=30))
        inline = tensortrace.trace_variants(scenario)
        assert all(t.environment.confinement is not None for t in forked), label
        assert [unconfined(t) for t in forked] == [unconfined(t) for t in inline], label


def test_saved_trace_round_trips_through_json(scenarios):
    for label, scenario in scenarios:
        for trace in tensortrace.trace_variants(scenario):
            again = tensortrace.Trace.from_dict(json.loads(json.dumps(trace.to_dict())))
            assert again == trace, label
