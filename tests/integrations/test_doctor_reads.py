"""What doctor reads in a run, in this process: silent changes (with exactly the gradients they
alter, compared with a recomputation), parameters a cut starved of gradients, and the cut behind
"does not require grad" whatever shape it takes."""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Dict, Set

import pytest
import torch

import tensortrace


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def watched(case: Callable[[bool], Dict[str, torch.Tensor]]):
    with tensortrace.doctor(os.devnull) as watch:
        case(True)
    return watch.report


def changed_grads(case: Callable[[bool], Dict[str, torch.Tensor]]) -> Set[str]:
    """The leaves whose gradients differ between a run with the write and one without."""
    torch.manual_seed(0)
    with_write = case(True)
    torch.manual_seed(0)
    without = case(False)
    return {name for name, g in with_write.items() if not torch.allclose(g, without[name])}


# Each case builds a small graph, writes a saved tensor through .data (or not), and returns the
# leaves' gradients. The report's "wrong" list must be exactly the leaves a recomputation finds.


def relu_output_scaled(write: bool) -> Dict[str, torch.Tensor]:
    torch.manual_seed(0)
    w1 = torch.randn(4, 6, requires_grad=True)
    w2 = torch.randn(6, 2, requires_grad=True)
    h = torch.relu(torch.randn(8, 4) @ w1)
    out = h @ w2
    if write:
        h.data.mul_(0.5)  # positive: relu's mask is the same; h @ w2's gradient is not
    out.sum().backward()
    return {"w1": w1.grad, "w2": w2.grad}


def input_of_the_first_layer(write: bool) -> Dict[str, torch.Tensor]:
    torch.manual_seed(0)
    w1 = torch.randn(4, 6, requires_grad=True)
    w2 = torch.randn(6, 2, requires_grad=True)
    x = torch.randn(8, 4)
    out = torch.tanh(x @ w1) @ w2
    if write:
        x.data.mul_(2)  # only w1's gradient reads x
    out.sum().backward()
    return {"w1": w1.grad, "w2": w2.grad}


def sigmoid_output(write: bool) -> Dict[str, torch.Tensor]:
    torch.manual_seed(0)
    w1 = torch.randn(4, 6, requires_grad=True)
    w2 = torch.randn(6, 2, requires_grad=True)
    y = torch.sigmoid(torch.randn(8, 4) @ w1)
    out = y @ w2
    if write:
        y.data.add_(0.1)  # sigmoid's backward (w1) and y @ w2's (w2) both read y
    out.sum().backward()
    return {"w1": w1.grad, "w2": w2.grad}


def rebound_weight(write: bool) -> Dict[str, torch.Tensor]:
    torch.manual_seed(0)
    w1 = torch.randn(4, 6, requires_grad=True)
    w2 = torch.randn(6, 3, requires_grad=True)
    y = torch.tanh(torch.randn(8, 4) @ w1) @ w2
    if write:
        w2.data = w2.data - 0.1 * torch.ones(6, 3)  # the graph reads w2's new memory
    (y**2).sum().backward()
    return {"w1": w1.grad, "w2": w2.grad}


@pytest.mark.parametrize(
    "case", [relu_output_scaled, input_of_the_first_layer, sigmoid_output, rebound_weight]
)
def test_the_wrong_gradients_are_exactly_those_a_recomputation_finds(case):
    truth = changed_grads(case)
    report = watched(case)
    (silent,) = report.silent  # one warning per write, however many nodes saved the tensor
    assert silent.exact
    assert set(silent.leaves) == truth
    assert not set(silent.unaffected) & truth


def test_a_data_rebinding_is_named_as_the_write():
    report = watched(rebound_weight)
    (silent,) = report.silent
    assert silent.writes[0].op == ".data ="
    assert silent.writes[0].place.code.startswith("w2.data = w2.data - 0.1")
    assert "w2 is rebound to new memory after MmBackward0 saved w2" in silent.headline


def test_a_bfloat16_tensor_written_through_data_is_seen():
    """NumPy cannot view bfloat16: the fingerprint goes through PyTorch (as for a GPU's memory)."""
    with tensortrace.doctor(os.devnull) as watch:
        w = torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True)
        y = torch.sigmoid(w)
        y.data.mul_(0.5)
        y.float().sum().backward()
    (silent,) = watch.report.silent
    assert silent.saved.dtype == "bfloat16" and silent.leaves == ("w",)


# --- parameters a cut starved of gradients ---------------------------------------------------


def test_a_detach_that_keeps_the_generator_from_its_gradients_is_named():
    with tensortrace.doctor(os.devnull) as watch:
        torch.manual_seed(0)
        G = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
        D = torch.nn.Linear(8, 1)
        opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
        opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
        for step in range(2):
            fake = G(torch.randn(16, 4)).detach()
            opt_D.zero_grad()
            D(fake).mean().backward()
            opt_D.step()
            opt_G.zero_grad()
            (-D(fake)).mean().backward()
            opt_G.step()
    (starved,) = watch.report.starved
    assert starved.cut.place.code == "fake = G(torch.randn(16, 4)).detach()"
    assert starved.step.code == "opt_G.step()" and starved.times == 2
    assert set(starved.parameters) == {"G.0.weight", "G.0.bias"}
    (fix,) = starved.fixes
    assert [e.text.strip() for e in fix.edits][:2] == [
        "fake = G(torch.randn(16, 4))",
        "D(fake.detach()).mean().backward()",
    ]


def test_a_detach_for_the_discriminator_alone_is_no_warning():
    with tensortrace.doctor(os.devnull) as watch:
        torch.manual_seed(0)
        G, D = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
        opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
        opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
        for step in range(2):
            fake = G(torch.randn(16, 4))
            opt_D.zero_grad()
            D(fake.detach()).mean().backward()
            opt_D.step()
            opt_G.zero_grad()
            (-D(fake)).mean().backward()
            opt_G.step()
    assert watch.report.starved == () and watch.report.silent == ()


# --- the cut behind "does not require grad" --------------------------------------------------


def failure_of(block: Callable[[], None]):
    with pytest.raises(RuntimeError, match="does not require grad"):
        with tensortrace.doctor(os.devnull) as watch:
            block()
    return watch.report.failure


@torch.no_grad()
def predict(model, x):
    return model(x)


def test_a_function_decorated_with_no_grad_is_the_cut():
    def block():
        model = torch.nn.Linear(3, 1)
        pred = predict(model, torch.randn(4, 3))
        loss = pred.pow(2).mean()
        loss.backward()

    f = failure_of(block)
    ((kind, line),) = [(c.kind, c.place.line) for c in f.cuts]
    assert kind.startswith("@torch.no_grad() on predict")
    assert line == predict.__wrapped__.__code__.co_firstlineno
    assert "nothing" not in f.headline
    (fix,) = f.fixes
    assert fix.edits[0].was.strip() == "@torch.no_grad()" and fix.edits[0].text == ""


def test_an_item_round_trip_is_the_cut_and_the_fix_keeps_the_tensor():
    def block():
        w = torch.randn(3, requires_grad=True)
        value = (w * 2).sum().item()
        loss = torch.tensor(value)
        loss.backward()

    f = failure_of(block)
    assert [c.kind for c in f.cuts] == [".item()"]
    (fix,) = f.fixes
    assert [e.text.strip() for e in fix.edits] == ["value = (w * 2).sum()", "loss = value"]


def test_nothing_requiring_grad_is_said_only_when_true():
    def block():
        w = torch.randn(3, 2)  # meant as a parameter
        loss = (torch.randn(4, 3) @ w).sum()
        loss.backward()

    f = failure_of(block)
    assert f.cuts == () and "nothing loss is computed from requires grad" in f.headline
    (fix,) = f.fixes
    assert (
        fix.edits[0].text.strip()
        == "w = torch.randn(3, 2, requires_grad=True)  # meant as a parameter"
    )


# --- plain loops used the wrong way, read in this process (the command line's: test_doctor_cases)


def _update_without_no_grad():
    w = torch.randn(3, requires_grad=True)
    (w * 2).sum().backward()
    w -= 0.1 * w.grad


def _backward_of_a_vector():
    w = torch.randn(3, requires_grad=True)
    out = w * 2
    out.backward()


def _weights_scaled_at_creation():
    w = torch.randn(3, requires_grad=True) * 0.01
    (w * 2).sum().backward()
    w.grad.zero_()


def _grad_of_a_vector():
    w = torch.randn(3, requires_grad=True)
    out = w * 2
    return torch.autograd.grad(out, w)


def _numpy_of_an_output():
    w = torch.randn(3, requires_grad=True)
    out = w * 2
    return out.numpy()


@pytest.mark.parametrize(
    "case, raised, kind, line, fix",
    [
        (
            _update_without_no_grad,
            RuntimeError,
            "leaf-in-place",
            "w -= 0.1 * w.grad",
            "with torch.no_grad():",
        ),
        (
            _backward_of_a_vector,
            RuntimeError,
            "not-scalar",
            "out.backward()",
            "out.sum().backward()",
        ),
        (
            _grad_of_a_vector,
            RuntimeError,
            "not-scalar",
            "return torch.autograd.grad(out, w)",
            "return torch.autograd.grad(out.sum(), w)",
        ),
        (
            _numpy_of_an_output,
            RuntimeError,
            "numpy-requires-grad",
            "return out.numpy()",
            "return out.detach().numpy()",
        ),
        (
            _weights_scaled_at_creation,
            AttributeError,
            "non-leaf-grad",
            "w.grad.zero_()",
            "w = (torch.randn(3, requires_grad=True) * 0.01).detach().requires_grad_()",
        ),
    ],
)
def test_a_mistake_of_a_plain_loop_is_named_at_its_line_with_its_fix(case, raised, kind, line, fix):
    with pytest.warns() if kind == "non-leaf-grad" else contextlib.nullcontext():
        with pytest.raises(raised):
            with tensortrace.doctor(os.devnull) as watch:
                case()
    f = watch.report.failure
    assert f.kind == kind and f.backward.code == line
    assert f.fixes[0].edits[0].text.strip().splitlines()[0] == fix


def test_an_unrelated_none_is_not_blamed_on_a_gradient():
    with pytest.raises(TypeError):
        with tensortrace.doctor(os.devnull) as watch:
            w = torch.randn(3, requires_grad=True) * 2
            w * None
    assert watch.report.failure is None


def test_a_non_leaf_that_retains_its_grad_is_not_blamed():
    with pytest.raises(TypeError):
        with tensortrace.doctor(os.devnull) as watch:
            w = torch.randn(3, requires_grad=True) * 2
            w.retain_grad()
            w.grad * None  # its grad is None only because no backward ran
    assert watch.report.failure is None


def test_a_failure_to_read_the_error_is_a_warning_and_the_error_goes_on(monkeypatch):
    from tensortrace.doctor import misuse

    def broken(exc):
        raise ValueError("a bug of the reading")

    monkeypatch.setattr(misuse, "after_run", broken)
    with pytest.warns(RuntimeWarning, match="reading the script's error failed"):
        with pytest.raises(RuntimeError, match="leaf Variable") as raised:
            with tensortrace.doctor(os.devnull) as watch:
                _update_without_no_grad()
    assert raised.type is RuntimeError and watch.report.failure is None
