"""Every prediction against the real backward, for every named tensor after every step.

Each bundled scenario (each variant) runs twice: traced, which records the
step's predictions, and as plain code. After each plain step, each named
tensor with a ``grad_fn`` runs ``t.sum().backward()`` in a forked child, so
the parent's tensors are untouched, and the outcome is compared both ways:
a backward that raises "modified by an inplace operation" or "a second time"
was predicted, with that kind, and a backward predicted to fail fails. A
``backward_unchecked`` prediction (a CopySlices node hides what its in-place
node saved) allows either outcome of the in-place error, and nothing else.
"""

from __future__ import annotations

import os
import warnings
from typing import Dict, List, Sequence, Set, Tuple

import pytest
import torch

import yaml

from tensortrace.record.helpers import base_namespace
from tensortrace.record.saved import CHANGED, FREED, STALE, UNCHECKED
from tensortrace.record.tracer import trace, trace_variants
from tensortrace.scenario import load_scenario, loads_scenario
from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.trace import Trace

VERSION_ERROR = "modified by an inplace operation"
FREED_ERROR = "Trying to backward through the graph a second time"
OUTCOMES = {0: "none", 1: "stale", 2: "freed", 3: "other"}


def real_backward(t: torch.Tensor) -> str:
    """What ``t.sum().backward()`` does, run in a forked child: none, stale, freed or other."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t.sum().backward()
            code = 0
        except RuntimeError as exc:
            code = 1 if VERSION_ERROR in str(exc) else 2 if FREED_ERROR in str(exc) else 3
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return OUTCOMES.get(os.waitstatus_to_exitcode(status), "other")


def expected(kinds: Set[str]) -> Set[str]:
    """The real outcomes a step's predictions for one tensor allow."""
    failing = kinds & {STALE, FREED}
    if not failing:
        return {"none", "other", "stale"} if UNCHECKED in kinds else {"none", "other"}
    return {"stale" if k == STALE else "freed" for k in failing}


def compare_with_real(traced: Trace, name: str) -> List[Tuple[int, str, str, Set[str]]]:
    """Replay ``traced``'s steps as plain code and compare, after each, every named tensor's real
    backward with the step's predictions for it; (step, tensor, outcome, predicted kinds) each."""
    torch.manual_seed(0)
    ns: Dict[str, object] = base_namespace()
    steps = ([traced.setup] if traced.setup is not None else []) + list(traced.steps)
    compared = []
    for step in steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(compile(step.code, "<plain>", "exec"), ns)
            except Exception:
                pass
        aliases = {s.name for s in step.tensors if s.same_as is not None}
        for tname, value in list(ns.items()):
            if not isinstance(value, torch.Tensor) or tname in aliases:
                continue
            if not value.requires_grad or value.grad_fn is None:
                continue
            kinds = {p.kind for p in step.predictions if p.tensor == tname}
            happened = real_backward(value)
            compared.append((step.index, tname, happened, kinds))
            where = (name, traced.scenario.variant, step.index, step.code, tname, kinds, happened)
            assert happened in expected(kinds), where
    assert all(o in OUTCOMES.values() for _, _, o, _ in compared)
    return compared


@pytest.mark.slow
@pytest.mark.parametrize("name", bundled_names())
def test_every_prediction_matches_the_real_backward(name):
    for traced in trace_variants(load_scenario(bundled_path(name)), safe=False):
        compare_with_real(traced, name)


LEAVES = "a = torch.ones(4, requires_grad=True)\nw = torch.full((2,), 2.0, requires_grad=True)\n"
NO_GRAD_ADD = "with torch.no_grad():\n    w.add_(1.)"
# A view of a tensor written in place: its grad_fn becomes CopySlices, which keeps the in-place
# operation's node and what it saved out of Python's sight. Each: (steps, the (step, tensor) pairs
# whose real backward raises the in-place error, the tensors predicted unchecked at no step).
COPY_SLICES = {
    "mul_ saves the other factor": (
        [LEAVES + "b = a.clone()\nv = b[:2]\nv.mul_(w)", NO_GRAD_ADD, "b.sum().backward()"],
        {(2, "b"), (2, "v"), (3, "b"), (3, "v")},
    ),
    "sigmoid_ saves its result, the view": (
        [
            "x = torch.ones(4, requires_grad=True)\nb = x * 1\nb[0:2].sigmoid_()",
            "b.add_(1.)",
            "n = 1",
            "b.sum().backward()",
        ],
        {(2, "b"), (3, "b"), (4, "b")},
    ),
    "mul_ by a tensor that needs no grad saves it": (
        [
            "x = torch.ones(4, requires_grad=True)\nc = torch.full((2,), 3.)\nb = x * 1\n"
            "b[:2].mul_(c)",
            "c.fill_(5.)",
            "b.sum().backward()",
        ],
        {(2, "b"), (3, "b")},
    ),
    "exp_ then a write to the base in the same step": (
        [
            "x = torch.ones(4, requires_grad=True)\nb = x * 1\nb[1:3].exp_()\nb.mul_(2.)",
            "b.sum().backward()",
        ],
        {(1, "b")},
    ),  # then the failed backward has run and freed MulBackward0: "a second time"
    "mul_ of a view by k, then k changed under no_grad": (
        [
            "w = torch.ones(4, requires_grad=True)\nk = torch.full((2,), 2.)\nb = w * 1\n"
            "wv = b[:2]",
            "wv.mul_(k)",
            "with torch.no_grad():\n    k.add_(1.)",
            "b.sum().backward()",
        ],
        {(3, "b"), (3, "wv"), (4, "b"), (4, "wv")},
    ),
    "add_ saves nothing: a later change is harmless": (
        [
            LEAVES + "b = a.clone()\nb[:2].add_(w)",
            NO_GRAD_ADD,
            "b.sum().backward(retain_graph=True)",
        ],
        set(),
    ),
}


@pytest.mark.parametrize("pattern", sorted(COPY_SLICES))
def test_saved_tensors_inside_copy_slices_against_the_real_backward(pattern):
    """No missed in-place failure behind CopySlices, no failure predicted that does not happen."""
    steps, failing = COPY_SLICES[pattern]
    traced = trace(loads_scenario(yaml.safe_dump({"title": pattern, "steps": steps})), safe=False)
    compared = compare_with_real(traced, pattern)
    assert {(i, t) for i, t, happened, _ in compared if happened == "stale"} == failing
    for i, t, happened, kinds in compared:
        if happened == "stale":  # unseen by any saved attribute: said to be unchecked, never silent
            assert kinds & {STALE, UNCHECKED}, (i, t, kinds)
        if happened == "none" and (i, t) not in failing:
            assert not kinds & {STALE, FREED}, (i, t, kinds)


def test_copy_slices_with_nothing_changed_says_nothing():
    """A view written in place, then steps that change none of the tensors it may have saved:
    no notice."""
    traced = trace(
        loads_scenario(
            yaml.safe_dump(
                {
                    "title": "quiet",
                    "steps": [
                        LEAVES + "b = a.clone()\nv = b[:2]\nv.mul_(w)",
                        "u = b * 2",
                        "c = a.detach().clone()\nc.add_(1.)",
                        "q = a.exp()\nc.mul_(3.)",
                        "b.sum().backward()",
                    ],
                }
            )
        ),
        safe=False,
    )
    compared = compare_with_real(traced, "quiet")
    assert {happened for i, _, happened, _ in compared if i < 5} == {"none"}
    made = {(s.index, p.kind) for s in traced.steps for p in s.predictions}
    assert made == {(5, FREED)}  # after the backward


def test_the_comparison_sees_a_real_failure():
    """The fork reports what the real backward does, both kinds."""
    x = torch.ones(2, requires_grad=True)
    y = x.sigmoid()
    assert real_backward(y) == "none"
    y.sum().backward()
    assert real_backward(y) == "freed"
    z = x.exp()
    with torch.no_grad():
        z.add_(1)
    assert real_backward(z) == "stale"


def test_pytorch_shows_python_nothing_of_what_copy_slices_wraps():
    """Why CopySlices backwards are said to be unchecked (docs/json.md): CopySlices has no saved
    attribute, its next nodes skip the node it wraps, and saving through saved_tensors_hooks
    turns off the version check, so backward runs on a changed tensor without a word. Should a
    PyTorch show any of it, this fails, and the prediction can be made exact instead."""
    a = torch.ones(4, requires_grad=True)
    w = torch.full((2,), 2.0, requires_grad=True)
    b = a.clone()
    b[:2].mul_(w)
    node = b.grad_fn
    assert type(node).__name__ == "CopySlices"
    assert [n for n in dir(node) if "saved" in n] == []
    assert [type(n).__name__ for n, _ in node.next_functions] == [
        "CloneBackward0",
        "AccumulateGrad",
    ]
    with torch.no_grad():
        w.add_(1.0)
    assert real_backward(b) == "stale"
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        hooked = a.clone()
        hooked[:2].mul_(w)
    with torch.no_grad():
        w.add_(1.0)
    assert real_backward(hooked) == "none"


# --- each prediction against a real backward, both ways --------------------------------------

SCALE = """
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        {body}
"""


def traced(steps: List[str], title: str = "t") -> Trace:
    return trace(loads_scenario(yaml.safe_dump({"title": title, "steps": steps})), safe=False)


def _kinds(result: Trace, index: int, tensor: str) -> Set[str]:
    return {p.kind for p in result.steps[index - 1].predictions if p.tensor == tensor}


@pytest.mark.parametrize("reads", [False, True])
def test_a_custom_function_fails_only_if_its_backward_reads_what_it_saved(reads):
    """PyTorch checks a custom Function's saved tensors when its backward reads
    ctx.saved_tensors, and only then: a changed input it saved but never reads is harmless."""
    body = "x, w = ctx.saved_tensors\n        return g * 2, None" if reads else "return g * 2, None"
    steps = [
        SCALE.format(body=body) + "x = torch.ones(3, requires_grad=True)\nw = torch.ones(3)\n"
        "y = Scale.apply(x * 1, w)",
        "with torch.no_grad():\n    w.add_(1.)",
        "y.sum().backward()",
    ]
    result = traced(steps)
    compared = compare_with_real(result, "custom Function")
    assert (2, "y", "stale" if reads else "none") in {(i, t, o) for i, t, o, _ in compared}
    assert _kinds(result, 2, "y") == ({STALE} if reads else set())


def test_a_custom_function_that_hands_ctx_on_may_fail():
    """Whether a helper reads ctx.saved_tensors is not in the backward's own code."""
    helper = "def helper(ctx, g):\n    x, w = ctx.saved_tensors\n    return g * 2, None\n"
    steps = [
        helper
        + SCALE.format(body="return helper(ctx, g)")
        + "x = torch.ones(3, requires_grad=True)\nw = torch.ones(3)\ny = Scale.apply(x * 1, w)",
        "with torch.no_grad():\n    w.add_(1.)",
        "y.sum().backward()",
    ]
    result = traced(steps)
    compare_with_real(result, "helper")
    (p,) = result.steps[1].predictions
    assert p.kind == UNCHECKED and "may fail" in p.message and "passes `ctx` on" in p.message


@pytest.mark.parametrize("reentrant", [False, True])
def test_an_input_of_a_checkpoint_changed_in_place_is_predicted(reentrant):
    steps = [
        "from torch.utils.checkpoint import checkpoint\nx = torch.ones(3, requires_grad=True)\n"
        f"a = x * 1\ny = checkpoint(lambda t: t.sin() * 2, a, use_reentrant={reentrant})",
        "with torch.no_grad():\n    a.add_(1.)",
        "y.sum().backward()",
    ]
    result = traced(steps)
    compared = compare_with_real(result, "checkpoint")
    assert (2, "y", "stale") in {(i, t, o) for i, t, o, _ in compared}
    assert STALE in _kinds(result, 2, "y")
    assert result.steps[0].predictions == ()  # nothing changed yet: nothing predicted


def test_an_unrelated_change_raises_no_copy_slices_notice():
    """Only what the in-place write into the view touched can be what its node saved."""
    steps = [
        LEAVES + "q = torch.zeros(3)\nb = a.clone()\nb[:2].mul_(w)",
        "q.add_(1.)",
        NO_GRAD_ADD,
        "b.sum().backward()",
    ]
    result = traced(steps)
    compared = compare_with_real(result, "unrelated")
    outcomes = {(i, t): (o, k) for i, t, o, k in compared}
    assert outcomes[(2, "b")] == ("none", set())  # q is not what mul_ saved
    assert outcomes[(3, "b")] == ("stale", {UNCHECKED})  # w is


def _grads(steps: List[str], leaves: Sequence[str]) -> Dict[str, torch.Tensor]:
    """The leaves' gradients after running ``steps`` as plain code."""
    torch.manual_seed(0)
    ns: Dict[str, object] = base_namespace()
    for code in steps:
        exec(compile(code, "<plain>", "exec"), ns)
    return {leaf: ns[leaf].grad.clone() for leaf in leaves}


# (steps: the silent write is the second, backward the third; the leaves whose gradients count)
SILENT = {
    "a relu output scaled by 2 keeps its mask": (
        ["x = torch.tensor([1., -2., 3.], requires_grad=True)\ny = x.relu()", "y.data.mul_(2.)"],
        ("x",),
    ),
    "a relu output negated flips its mask": (
        ["x = torch.tensor([1., -2., 3.], requires_grad=True)\ny = x.relu()", "y.data.mul_(-1.)"],
        ("x",),
    ),
    "a sigmoid output halved": (
        ["x = torch.tensor([1., 2., 3.], requires_grad=True)\ny = x.sigmoid()", "y.data.mul_(0.5)"],
        ("x",),
    ),
    "a saved leaf's .data set": (
        [
            "w = torch.ones(3, requires_grad=True)\nx = torch.tensor([1., 2., 3.], "
            "requires_grad=True)\ny = w * x",
            "w.data = torch.full((3,), 5.)",
        ],
        ("x", "w"),
    ),
    "a saved leaf's .data set to the same values": (
        [
            "w = torch.ones(3, requires_grad=True)\nx = torch.tensor([1., 2., 3.], "
            "requires_grad=True)\ny = w * x",
            "w.data = torch.ones(3)",
        ],
        ("x", "w"),
    ),
}


@pytest.mark.parametrize("case", sorted(SILENT))
def test_gradients_are_said_to_be_wrong_exactly_when_they_differ(case):
    """A write that moves no version: backward runs; the prediction says its gradients will
    be wrong if and only if they differ from those without the write, in plain PyTorch."""
    (made, write), leaves = SILENT[case]
    backward = "y.sum().backward()"
    differ = any(
        not torch.equal(a, b)
        for a, b in zip(
            _grads([made, write, backward], leaves).values(),
            _grads([made, backward], leaves).values(),
        )
    )
    result = traced([made, write, backward])
    changed = [p for p in result.steps[1].predictions if p.kind == CHANGED]
    assert bool(changed) == differ, (case, changed)
    for p in changed:
        assert "will be wrong" in p.message
    assert result.steps[2].status == "ok"
