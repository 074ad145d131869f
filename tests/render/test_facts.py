"""Derived facts: what changed, what shares memory, why it changed, what differs."""

from __future__ import annotations


import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensortrace.trace import evolve
from render_fixtures import detach_trace, exact, tensor, troubled_trace, variant_traces
from tensortrace.trace import ExpectationResult, Step, Summary, Values
from tensortrace.render.compare import (
    differing_fields,
    group_traces,
    merged_expectations,
    variant_differences,
)
from tensortrace.render.facts import (
    FIELDS,
    aliasing_notes,
    all_steps,
    changed_fields,
    is_contiguous,
    mentioned_names,
    root_name,
    sharing_partners,
    shown_names,
    storage_groups,
    with_previous,
)
from tensortrace.render.text import (
    format_data,
    format_number,
    format_storage,
    format_values,
    grad_norm,
    one_line,
    outcome,
)

# --- changed_fields ---------------------------------------------------------------


def test_a_new_name_counts_as_every_field_changed():
    assert changed_fields(None, tensor("a", (1.0,))) == frozenset(FIELDS)


def test_an_identical_snapshot_has_no_changes():
    a = tensor("a", (1.0, 2.0), requires_grad=True)
    assert changed_fields(a, evolve(a)) == frozenset()


def test_an_in_place_write_changes_values_and_version_only():
    before = tensor("a", (1.0, 2.0))
    after = tensor("a", (0.0, 0.0), version=1)
    assert changed_fields(before, after) == {"values", "version"}


def test_moving_to_another_offset_is_a_storage_change():
    before = tensor("v", (1.0,), offset=0, is_view=True)
    after = tensor("v", (1.0,), offset=1, is_view=True)
    assert changed_fields(before, after) == {"storage"}


def test_a_grad_appearing_is_a_grad_change():
    before = tensor("a", (1.0,), requires_grad=True)
    after = tensor("a", (1.0,), requires_grad=True, grad=(2.0,))
    assert changed_fields(before, after) == {"grad"}


def test_pointers_and_timings_never_count_as_changes():
    before = tensor("a", (1.0,))
    after = evolve(before, storage_ptr=1, data_ptr=2)
    assert changed_fields(before, after) == frozenset()


def test_a_new_stride_or_a_kept_grad_counts_as_a_change():
    before = tensor("a", ((1.0, 2.0), (3.0, 4.0)))
    assert changed_fields(before, evolve(before, stride=(1, 2))) == frozenset(
        {"stride", "contiguous"}
    )
    assert changed_fields(before, evolve(before, retains_grad=True)) == frozenset({"retains_grad"})


@pytest.mark.parametrize(
    "shape, stride, contiguous",
    [
        ((2, 3), (3, 1), True),
        ((3, 2), (1, 3), False),  # a.t()
        ((2,), (2,), False),  # a[::2]
        ((1, 3), (99, 1), True),  # a size-1 dimension may have any stride
        ((0, 3), (7, 7), True),  # no elements
        ((), (), True),
        ((3, 3), (), None),  # a sparse tensor has no strides
    ],
)
def test_contiguity_is_derived_from_shape_and_stride(shape, stride, contiguous):
    state = evolve(tensor("a", shape=shape, values=exact(0.0)), stride=stride)
    assert is_contiguous(state) is contiguous


# --- storage groups and aliasing -------------------------------------------------------


def test_storage_groups_list_every_name_on_each_storage_in_order():
    step = detach_trace().steps[4]
    assert storage_groups(step) == {"S1": ("a", "b"), "S2": ("out",)}
    assert sharing_partners(step, "a") == ("b",)
    assert sharing_partners(step, "out") == ()
    assert sharing_partners(step, "nobody") == ()


def test_a_change_through_a_shared_storage_is_noted():
    trace = detach_trace()
    notes = aliasing_notes(trace.steps[1], trace.steps[2])  # b.zero_()
    assert [n.describe() for n in notes] == ["a changed (values and version): it shares S1 with b"]


def test_a_change_to_a_name_the_code_mentions_is_not_an_aliasing_note():
    prev = Step(index=1, code="", line=None, tensors=(tensor("a", (1.0,)), tensor("b", (1.0,))))
    step = Step(
        index=2,
        code="a.zero_()\nb.add_(0)",
        line=None,
        tensors=(tensor("a", (0.0,), version=1), tensor("b", (0.0,), version=2)),
    )
    assert aliasing_notes(prev, step) == ()


def test_a_change_with_no_named_partner_is_not_explained_by_aliasing():
    prev = Step(index=1, code="", line=None, tensors=(tensor("a", (1.0,)), tensor("b", (1.0,))))
    step = Step(
        index=2,
        code="helper()",
        line=None,
        tensors=(tensor("a", (0.0,), version=1), tensor("b", (0.0,), version=1)),
    )
    assert aliasing_notes(prev, step) == ()


def test_a_version_bump_alone_is_noted():
    prev = Step(index=1, code="", line=None, tensors=(tensor("a", (1.0,)), tensor("b", (1.0,))))
    step = Step(
        index=2,
        code="b.mul_(1)",
        line=None,
        tensors=(tensor("a", (1.0,), version=1), tensor("b", (1.0,), version=1)),
    )
    (note,) = aliasing_notes(prev, step)
    assert (note.name, note.fields, note.via) == ("a", ("version",), ("b",))


def test_expanded_names_are_mentioned_through_their_root():
    assert root_name("lin.weight") == "lin"
    assert root_name("xs[0]") == "xs"
    assert root_name("d['k']") == "d"
    prev = Step(
        index=1, code="", line=None, tensors=(tensor("lin.weight", (1.0,)), tensor("w", (1.0,)))
    )
    step = Step(
        index=2,
        code="with torch.no_grad(): lin.weight.zero_()",
        line=None,
        tensors=(tensor("lin.weight", (0.0,), version=1), tensor("w", (0.0,), version=1)),
    )
    (note,) = aliasing_notes(prev, step)
    assert note.name == "w" and note.via == ("lin.weight",)


def test_mentioned_names_is_a_plain_identifier_scan_without_keywords():
    assert mentioned_names("out = (a * 2).sum() if x else None") == {"out", "a", "sum", "x"}
    assert "if" not in mentioned_names("y if x else z")


# --- which names, which steps -----------------------------------------------------------


def test_command_line_names_beat_the_scenarios_which_beat_all():
    step = Step(
        index=1,
        code="",
        line=None,
        shown=("b",),
        tensors=(tensor("a", (1.0,)), tensor("b", (1.0,)), tensor("c", (1.0,))),
    )
    assert shown_names(step) == ("b",)
    assert shown_names(step, ("c", "a")) == ("c", "a")
    assert shown_names(evolve(step, shown=None)) == ("a", "b", "c")


def test_names_not_bound_at_the_step_are_left_out():
    step = Step(index=1, code="", line=None, tensors=(tensor("a", (1.0,)),))
    assert shown_names(step, ("ghost", "a", "a")) == ("a",)


def test_setup_comes_first_and_precedes_step_one():
    trace = detach_trace()
    assert [s.index for s in all_steps(trace)] == [0, 1, 2, 3, 4, 5]
    pairs = list(with_previous(trace))
    assert pairs[0][0] is None and pairs[1][0] is trace.setup


# --- variants ------------------------------------------------------------------------------


def test_variants_of_one_scenario_are_grouped_and_others_kept_apart():
    detach, data = variant_traces()
    other = detach_trace()
    groups = group_traces([detach, other, data])
    assert groups == [[detach, data], [other]]


def test_variants_compare_who_shares_memory_not_the_label():
    detach, data = variant_traces()
    relabelled = evolve(
        data,
        steps=tuple(
            evolve(
                s,
                tensors=tuple(
                    evolve(t, storage={"S1": "S7", "S2": "S8"}[t.storage]) for t in s.tensors
                ),
            )
            for s in data.steps
        ),
    )
    steps = [detach.steps[2], relabelled.steps[2]]
    assert differing_fields(steps, "z") == frozenset()


def test_the_variant_summary_says_what_differs_once():
    assert variant_differences(variant_traces()) == (
        "step 4, y: storage shared with z in both; version 1 in detach, 0 in data",
        "step 5: raised RuntimeError in detach, ok in data",
        "step 5, x: grad None in detach, [0., 0., 0.] in data",
    )


def test_identical_variants_have_nothing_to_say():
    detach, _ = variant_traces()
    scenario = evolve(detach.scenario, variant="twin")
    twin = evolve(detach, scenario=scenario)
    assert variant_differences([detach, twin]) == ()


# --- spelling -----------------------------------------------------------------------------------


def test_numbers_are_spelled_like_print_tensor():
    assert [format_number(x) for x in (1.0, -0.0, 0.7310586, 1e-5, 3, True, "nan", None)] == [
        "1.",
        "-0.",
        "0.7311",
        "1e-05",
        "3",
        "True",
        "nan",
        "None",
    ]
    assert format_number(float("inf")) == "inf"


def test_nested_values_keep_one_row_per_line_and_cut_long_rows():
    assert format_data(((1.0, 2.0), (3.0, 4.0))) == "[[1., 2.],\n [3., 4.]]"
    assert format_data(tuple(float(i) for i in range(10))) == "[0., 1., 2., …, 7., 8., 9.]"
    assert format_data(()) == "[]"
    assert format_data(5.0) == "5."


def test_a_summary_says_size_shape_and_statistics():
    values = Values(
        "summary",
        summary=Summary(
            numel=1000, min=-1.0, max=2.5, mean=0.5, std=None, nan_count=3, head=(1.0, 2.0)
        ),
    )
    assert (
        format_values(values, (10, 100), full=True)
        == "[1., 2., …]\n1,000 values, shape (10, 100)\nmin -1., max 2.5\nmean 0.5\n3 nan"
    )
    assert format_values(values, (10, 100)) == "[10, 100] x∈[-1., 2.5] μ=0.5 nan=3 [1., 2., …]"
    assert format_values(values) == "n=1,000 x∈[-1., 2.5] μ=0.5 nan=3 [1., 2., …]"


def test_past_a_few_elements_values_are_one_line_of_statistics_computed_from_the_data():
    data = tuple(tuple(float(4 * i + j) for j in range(4)) for i in range(3))  # 0 .. 11
    line = format_values(Values("exact", data=data))
    # mean 5.5; sample standard deviation of 0..11: sqrt(13) = 3.606
    assert line == "[3, 4] x∈[0., 11.] μ=5.5 σ=3.61 [0., 1., 2., …]"
    assert format_values(Values("exact", data=data), full=True).startswith("[[0., 1., 2., 3.],")
    few = Values("exact", data=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0))
    assert format_values(few) == "[1., 2., 3., 4., 5., 6.]"
    mixed = Values("exact", data=(1.0, "nan", "inf", 3.0, 5.0, 7.0, 9.0))
    assert format_values(mixed) == "[7] x∈[1., 9.] μ=5. σ=3.16 nan=1 inf=1 [1., nan, inf, …]"


def test_a_grad_norm_is_read_from_exact_values_or_a_summary():
    assert grad_norm(Values("exact", data=((3.0, 4.0),))) == "5."
    # n=4, mean 1, std 0: the norm of four ones is 2
    summary = Summary(numel=4, min=1.0, max=1.0, mean=1.0, std=0.0)
    assert grad_norm(Values("summary", summary=summary)) == "2."
    assert grad_norm(None) == "None"
    assert grad_norm(Values("exact", data=(1.0, "nan"))) == "nan"
    assert format_values(Values("unavailable", reason="meta tensor")) == "(meta tensor)"
    assert format_values(None) == "None"


def test_a_view_shows_its_offset():
    assert format_storage(tensor("v", (1.0,), offset=1, is_view=True)) == "S1+1"
    assert format_storage(tensor("v", (1.0,), offset=0, is_view=True)) == "S1+0"
    assert format_storage(tensor("a", (1.0,))) == "S1"
    assert format_storage(tensor("e", (), storage=None)) == "—"


def test_outcomes_in_a_few_words():
    trace = troubled_trace()
    assert [outcome(s) for s in trace.steps] == ["ok"] * 4 + ["raised RuntimeError", "timed out"]
    assert outcome(None) == "not run"


numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans())
nested = st.recursive(numbers, lambda inner: st.lists(inner, max_size=8).map(tuple), max_leaves=60)


@given(nested)
def test_any_nested_data_formats_without_error(data):
    assert isinstance(format_data(data), str)


@given(st.text(max_size=200), st.integers(min_value=2, max_value=80))
def test_one_line_is_one_line_within_the_limit(text, limit):
    line = one_line(text, limit)
    assert "\n" not in line and len(line) <= limit


def test_a_second_name_for_the_same_object_is_said_as_such():
    a, b = tensor("a", (1.0,)), evolve(tensor("b", (1.0,)), same_as="a")
    a1 = tensor("a", (2.0,), version=1)
    b1 = evolve(tensor("b", (2.0,), version=1), same_as="a")
    prev = Step(index=1, code="a = torch.ones(1)\nb = a", line=None, tensors=(a, b))
    step = Step(index=2, code="b.add_(1)", line=None, tensors=(a1, b1))
    (note,) = aliasing_notes(prev, step)
    assert note.describe() == "a changed (values and version): b is the same object"


def test_expectations_that_held_everywhere_are_said_once():
    detach, data = variant_traces()
    both = [
        evolve(detach.steps[1], expectations=(ok_result("x"), ok_result("y"))),
        evolve(data.steps[1], expectations=(ok_result("x"), bad_result("y"))),
    ]
    merged = merged_expectations(both, ["detach", "data"])
    assert [(label, r.expr, r.passed) for label, r in merged] == [
        ("", "x", True),
        ("detach", "y", True),
        ("data", "y", False),
    ]


def ok_result(expr):
    return ExpectationResult(expr=expr, passed=True)


def bad_result(expr):
    return ExpectationResult(expr=expr, passed=False)


def test_a_write_made_inside_a_call_is_noted_with_the_call_that_made_it():
    """opt.step() names neither the weight nor the detached snapshot; the recorded call wrote S1."""
    from tensortrace.scenario.library import bundled_path
    from tensortrace.scenario import load_scenario
    from tensortrace.record.tracer import trace

    result = trace(load_scenario(bundled_path("optimizer-step")), safe=False)
    step = next(s for s in result.steps if s.code.strip() == "opt.step()")
    prev = result.steps[result.steps.index(step) - 1]
    (note,) = [n for n in aliasing_notes(prev, step) if n.name == "snap"]
    storage = next(t.storage for t in step.tensors if t.name == "lin.weight")
    assert (
        note.describe()
        == f"snap changed (values and version): it shares {storage} with lin.weight (written by"
        " Tensor.add_)"
    )
