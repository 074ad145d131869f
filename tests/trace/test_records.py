"""The trace's records: frozen, typed msgspec Structs, declared once in ``tensortrace.trace``."""

from __future__ import annotations

import importlib
import gc

import msgspec
import pytest

from tensortrace.scenario.library import bundled_path
from tensortrace.scenario import load_scenario
from tensortrace.trace import RECORDS, InvalidRecord
from tensortrace.record.tracer import trace_variants

records = importlib.import_module(
    "tensortrace.trace"
)  # the package; tensortrace.trace is the function


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
    names = (
        "detach-vs-data",
        "saved-tensors",
        "backward-twice",
        "gradient-flow",
        "inplace-error-message",
    )
    traces = [t for name in names for t in trace_variants(load_scenario(bundled_path(name)))]
    found = []
    for t in traces:
        _records(t, found)
    return found


def test_every_kind_of_record_is_covered_and_the_package_exports_each(recorded):
    kinds = {type(r) for r in recorded}
    assert len(RECORDS) >= 20 and len(kinds) >= 12
    assert all(getattr(records, cls.__name__) is cls for cls in RECORDS)


def test_records_compare_hash_and_refuse_changes(recorded):
    for r in recorded[:3000]:
        assert r == records.evolve(r) and not (r != records.evolve(r))
        assert hash(r) == hash(records.evolve(r))
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
    step = next(r for r in recorded if isinstance(r, records.Step))
    other = records.evolve(step, status="raised" if step.status != "raised" else "ok")
    assert step != other and records.evolve(other, status=step.status) == step


def test_records_are_built_positionally_as_before():
    bump = records.VersionBump("x", 0, 1)
    assert (bump.name, bump.from_, bump.to) == ("x", 0, 1)
    assert records.record_to_dict(bump) == {"name": "x", "from": 0, "to": 1}
    assert records.record_to_dict(records.OpTensors(in_=("a", None))) == {
        "in": ["a", None],
        "out": [],
    }


def test_a_record_loads_alike_with_every_field_or_a_missing_default():
    from render_fixtures import detach_trace

    step = records.evolve(
        next(s for s in detach_trace().steps if s.tensors and s.expectations), note=None
    )
    data = records.record_to_dict(step)
    assert records.record_from_dict(records.Step, data) == step
    short = {
        k: v for k, v in data.items() if k != "note"
    }  # a default fills a field an older writer left out
    assert records.record_to_dict(records.record_from_dict(records.Step, short)) == data
    tensor = records.record_to_dict(step.tensors[0])
    assert records.record_from_dict(records.TensorState, tensor) == step.tensors[0]


def test_a_record_refuses_a_field_it_does_not_declare_or_lacks_a_required_one():
    from render_fixtures import detach_trace

    step = next(s for s in detach_trace().steps if s.tensors)
    data = records.record_to_dict(step)
    with pytest.raises(InvalidRecord, match=r"^\$: object contains unknown field later_field$"):
        records.record_from_dict(records.Step, {**data, "later_field": [1, 2]})
    tensor = records.record_to_dict(step.tensors[0])
    with pytest.raises(InvalidRecord, match=r"^\$: object missing required field name$"):
        records.record_from_dict(
            records.TensorState, {k: v for k, v in tensor.items() if k != "name"}
        )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"line": "3"}, r"^\$.line: expected int or null, got str$"),
        ({"index": -1}, r"^\$.index: expected int >= 0$"),
        ({"status": "forged"}, r"^\$.status: invalid enum value 'forged'$"),
        ({"code": {"x": 1}}, r"^\$.code: expected str, got object$"),
        ({"ops_omitted": "9"}, r"^\$.ops_omitted: expected int, got str$"),
        ({"tensors": [{"name": 1}]}, r"^\$.tensors\[0\].name: expected str, got int$"),
    ],
)
def test_a_violation_names_the_field_in_one_line(change, message):
    data = {**records.record_to_dict(records.Step(index=1, code="x", line=2)), **change}
    with pytest.raises(InvalidRecord, match=message):
        records.record_from_dict(records.Step, data)


def test_exact_values_are_nested_tuples_checked_without_recursion():
    values = records.record_from_dict(
        records.Values, {"kind": "exact", "data": [[1, 2.5], [True, "nan"]]}
    )
    assert values.data == ((1, 2.5), (True, "nan"))
    assert records.record_from_dict(records.Values, {"kind": "exact", "data": 3}).data == 3
    with pytest.raises(
        InvalidRecord, match=r"^\$.data: expected a number, flag, short string or array, got object"
    ):
        records.record_from_dict(records.Values, {"kind": "exact", "data": [1, {}]})
    deep = 0
    for _ in range(600):
        deep = [deep]
    with pytest.raises(InvalidRecord, match=r"nested deeper than 512"):
        records.record_from_dict(records.Values, {"kind": "exact", "data": deep})


def test_a_summary_spells_a_non_finite_statistic():
    summary = records.Summary(numel=4, min=-float("inf"), max=1.0, mean=float("nan"))
    assert (summary.min, summary.max, summary.mean) == ("-inf", 1.0, "nan")
    assert records.record_from_dict(records.Summary, records.record_to_dict(summary)) == summary
