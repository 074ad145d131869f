"""The trace's records behave as ``dataclass(frozen=True)`` would make them: repr, equality, hash, freezing."""

from __future__ import annotations

import dataclasses

import pytest

from tensortrace import model
from tensortrace.library import bundled_path
from tensortrace.scenario import load_scenario
from tensortrace.tracer import trace_variants


def _reference(cls: type) -> type:
    """The class as ``dataclass(frozen=True)`` writes it, from the same annotations and defaults."""
    namespace = {"__annotations__": dict(cls.__annotations__), "__qualname__": cls.__qualname__, "__module__": cls.__module__}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            namespace[f.name] = f.default
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), namespace))


def _records(value, into):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        into.append(value)
        for f in dataclasses.fields(value):
            _records(getattr(value, f.name), into)
    elif isinstance(value, tuple):
        for item in value:
            _records(item, into)
    return into


RECORDS = [getattr(model, name) for name in dir(model)
           if isinstance(getattr(model, name), type) and getattr(getattr(model, name), "__module__", None) == model.__name__
           and dataclasses.is_dataclass(getattr(model, name))]


@pytest.fixture(scope="module")
def recorded():
    names = ("detach-vs-data", "saved-tensors", "backward-twice", "gradient-flow", "inplace-error-message")
    traces = [t for name in names for t in trace_variants(load_scenario(bundled_path(name)))]
    found = []
    for t in traces:
        _records(t, found)
    return found


def test_every_kind_of_record_is_covered(recorded):
    kinds = {type(r) for r in recorded}
    assert len(RECORDS) >= 20 and len(kinds) >= 12


def test_records_print_compare_and_hash_as_frozen_dataclasses(recorded):
    references = {cls: _reference(cls) for cls in RECORDS}
    for r in recorded[:3000]:
        values = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
        ref = references[type(r)](**values)
        assert repr(r) == repr(ref)
        assert r == dataclasses.replace(r) and not (r != dataclasses.replace(r))
        assert (r == ref) is False and r.__eq__(ref) is NotImplemented  # another class, as with dataclass
        try:
            expected = hash(ref)
        except TypeError:  # a field holds something unhashable (a list in Any): so must ours
            with pytest.raises(TypeError):
                hash(r)
        else:
            assert hash(r) == expected
        first = dataclasses.fields(r)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{first}'"):
            setattr(r, first, None)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{first}'"):
            delattr(r, first)
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.not_a_field = 1


def test_a_changed_field_makes_a_record_unequal(recorded):
    step = next(r for r in recorded if isinstance(r, model.Step))
    other = dataclasses.replace(step, status="error" if step.status != "error" else "ok")
    assert step != other and dataclasses.replace(other, status=step.status) == step
    assert hash(dataclasses.replace(step)) == hash(step)


def test_a_record_holding_itself_prints_without_recursing():
    note = model.VersionBump(name="x", from_=0, to=1)
    loop = model.VersionBump(name=None, from_=0, to=1)
    loop.__dict__["name"] = loop  # only a test can make one: records are frozen
    assert repr(loop) == "VersionBump(name=..., from_=0, to=1)"
    assert repr(note) == "VersionBump(name='x', from_=0, to=1)"


def test_a_record_converts_leaving_fields_in_place_and_loads_with_fields_given():
    from render_fixtures import detach_trace

    step = next(s for s in detach_trace().steps if s.tensors and s.expectations)
    whole = model.record_to_dict(step)
    left = model.record_to_dict(step, leaving=("tensors", "graphs"))
    assert list(left) == list(whole)  # same keys, same order
    assert left["tensors"] is None and left["graphs"] is None
    assert {k: v for k, v in left.items() if k not in ("tensors", "graphs")} == {
        k: v for k, v in whole.items() if k not in ("tensors", "graphs")}
    assert model.record_to_dict(step) == whole  # the plain encoder is unchanged by the other
    mine = step.tensors[:1]
    loaded = model.record_from_dict(model.Step, whole, given={"tensors": mine, "graphs": ()})
    assert loaded.tensors is mine and loaded.graphs == ()
    assert model.record_to_dict(loaded, leaving=("tensors", "graphs")) == left
    general = model.record_from_dict(model.Step, {**whole, "later_field": 1}, given={"tensors": mine, "graphs": ()})
    assert general == loaded  # an object holding exactly the fields (the generated path) loads as the general path does
    reordered = model.record_from_dict(model.Step, whole, given={"graphs": (), "tensors": mine})
    assert reordered == loaded and reordered.tensors is mine
    with pytest.raises(TypeError):  # a name that is no field is refused on either path
        model.record_from_dict(model.Step, whole, given={"tensors": mine, "nope": 1})


def test_a_record_loads_alike_with_every_field_an_unknown_one_or_a_missing_default():
    from render_fixtures import detach_trace

    step = dataclasses.replace(next(s for s in detach_trace().steps if s.tensors and s.expectations), note=None)
    data = model.record_to_dict(step)
    whole = model.record_from_dict(model.Step, data)  # every field: the generated path
    assert model.record_to_dict(whole) == data
    extra = model.record_from_dict(model.Step, {**data, "later_field": [1, 2]})  # a newer writer's field is ignored
    assert model.record_to_dict(extra) == data
    short = {k: v for k, v in data.items() if k != "note"}  # a default fills a field an older writer left out
    assert model.record_to_dict(model.record_from_dict(model.Step, short)) == {**data, "note": None} == data
    tensor = model.record_to_dict(step.tensors[0])
    assert model.record_to_dict(model.record_from_dict(model.TensorState, tensor)) == tensor
    with pytest.raises(TypeError):
        model.record_from_dict(model.TensorState, {k: v for k, v in tensor.items() if k != "name"})
