"""The trace's records: frozen, typed msgspec Structs, declared once in ``tensortrace.trace``."""

from __future__ import annotations

import gc

import msgspec
import pytest

from tensortrace import model
from tensortrace.library import bundled_path
from tensortrace.scenario import load_scenario
from tensortrace.trace import RECORDS, InvalidRecord
from tensortrace.tracer import trace_variants


def _records(value, into):
    if isinstance(value, msgspec.Struct):
        into.append(value)
        for name in value.__struct_fields__:
            _records(getattr(value, name), into)
    elif isinstance(value, tuple):
        for item in value:
            _records(item, into)
    return into


@pytest.fixture(scope="module")
def recorded():
    names = ("detach-vs-data", "saved-tensors", "backward-twice", "gradient-flow", "inplace-error-message")
    traces = [t for name in names for t in trace_variants(load_scenario(bundled_path(name)))]
    found = []
    for t in traces:
        _records(t, found)
    return found


def test_every_kind_of_record_is_covered_and_the_model_re_exports_each(recorded):
    kinds = {type(r) for r in recorded}
    assert len(RECORDS) >= 20 and len(kinds) >= 12
    assert all(getattr(model, cls.__name__) is cls for cls in RECORDS)


def test_records_compare_hash_and_refuse_changes(recorded):
    for r in recorded[:3000]:
        assert r == model.evolve(r) and not (r != model.evolve(r))
        assert hash(r) == hash(model.evolve(r))
        first = r.__struct_fields__[0]
        with pytest.raises(AttributeError):
            setattr(r, first, None)
        with pytest.raises(AttributeError):
            r.not_a_field = 1
        assert repr(r).startswith(type(r).__name__ + "(")


def test_records_stay_out_of_the_garbage_collectors_sight(recorded):
    """Records are trees: made with gc=False, a trace of a large graph adds nothing to collect."""
    assert not any(gc.is_tracked(r) for r in recorded[:3000])


def test_a_changed_field_makes_a_record_unequal(recorded):
    step = next(r for r in recorded if isinstance(r, model.Step))
    other = model.evolve(step, status="raised" if step.status != "raised" else "ok")
    assert step != other and model.evolve(other, status=step.status) == step


def test_records_are_built_positionally_as_before():
    bump = model.VersionBump("x", 0, 1)
    assert (bump.name, bump.from_, bump.to) == ("x", 0, 1)
    assert model.record_to_dict(bump) == {"name": "x", "from": 0, "to": 1}
    assert model.record_to_dict(model.OpTensors(in_=("a", None))) == {"in": ["a", None], "out": []}


def test_a_record_loads_alike_with_every_field_or_a_missing_default():
    from render_fixtures import detach_trace

    step = model.evolve(next(s for s in detach_trace().steps if s.tensors and s.expectations), note=None)
    data = model.record_to_dict(step)
    assert model.record_from_dict(model.Step, data) == step
    short = {k: v for k, v in data.items() if k != "note"}  # a default fills a field an older writer left out
    assert model.record_to_dict(model.record_from_dict(model.Step, short)) == data
    tensor = model.record_to_dict(step.tensors[0])
    assert model.record_from_dict(model.TensorState, tensor) == step.tensors[0]


def test_a_record_refuses_a_field_it_does_not_declare_or_lacks_a_required_one():
    from render_fixtures import detach_trace

    step = next(s for s in detach_trace().steps if s.tensors)
    data = model.record_to_dict(step)
    with pytest.raises(InvalidRecord, match=r"^\$: object contains unknown field later_field$"):
        model.record_from_dict(model.Step, {**data, "later_field": [1, 2]})
    tensor = model.record_to_dict(step.tensors[0])
    with pytest.raises(InvalidRecord, match=r"^\$: object missing required field name$"):
        model.record_from_dict(model.TensorState, {k: v for k, v in tensor.items() if k != "name"})


@pytest.mark.parametrize("change, message", [
    ({"line": "3"}, r"^\$.line: expected int or null, got str$"),
    ({"index": -1}, r"^\$.index: expected int >= 0$"),
    ({"status": "forged"}, r"^\$.status: invalid enum value 'forged'$"),
    ({"code": {"x": 1}}, r"^\$.code: expected str, got object$"),
    ({"ops_omitted": "9"}, r"^\$.ops_omitted: expected int, got str$"),
    ({"tensors": [{"name": 1}]}, r"^\$.tensors\[0\].name: expected str, got int$"),
])
def test_a_violation_names_the_field_in_one_line(change, message):
    data = {**model.record_to_dict(model.Step(index=1, code="x", line=2)), **change}
    with pytest.raises(InvalidRecord, match=message):
        model.record_from_dict(model.Step, data)


def test_exact_values_are_nested_tuples_checked_without_recursion():
    values = model.record_from_dict(model.Values, {"kind": "exact", "data": [[1, 2.5], [True, "nan"]]})
    assert values.data == ((1, 2.5), (True, "nan"))
    assert model.record_from_dict(model.Values, {"kind": "exact", "data": 3}).data == 3
    with pytest.raises(InvalidRecord, match=r"^\$.data: expected a number, flag, short string or array, got object"):
        model.record_from_dict(model.Values, {"kind": "exact", "data": [1, {}]})
    deep = 0
    for _ in range(600):
        deep = [deep]
    with pytest.raises(InvalidRecord, match=r"nested deeper than 512"):
        model.record_from_dict(model.Values, {"kind": "exact", "data": deep})


def test_a_summary_spells_a_non_finite_statistic():
    summary = model.Summary(numel=4, min=-float("inf"), max=1.0, mean=float("nan"))
    assert (summary.min, summary.max, summary.mean) == ("-inf", 1.0, "nan")
    assert model.record_from_dict(model.Summary, model.record_to_dict(summary)) == summary
