"""A record reused from the previous snapshot is exactly the record a fresh read gives.

The snapshot cache (``tensortrace.record.reuse``) skips reading a tensor that is
provably unchanged. These tests change tensors in every way that bypasses
the version counter (``.data``, NumPy over the same memory, ``.grad.data``),
small and large, and check that each change still shows; and they trace every
bundled scenario with and without the cache and compare the traces whole.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import yaml

from tensortrace.record import reuse
from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.trace import TensorState, Trace
from tensortrace.scenario import load_scenario, loads_scenario
from tensortrace.record.tracer import trace, trace_variants

from conftest import comparable


def run(steps: List[Any], setup: Any = None) -> Trace:
    body: dict = {"title": "reuse", "steps": steps}
    if setup:
        body["setup"] = setup
    result = trace(loads_scenario(yaml.safe_dump(body)), safe=False)
    assert result.aborted is None and all(s.status == "ok" for s in result.steps), result
    return result


def at(result: Trace, step: int, name: str) -> TensorState:
    return next(t for t in result.steps[step - 1].tensors if t.name == name)


def test_an_unchanged_tensor_keeps_its_very_record():
    result = run(["a = torch.arange(4.)", "b = torch.zeros(2)", "b.add_(1)"])
    assert at(result, 2, "a") is at(result, 1, "a")  # reused, not read again
    assert at(result, 3, "a") is at(result, 1, "a")
    assert at(result, 3, "b").values.data == (1.0, 1.0) and at(result, 3, "b").version == 1


def test_a_write_through_data_shows_though_the_version_does_not_move():
    result = run(["x = torch.ones(3)", "x.data.mul_(2)"])
    assert at(result, 2, "x").version == at(result, 1, "x").version == 0
    assert at(result, 2, "x").values.data == (2.0, 2.0, 2.0)


def test_a_write_through_numpy_shows():
    result = run(["x = torch.zeros(2, 2)", "n = x.numpy()", "n += 1"])
    assert at(result, 3, "x").values.data == ((1.0, 1.0), (1.0, 1.0))
    assert at(result, 3, "x").version == 0


@pytest.mark.parametrize("size", [100_000, 5_000_000])  # one CRC block, and several
def test_a_large_tensor_changed_without_counting_gets_a_new_summary(size):
    result = run([f"x = torch.zeros({size})", "y = x.detach()", "x.data[-1] = 4.0"])
    first, same, changed = at(result, 1, "x"), at(result, 2, "x"), at(result, 3, "x")
    assert same is first and at(result, 2, "y").values == first.values
    assert changed.values.summary.max == 4.0 and first.values.summary.max == 0.0
    assert changed.version == first.version


def test_a_grad_changed_through_data_shows():
    result = run(
        ["y = (w * 2).sum()", "y.backward()", "w.grad.data.zero_()"],
        setup="w = torch.ones(2, requires_grad=True)",
    )
    assert at(result, 2, "w").grad.data == (2.0, 2.0)
    assert at(result, 3, "w").grad.data == (0.0, 0.0)


def test_a_renamed_or_rebased_tensor_is_recorded_under_its_names_now():
    result = run(["a = torch.ones(2)", "b = a", "del a", "c = b[:1]"])
    assert at(result, 2, "b").same_as == "a"
    assert at(result, 3, "b").name == "b" and at(result, 3, "b").same_as is None
    assert at(result, 4, "c").base == "b"


def test_nan_and_negative_zero_are_told_apart_from_what_they_replace():
    result = run(["x = torch.zeros(2)", "x.data[0] = -0.0", "x.data[1] = float('nan')"])
    assert str(at(result, 2, "x").values.data[0]) == "-0.0"
    assert at(result, 3, "x").values.data[1] == "nan"


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_scenario_traces_the_same_with_and_without_reuse(name, monkeypatch):
    scenario = load_scenario(bundled_path(name))
    cached = trace_variants(scenario, safe=False)
    monkeypatch.setattr(reuse.SnapshotCache, "reuse", lambda self, *args: None)
    fresh = trace_variants(scenario, safe=False)
    assert [comparable(t) for t in cached] == [comparable(t) for t in fresh]


def test_the_json_document_holds_exactly_the_trace_with_one_line_per_record():
    import json

    from tensortrace.trace import FORMAT_VERSION
    from tensortrace.render.json import render_json

    result = run(
        ["a = torch.ones(2)", "print('\\x00x\\x00')", "b = [a, a * 2]"], setup="z = torch.zeros(70)"
    )
    assert at(result, 2, "a") is at(result, 1, "a")  # a shared record, encoded once
    text = render_json([result])
    assert json.loads(text) == json.loads(json.dumps(result.to_dict()))
    both = [result, result]
    whole = {
        "format": "tensortrace.trace",
        "format_version": FORMAT_VERSION,
        "traces": [t.to_dict() for t in both],
    }
    assert json.loads(render_json(both)) == json.loads(json.dumps(whole))
    # each tensor record is one line of its own, indented under its step's "tensors": written
    # in full where it first appears, and as a reference to that step after
    lines = [line.strip().rstrip(",") for line in text.splitlines()]
    full = [line for line in lines if line.startswith('{"name":"a"')]
    assert len(full) == 1 and json.loads(full[0])["name"] == "a"
    assert lines.count('["a",1]') == 2
    assert (
        '"stdout": "\\u0000x\\u0000\\n"' in text
    )  # control characters escaped, as JSON spells them


def test_a_change_that_moves_no_version_still_shows():
    result = run(
        [
            "x.requires_grad_(True)",
            "x.grad = torch.ones(4)",
            "x.data = x.data.view(2, 2)",
            "y = x * 2",
            "y.retain_grad()",
        ],
        setup="x = torch.zeros(4)",
    )
    assert [at(result, i, "x").version for i in (1, 2, 3)] == [0, 0, 0]  # none of these counts
    assert at(result, 1, "x").requires_grad and not result.setup.tensors[0].requires_grad
    assert at(result, 2, "x").grad.data == (1.0, 1.0, 1.0, 1.0)
    assert (
        at(result, 3, "x").shape == (2, 2)
        and at(result, 3, "x").data_ptr == at(result, 2, "x").data_ptr
    )
    assert not at(result, 4, "y").retains_grad and at(result, 5, "y").retains_grad


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_scenario_reads_the_same_through_the_plain_tensor_path(name, monkeypatch):
    """``probe._probe_plain`` reads a plain tensor's facts in one go; the fact-by-fact
    reader is the reference."""
    from tensortrace.record import probe

    scenario = load_scenario(bundled_path(name))
    monkeypatch.setattr(reuse.SnapshotCache, "reuse", lambda self, *args: None)
    quick = trace_variants(scenario, safe=False)
    monkeypatch.setattr(probe, "_probe_plain", lambda *args: None)
    careful = trace_variants(scenario, safe=False)
    assert [comparable(t) for t in quick] == [comparable(t) for t in careful]


def test_the_plain_tensor_path_gives_the_careful_readers_record(monkeypatch):
    import torch

    from tensortrace.record import probe

    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.sum().backward()
    tensors = {
        "small": torch.arange(5.0),
        "ints": torch.arange(5),
        "flags": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5),
        "odd": torch.tensor([1.0, float("nan"), -float("inf"), -0.0]),
        "matrix": torch.ones(2, 3),
        "large": torch.randn(100),
        "empty": torch.zeros(0),
        "leaf": x,
        "y": y,
        "view": x.detach()[1:],
        "param": torch.nn.Parameter(torch.ones(2)),
        "half": torch.ones(3, dtype=torch.half),
        "complex": torch.ones(2, dtype=torch.complex64),
        "negative": torch._neg_view(torch.ones(2)),
        "expanded": torch.ones(1).expand(5),
        "meta": torch.ones(2, device="meta"),
        "bytes": torch.tensor([1, 2], dtype=torch.uint8),
    }

    def records(values: bool) -> list:
        registry = probe.StorageRegistry()
        return [
            probe.probe_tensor(name, t, registry, {id(x): "leaf"}, values=values, cache={})
            for name, t in tensors.items()
        ]

    quick = {values: records(values) for values in (True, False)}
    monkeypatch.setattr(probe, "_probe_plain", lambda *args: None)
    assert quick == {values: records(values) for values in (True, False)}


def test_a_steps_recording_is_freed_without_the_cycle_collector():
    import gc

    from tensortrace.record import ops

    gc.collect()
    gc.disable()
    try:
        run(["a = torch.ones(2)", "a.add_(1)", "b = a * 2"])
        left = [o for o in gc.get_objects() if type(o) in (ops.OpsRecorder, ops.FlowRecorder)]
    finally:
        gc.enable()
    assert left == []


def test_every_field_of_a_record_is_kept_true_by_the_reuse_key():
    """A reused record is served without reading the tensor: a field of ``TensorState`` that
    no part of the key (or the memory's fingerprint) covers would be served stale."""
    import torch

    others = {"values", "grad values", "qualifies", "renamed", "tracer"}
    assert set(reuse.COVERED_BY) == set(TensorState.__struct_fields__), (
        "a field of TensorState was added or removed: say in reuse.COVERED_BY what keeps it "
        "true in a reused record, and add that fact to reuse._facts' key"
    )
    for field, parts in reuse.COVERED_BY.items():
        assert parts and set(parts) <= set(reuse.KEY_PARTS) | others, field
    key, _, _ = reuse._facts(torch.ones(2, requires_grad=True))
    assert len(key) == len(reuse.KEY_PARTS)


def test_a_record_reused_is_the_record_a_fresh_read_gives_at_every_step():
    """The cache against no cache, on steps that change small tensors in place, through views,
    ``.data`` and ``.grad``: every step's records are equal."""
    steps = [
        "a = torch.arange(6.).reshape(2, 3)",
        "v = a[0]",
        "v.add_(1)",
        "a.data[1, 1] = 9",
        "w = torch.ones(3, requires_grad=True)",
        "(w * 2).sum().backward()",
        "w.grad.data.mul_(3)",
        "n = a.numpy(); n[0, 0] = -1",
    ]
    cached = run(steps)
    real = reuse.SnapshotCache.reuse
    try:
        reuse.SnapshotCache.reuse = lambda self, *args: None  # every record read afresh
        fresh = run(steps)
    finally:
        reuse.SnapshotCache.reuse = real
    assert comparable(cached) == comparable(fresh)
