"""A large tensor's memory is read again only when it may have changed, and every change shows.

In safe mode the tracer proves from the ATen operations a step ran which
storages it did not write (``tensortrace.record.writes``); the snapshot cache then
keeps their marks without reading their memory. These tests write large
tensors in every way that bypasses the version counter, through the
recording or around it, and check that the values shown change; and that
memory nobody wrote is indeed not read again.
"""

from __future__ import annotations

import json
import math
from typing import Any, List

import pytest
import torch
import yaml

from tensortrace.record import values as probe_values

from tensortrace.record import reuse
from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.trace import TensorState, Trace
from tensortrace.scenario import load_scenario, loads_scenario
from tensortrace.record.tracer import trace, trace_variants
from tensortrace.record.writes import WriteWatch, code_reason

from conftest import cli_process, comparable, resolved, write_scenario

N = 100_000  # elements: a summary, and a span far over reuse.SMALL
NUMPY = "import numpy as np"


def run(steps: List[Any], setup: Any = None, *, ops: bool = True, safe: bool = True) -> Trace:
    body: dict = {"title": "unwritten", "steps": steps}
    if setup:
        body["setup"] = setup
    result = trace(loads_scenario(yaml.safe_dump(body)), safe=safe, ops=ops)
    assert result.aborted is None and all(s.status == "ok" for s in result.steps), result
    return result


def at(result: Trace, step: int, name: str) -> TensorState:
    return next(t for t in result.steps[step - 1].tensors if t.name == name)


def maximum(result: Trace, step: int, name: str) -> float:
    return at(result, step, name).values.summary.max


@pytest.fixture
def reads(monkeypatch):
    """The sizes of the spans of memory fingerprinted, in order."""
    spans: List[int] = []
    real = reuse.fingerprint
    monkeypatch.setattr(reuse, "fingerprint", lambda ptr, n: spans.append(n) or real(ptr, n))
    return spans


def big(span: List[int]) -> List[int]:
    return [n for n in span if n > reuse.SMALL]


# --- memory nobody wrote is not read again ---------------------------------------------


def test_memory_no_operation_wrote_keeps_its_record_unread(reads):
    result = run([f"a = torch.zeros({N})", "b = torch.ones(3)", "b.add_(1)", "c = a.detach()"])
    assert at(result, 2, "a") is at(result, 1, "a") and at(result, 3, "a") is at(result, 1, "a")
    assert at(result, 4, "c").values == at(result, 1, "a").values
    assert big(reads) == []  # proven unwritten: never fingerprinted


def test_memory_written_by_an_operation_is_read_again(monkeypatch):
    passes: List[int] = []
    real = probe_values._moments
    monkeypatch.setattr(probe_values, "_moments", lambda t: passes.append(t.numel()) or real(t))
    result = run([f"a = torch.zeros({N})", "c = a.detach()", "c[-1] = 4.0", "n = 1"])
    assert (
        maximum(result, 3, "a") == maximum(result, 3, "c") == 4.0 and maximum(result, 1, "a") == 0.0
    )
    assert at(result, 4, "a") is at(result, 3, "a")
    assert passes == [N, N]  # at step 1, and once at step 3 for a and c together


def test_memory_handed_out_is_fingerprinted_at_every_snapshot_after(reads):
    result = run([f"x = torch.zeros({N})", "s = x.untyped_storage()", "n = 1", "m = 2"])
    assert (
        big(reads) == [4 * N] * 3
    )  # steps 2, 3 and 4: the storage object can write it at any time
    assert at(result, 4, "x") is at(result, 3, "x") is at(result, 2, "x")


# --- writes that do not move the version counter -----------------------------------------


def test_a_write_through_data_shows():
    result = run([f"x = torch.zeros({N})", "x.data[-1] = 4.0", "x.data.mul_(2)"])
    assert maximum(result, 2, "x") == 4.0 and maximum(result, 3, "x") == 8.0
    assert at(result, 3, "x").version == at(result, 1, "x").version == 0


def test_a_numpy_write_to_a_tensor_made_from_numpy_shows():
    result = run(
        [f"n = np.zeros({N}, dtype=np.float32)", "t = torch.from_numpy(n)", "n[-1] = 4.0"],
        setup=NUMPY,
    )
    assert maximum(result, 2, "t") == 0.0 and maximum(result, 3, "t") == 4.0


def test_a_numpy_write_through_a_numpy_view_shows_steps_later():
    result = run(
        [
            f"x = torch.zeros({N})",
            "n = x.numpy()",
            "y = torch.ones(2)",
            "n[-1] = 4.0",
            "n[-1] = 5.0",
        ],
        setup=NUMPY,
    )
    assert [maximum(result, i, "x") for i in (3, 4, 5)] == [0.0, 4.0, 5.0]


def test_a_numpy_view_taken_and_dropped_in_one_line_still_shows_its_write():
    result = run([f"x = torch.zeros({N})", "x[:10].numpy()[-1] = 4.0", "x[:10].numpy()[-1] = 5.0"])
    assert maximum(result, 2, "x") == 4.0 and maximum(result, 3, "x") == 5.0


def test_a_write_through_a_detached_alias_shows():
    result = run([f"x = torch.zeros({N})", "y = x.detach()", "y[-1] = 4.0", "y.data[0] = -1.0"])
    assert maximum(result, 3, "x") == 4.0 and at(result, 4, "x").values.summary.min == -1.0


def test_a_write_inside_no_grad_shows_on_an_alias_without_the_version():
    result = run(
        [
            "u = w.data",
            "with torch.no_grad():\n    w.mul_(2)",
            "with torch.no_grad():\n    w[-1] = 9.0",
        ],
        setup=f"w = torch.ones({N}, requires_grad=True)",
    )
    assert maximum(result, 2, "u") == 2.0 and maximum(result, 3, "u") == 9.0
    assert at(result, 3, "u").version == 0


def test_an_out_argument_write_shows_on_an_alias():
    result = run([f"y = torch.zeros({N})", "z = y.data", f"torch.add(torch.ones({N}), 1, out=y)"])
    assert maximum(result, 3, "z") == 2.0 and at(result, 3, "z").version == 0


def test_set_shows_on_the_tensor_and_later_writes_on_the_new_storage():
    result = run(
        [f"a = torch.zeros({N})", f"b = torch.ones({N})", "c = b.data", "a.set_(b)", "a.mul_(3)"]
    )
    assert maximum(result, 4, "a") == 1.0
    assert maximum(result, 5, "c") == 3.0


def test_a_write_after_data_is_reassigned_lands_in_the_new_storage():
    result = run(
        [f"x = torch.zeros({N})", f"y = torch.zeros({N})", "x.add_(0)\nx.data = y\nx.add_(1)"]
    )
    assert maximum(result, 3, "y") == 1.0 and maximum(result, 3, "x") == 1.0


def test_a_write_through_the_storage_shows():
    result = run([f"x = torch.ones({N})", "s = x.untyped_storage()", "s.fill_(0)"])
    assert maximum(result, 3, "x") == 0.0


def test_a_gradient_accumulated_in_place_shows_on_an_alias():
    result = run(
        ["(w * 2).sum().backward()", "g = w.grad.data", "(w * 2).sum().backward()"],
        setup=f"w = torch.ones({N}, requires_grad=True)",
    )
    assert maximum(result, 2, "g") == 2.0 and maximum(result, 3, "g") == 4.0


def test_a_write_in_an_expectation_shows():
    result = run(
        [
            f"x = torch.zeros({N})",
            {"run": "n = 1", "expect": ["x.data.fill_(3) is not None"]},
            "m = 2",
        ]
    )
    assert maximum(result, 2, "x") == 3.0 and maximum(result, 3, "x") == 3.0


def test_a_write_beyond_the_recording_limit_shows():
    result = run(
        [f"x = torch.zeros({N})", "for _ in range(1100):\n    y = x + 1\nx.data[-1] = 4.0"]
    )
    assert result.steps[1].ops_omitted > 0
    assert maximum(result, 2, "x") == 4.0


def test_with_ops_off_writes_show(reads):
    result = run([f"x = torch.zeros({N})", "x.data[-1] = 4.0", "n = 1"], ops=False)
    assert maximum(result, 2, "x") == 4.0 and at(result, 3, "x") is at(result, 2, "x")
    assert big(reads)  # no proof without the recording: memory is fingerprinted


@pytest.mark.parametrize("ops", ["none", "aten"])
def test_from_the_command_line_writes_show_with_and_without_ops(tmp_path, ops):
    path = write_scenario(
        tmp_path,
        f"""
        title: cli
        steps:
          - x = torch.zeros({N})
          - y = x.detach()
          - x.data[-1] = 4.0
          - y.data[0] = -1.0
        """,
    )
    done = cli_process("run", str(path), "--format", "json", "--ops", ops)
    assert done.returncode == 0, done.stderr
    steps = resolved(json.loads(done.stdout))["steps"]
    summary = [{t["name"]: t["values"]["summary"] for t in s["tensors"]} for s in steps]
    assert [summary[i]["y"]["max"] for i in (1, 2, 3)] == [0.0, 4.0, 4.0]
    assert [summary[i]["x"]["min"] for i in (1, 2, 3)] == [0.0, 0.0, -1.0]


def test_under_inference_mode_writes_show():
    result = run(
        [
            f"x = torch.zeros({N})",
            "with torch.inference_mode():\n    y = torch.ones(2)\nx.data[-1] = 4.0",
        ]
    )
    assert maximum(result, 2, "x") == 4.0


def test_without_safe_mode_memory_is_fingerprinted(reads):
    result = run([f"x = torch.zeros({N})", "x.data[-1] = 4.0", "n = 1"], safe=False)
    assert maximum(result, 2, "x") == 4.0 and big(reads)


# --- what makes a run fall back to fingerprints -------------------------------------------


@pytest.mark.parametrize(
    "code, reason",
    [
        ("class A:\n    def __str__(self):\n        return 'a'", "defines a class"),
        ("def g():\n    yield 1", "generator"),
        ("t.numel = print", "assigns the attribute 'numel'"),
        ("m.extra_repr = print", "assigns the attribute 'extra_repr'"),
        ("s.nbytes = print", "assigns the attribute 'nbytes'"),
        ("c = torch.to_dlpack(a)", "dlpack"),
    ],
)
def test_code_that_could_write_unseen_turns_the_proof_off(code, reason):
    assert reason in code_reason([(code, "exec")])


@pytest.mark.parametrize(
    "code", ["x.grad = None", "x.data = y", "x.requires_grad = True", "f = lambda t: t * 2"]
)
def test_ordinary_code_keeps_the_proof(code):
    assert code_reason([(code, "exec")]) is None


def test_a_scenario_with_a_class_is_fingerprinted_and_shows_writes(reads):
    result = run([f"x = torch.zeros({N})", "class A:\n    pass", "x.data[-1] = 4.0"])
    assert maximum(result, 3, "x") == 4.0 and big(reads)


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_scenario_traces_the_same_with_and_without_the_proof(name, monkeypatch):
    scenario = load_scenario(bundled_path(name))
    proven = trace_variants(scenario, safe=True)
    monkeypatch.setattr(WriteWatch, "window", lambda self, *args: None)
    read = trace_variants(scenario, safe=True)
    assert [comparable(t) for t in proven] == [comparable(t) for t in read]


# --- the statistics of a summary --------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: (
            torch.randn(300_001, dtype=torch.float32) * 1e-3 + 1e4
        ),  # a mean far from zero: no cancellation
        lambda: torch.randn(700, 500, dtype=torch.float64)[:, ::3],  # strided
        lambda: torch.arange(600_000, dtype=torch.int64) - 7,
        lambda: torch.randn(300_000).half(),
        lambda: torch.where(
            torch.rand(300_000) < 0.01, torch.tensor(float("nan")), torch.randn(300_000)
        ),
        lambda: torch.tensor([float("inf"), -float("inf")] * 1000 + [2.0] * 300_000),
        lambda: torch.rand(300_000) < 0.5,
        lambda: torch.cat(
            [torch.ones(1 << 18), torch.full((1 << 18,), 2.0), torch.randn(1000)]
        ),  # chunk by chunk
    ],
)
def test_summary_statistics_match_float64_references(make):
    t = make()
    count, mean, m2, lo, hi, nans, infs = probe_values._moments(t)
    flat = t.reshape(-1).double()
    finite = flat[torch.isfinite(flat)]
    assert (count, nans, infs) == (
        finite.numel(),
        int(torch.isnan(flat).sum()),
        int(torch.isinf(flat).sum()),
    )
    assert (lo, hi) == (float(finite.min()), float(finite.max()))
    assert math.isclose(mean, float(finite.mean()), rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(m2 / count, float(finite.var(correction=0)), rel_tol=1e-9, abs_tol=1e-15)


def test_a_constant_tensor_has_its_value_as_mean_and_no_deviation_exactly():
    value = float(
        torch.tensor(0.1)
    )  # 0.1 in float32, which no float64 sum of copies need give back exactly
    count, mean, m2, lo, hi, _, _ = probe_values._moments(torch.full((1_000_003,), 0.1))
    assert (count, mean, m2, lo, hi) == (1_000_003, value, 0.0, value, value)
    count, mean, m2, lo, hi, _, _ = probe_values._moments(
        torch.cat([torch.ones(1 << 18), torch.full((1 << 18,), 3.0)])
    )
    assert (mean, m2 / count, lo, hi) == (2.0, 1.0, 1.0, 3.0)


def test_summaries_leave_the_thread_count_as_they_found_it():
    before = torch.get_num_threads()
    probe_values._moments(torch.randn(600_000))
    assert torch.get_num_threads() == before


# --- writes the schema does not declare -----------------------------------------------------


def _plain(steps: List[str]) -> dict:
    from tensortrace.record.helpers import base_namespace

    ns = base_namespace()
    for code in steps:
        exec(compile(code, "<plain>", "exec"), ns)
    return ns


BATCH_NORM = [
    "torch.manual_seed(0)\nbn = nn.BatchNorm1d(512)\nx = torch.randn(16, 512) * 3 + 1",
    "y = bn(x)",
    "z = bn(x * 2)",
]


def test_batch_norm_running_statistics_show_though_the_schema_declares_no_write():
    """``native_batch_norm`` updates ``running_mean`` and ``running_var`` in its kernel, but
    its schema marks neither as written: memory an operation was handed is compared again."""
    plain = _plain(BATCH_NORM)
    result = run(BATCH_NORM)
    for name in ("running_mean", "running_var"):
        real = getattr(plain["bn"], name)
        shown = at(result, 3, f"bn.{name}").values.summary
        assert math.isclose(shown.mean, real.mean().item(), rel_tol=1e-6)
        assert math.isclose(shown.max, real.max().item(), rel_tol=1e-6)
        before = at(result, 2, f"bn.{name}").values.summary
        assert (before.mean, before.max) != (shown.mean, shown.max)


@pytest.mark.parametrize(
    "write",
    [
        "x.apply_(lambda v: v + 1)",
        "x.map_(torch.ones(2000), lambda a, b: a + b)",
    ],
)
def test_a_write_by_a_python_callable_shows(write):
    """``apply_`` and ``map_`` write through a Python callable, with no ATen operation."""
    steps = ["x = torch.zeros(2000)", write]
    plain = _plain(steps)["x"]
    result = run(steps)
    shown = at(result, 2, "x").values.summary
    assert shown.max == plain.max().item() == 1.0 and shown.min == 1.0


def test_memory_an_operation_only_read_is_compared_and_its_record_kept(reads):
    """An operation handed memory may write it undeclared, so it is fingerprinted; unchanged,
    its record stands. A view operation touches no byte and reads nothing."""
    result = run([f"a = torch.zeros({N})", "s = a.sum()", "t = a.sum()", "c = a.detach()"])
    assert big(reads) == [4 * N, 4 * N]  # steps 2 and 3; not step 4's detach
    assert at(result, 3, "a") is at(result, 2, "a") and at(result, 4, "a") is at(result, 2, "a")
