"""The console rendering, compared with gold files, and the options that shape it."""

from __future__ import annotations

import re

import pytest

from tensortrace.trace import evolve
from render_fixtures import (
    _PTR,
    assert_gold,
    detach_trace,
    tensor,
    troubled_trace,
    variant_traces,
)
from tensortrace.trace import Step, Trace
from tensortrace.render import RenderOptions, render
from tensortrace.render.console import resolve_width

ANSI = re.compile(r"\x1b\[")


def console(traces, **options) -> str:
    options.setdefault("width", 80)
    return render(list(traces), "console", RenderOptions(**options))


# --- gold -----------------------------------------------------------------------------


def test_detach_at_80_columns():
    assert_gold("console_detach_80.txt", console([detach_trace()]))


def test_trouble_at_80_columns():
    assert_gold("console_trouble_80.txt", console([troubled_trace()]))


def test_variants_side_by_side_at_80_columns():
    assert_gold("console_variants_80.txt", console(variant_traces()))


def test_only_changes_without_values():
    text = console([detach_trace()], steps=frozenset({2, 3, 4}), changes_only=True, values=False)
    assert_gold("console_detach_changes_only.txt", text)


def test_a_narrow_terminal_gets_one_block_per_tensor():
    assert_gold(
        "console_trouble_60.txt", console([troubled_trace()], width=60, steps=frozenset({3}))
    )


def test_a_wide_terminal_keeps_one_row_per_tensor():
    assert_gold(
        "console_trouble_120.txt", console([troubled_trace()], width=120, steps=frozenset({2, 3}))
    )


# --- what each part says -------------------------------------------------------------------


def test_every_line_fits_the_width():
    for width in (60, 80, 100):
        for traces in ([detach_trace()], [troubled_trace()], list(variant_traces())):
            text = console(traces, width=width)
            too_long = [line for line in text.splitlines() if len(line) > width]
            assert not too_long, (width, too_long)


def test_no_colour_means_no_escape_codes_and_marks_instead():
    text = console([detach_trace()])
    assert not ANSI.search(text)
    assert "[0., 0., 0.]*" in text
    assert text.count("* changed in this step") == 1


def test_colour_uses_escape_codes_and_no_marks():
    text = console([detach_trace()], color=True)
    assert ANSI.search(text)
    assert "[0., 0., 0.]*" not in text


def test_the_legend_is_said_once_for_several_scenarios():
    text = console([detach_trace(), troubled_trace()])
    assert text.count("changed in this step") == 1


def test_pointers_and_timings_are_never_shown():
    text = console([detach_trace(), troubled_trace(), *variant_traces()], width=200)
    for ptr in _PTR.values():
        assert str(ptr) not in text and hex(ptr) not in text
    assert "storage_ptr" not in text and "data_ptr" not in text


def test_a_change_through_shared_memory_is_called_out():
    text = console([detach_trace()], steps=frozenset({3}))
    assert "a changed (values and version): it shares S1 with b" in text


def test_a_declared_error_says_so_and_shows_its_explanation():
    text = console([detach_trace()], steps=frozenset({4}))
    assert "RuntimeError (line 25) — as declared" in text
    assert "✓ raised RuntimeError, as declared" in text
    assert "backward() of a tensor that is not part of a graph" in text
    assert "Fix: Call backward()" in text


def test_failed_expectations_show_their_values_or_error():
    text = console([troubled_trace()], steps=frozenset({3}))
    assert "✗ a[0, 0] == 1" in text
    assert "tensor(0.) == 1 is not true" in text
    assert "raised AttributeError: 'NoneType' object has no attribute 'sum'" in text
    # said once, not again as a failure of the step
    assert "expectation failed" not in text


def test_setup_is_shown_only_when_it_has_something_to_say():
    assert "setup" not in console([detach_trace()]).lower().split("scenarios/detach.yaml")[1]
    assert "setup · line 5" in console([troubled_trace()])


def test_the_end_of_a_run_summarises_it():
    assert (
        console([detach_trace()])
        .rstrip()
        .endswith("5 steps · 1 raised (1 as declared) · expectations: 6 passed, 0 failed · PASSED")
    )
    trouble = console([troubled_trace()])
    assert trouble.rstrip().endswith("FAILED")
    assert "the run stopped early: step 6 ran out of time" in trouble
    assert "note: `ghost` is named in show but never bound" in trouble
    assert "safe mode was off" in trouble


def test_steps_filter_keeps_only_those_steps():
    text = console([detach_trace()], steps=frozenset({2, 5}))
    assert "Step 2 · line 14" in text and "Step 5 · line 29" in text
    assert "Step 3" not in text and "Step 4" not in text


def test_changes_only_drops_unchanged_rows_and_says_when_nothing_changed():
    text = console([detach_trace()], steps=frozenset({4}), changes_only=True)
    assert "no changes" in text


def test_the_command_line_show_overrides_the_scenarios():
    trace = detach_trace()
    steps = tuple(evolve(s, shown=("a",)) for s in trace.steps)
    trace = evolve(trace, steps=steps)
    default = console([trace], steps=frozenset({3}))
    assert re.search(r"^\s+a\s", default, re.M) and not re.search(r"^\s+b\s", default, re.M)
    chosen = console([trace], steps=frozenset({3}), show=("b",))
    assert re.search(r"^\s+b\s", chosen, re.M) and not re.search(r"^\s+a\s", chosen, re.M)


def test_values_false_drops_values_and_grad_columns():
    text = console([detach_trace()], steps=frozenset({5}), values=False)
    header = next(line for line in text.splitlines() if line.strip().startswith("name")).split()
    assert "values" not in header and "grad" not in header
    assert "grad_fn" in header and "shape" in header  # shapes differ, and no values show them


def test_views_show_their_offset_and_dtypes_show_when_not_float32():
    text = console([troubled_trace()], steps=frozenset({2}), width=120)
    assert re.search(r"^\s+v\s.*S1\+1", text, re.M)
    assert "int64" in text and "dtype" in text
    assert "[100, 100] x∈[-3.8, 3.62]" in text


def test_the_same_object_under_two_names_is_said():
    a = tensor("a", (1.0,))
    b = evolve(tensor("b", (1.0,)), same_as="a")
    a1, b1 = tensor("a", (2.0,), version=1), evolve(tensor("b", (2.0,), version=1), same_as="a")
    trace = evolve(
        detach_trace(),
        setup=None,
        steps=(
            Step(index=1, code="a = torch.ones(1)\nb = a", line=1, tensors=(a, b)),
            Step(index=2, code="b.add_(1)", line=3, tensors=(a1, b1)),
        ),
    )
    text = console([trace], width=120)
    assert "b (new) (same object as a)" in text
    assert "a changed (values and version): b is the same object" in text


def test_the_width_is_100_when_output_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert resolve_width(None) == 100
    assert resolve_width(72) == 72


@pytest.mark.parametrize("width", [40, 60, 80])
def test_variants_stay_readable_when_narrow(width):
    text = " ".join(console(variant_traces(), width=width).split())
    assert "What differs between detach and data:" in text
    assert "step 5: raised RuntimeError in detach, ok in data" in text


# --- quiet past a dozen tensors ---------------------------------------------------------


def _many(count: int) -> "Trace":
    """``count`` tensors bound at step 1, then one of them written at steps 2 and 3."""
    from render_fixtures import ENV
    from tensortrace.trace import ScenarioInfo, Trace

    states = tuple(tensor(f"t{i}", (0.0, 0.0), storage=f"S{i + 1}") for i in range(count))
    second = tuple(evolve(s, version=1) if i == 5 else s for i, s in enumerate(states))
    third = tuple(evolve(s, version=2) if i == 5 else s for i, s in enumerate(second))
    steps = (
        Step(index=1, code="bind", line=1, tensors=states),
        Step(index=2, code="t5.add_(0)", line=2, tensors=second),
        Step(index=3, code="t5.add_(0)", line=3, tensors=third),
    )
    return Trace(scenario=ScenarioInfo(title="many"), environment=ENV, steps=steps)


def _rows(text: str) -> list:
    return re.findall(r"^  (t\d+)\s", text, re.M)


def test_past_a_dozen_tensors_a_step_draws_what_changed_and_names_the_rest():
    text = console([_many(20)], width=120)
    first, second, third = text.split("Step ")[1:]
    assert _rows(first) == [f"t{i}" for i in range(20)]  # the first table drawn: every row
    assert _rows(second) == ["t5"] and _rows(third) == ["t5"]
    assert "… 19 unchanged: t0, t1, t2, t3, t4, t6, t7" in second
    assert "t19" in second.split("unchanged:")[1]  # all nineteen fit in 120 columns
    assert "past 12 tensors" in text.split("Step ")[0] and "--all-rows" in text


def test_all_rows_draws_every_row_and_the_legend_says_nothing_of_the_rule():
    text = console([_many(20)], width=100, all_rows=True)
    for part in text.split("Step ")[1:]:
        assert _rows(part) == [f"t{i}" for i in range(20)]
    assert "unchanged:" not in text and "past 12 tensors" not in text


def test_a_dozen_tensors_or_fewer_are_all_drawn():
    text = console([_many(12)], width=100)
    assert _rows(text.split("Step ")[2]) == [f"t{i}" for i in range(12)]
    assert "unchanged:" not in text and "past 12 tensors" not in text


def test_the_unchanged_line_fits_the_width_and_ends_with_an_ellipsis():
    text = console([_many(40)], width=60)
    line = next(li for li in text.splitlines() if "unchanged:" in li)
    assert line.startswith("  … 39 unchanged: t0, t1,") and line.endswith(" …")
    assert len(line) <= 60


def test_the_first_step_drawn_keeps_every_row_even_when_later():
    text = console([_many(20)], width=100, steps=frozenset({2, 3}))
    second, third = text.split("Step ")[1:]
    assert len(_rows(second)) == 20 and _rows(third) == ["t5"]
