"""Which columns a table has, decided once per run, and a legend that explains every mark."""

from __future__ import annotations

import re

from tensortrace.trace import evolve
from render_fixtures import ENV, detach_trace, tensor, troubled_trace, variant_traces
from tensortrace.trace import ScenarioInfo, Step, Trace
from tensortrace.render import RenderOptions, render


def console(traces, **options) -> str:
    options.setdefault("width", 120)
    return render(list(traces), "console", RenderOptions(**options))


def headers(text: str) -> list:
    return [line.split() for line in text.splitlines() if line.strip().startswith("name ")]


def retain_grad_trace() -> Trace:
    """``h = x * 2``, then ``h.retain_grad()``, then a transpose that is not contiguous."""
    x = tensor("x", (1.0, 2.0), requires_grad=True)
    h = tensor(
        "h", (2.0, 4.0), storage="S2", requires_grad=True, is_leaf=False, grad_fn="MulBackward0"
    )
    kept = evolve(h, retains_grad=True)
    m = tensor("m", ((1.0, 2.0), (3.0, 4.0)), storage="S3")
    mt = evolve(
        tensor("mt", ((1.0, 3.0), (2.0, 4.0)), storage="S3", is_view=True, base="m"), stride=(1, 2)
    )
    return Trace(
        scenario=ScenarioInfo(title="retain_grad and a transpose"),
        environment=ENV,
        steps=(
            Step(
                index=1,
                code="x = torch.tensor([1., 2.], requires_grad=True)\nh = x * 2",
                line=1,
                tensors=(x, h),
            ),
            Step(index=2, code="h.retain_grad()", line=3, tensors=(x, kept)),
            Step(
                index=3,
                code="m = torch.tensor([[1., 2.], [3., 4.]])\nmt = m.t()",
                line=4,
                tensors=(x, kept, m, mt),
            ),
        ),
    )


def test_retain_grad_gets_a_column_and_is_marked_as_a_change():
    text = console([retain_grad_trace()], steps=frozenset({2}))
    assert "retains" in headers(text)[0]
    row = next(line for line in text.splitlines() if line.strip().startswith("h "))
    assert "True*" in row


def test_stride_and_contiguity_show_where_a_view_is_not_contiguous():
    text = console([retain_grad_trace()], steps=frozenset({3}))
    header = headers(text)[0]
    assert "stride" in header and "contig" in header
    row = next(line for line in text.splitlines() if line.strip().startswith("mt "))
    assert "(1, 2)" in row and "False" in row
    row = next(line for line in text.splitlines() if line.strip().startswith("m "))
    assert "(2, 1)" in row


def test_a_view_shows_the_stride_without_contiguity_when_all_are_contiguous():
    header = headers(console([troubled_trace()], steps=frozenset({3})))[0]
    assert "stride" in header and "contig" not in header


def test_plain_tensors_get_no_stride_column():
    header = headers(console([detach_trace()]))[0]
    assert "stride" not in header and "retains" not in header


def test_narrow_cards_and_variants_say_the_new_facts_too():
    text = console([retain_grad_trace()], width=40, steps=frozenset({3}))
    assert "stride (1, 2)" in " ".join(text.split())
    assert "contiguous False" in " ".join(text.split())
    assert "retains_grad True" in " ".join(text.split())
    runs = [
        evolve(
            retain_grad_trace(),
            scenario=evolve(retain_grad_trace().scenario, source="s.yaml", variant=v),
        )
        for v in ("one", "two")
    ]
    text = " ".join(console(runs, width=100).split())
    assert "retains_grad True" in text and "stride (1, 2)" in text


def test_the_columns_stay_the_same_in_every_step_of_a_run():
    for options in ({"values": False}, {"values": True}, {"values": False, "changes_only": True}):
        for trace in (detach_trace(), troubled_trace(), retain_grad_trace()):
            found = headers(console([trace], **options))
            assert found and all(h == found[0] for h in found), (options, found)


def test_without_values_the_shape_column_is_there_from_the_first_step():
    text = console([detach_trace()], values=False)
    assert all("shape" in h for h in headers(text))


def test_the_markdown_columns_stay_the_same_too():
    text = render([detach_trace()], "markdown", RenderOptions(values=False))
    found = [line for line in text.splitlines() if line.startswith("| name ")]
    assert len(found) > 1 and len(set(found)) == 1 and "shape" in found[0]


# --- the legend -----------------------------------------------------------------------------


def legend_of(text: str) -> str:
    start = text.index("┛") + 1
    return " ".join(text[start : text.index("Step ", start)].split())


def test_the_legend_explains_an_offset_when_one_is_shown():
    assert "S1+2 = a view 2 elements into S1" in legend_of(console([troubled_trace()]))
    assert "S1+" not in legend_of(console([detach_trace()]))


def test_the_legend_explains_the_dash_when_one_is_shown():
    trace = detach_trace()
    unknown = tuple(
        evolve(s, tensors=tuple(evolve(t, version=None) for t in s.tensors)) for s in trace.steps
    )
    text = console([evolve(trace, steps=unknown)])
    assert re.search(r"^\s+a\s.*—", text, re.M)
    assert "— = not available" in legend_of(text)
    assert "—" not in legend_of(console([detach_trace()]))
    page = render([evolve(trace, steps=unknown)], "markdown", RenderOptions())
    assert "— means the fact is not available" in page


def test_the_variants_legend_explains_a_name_one_variant_never_bound():
    one, two = variant_traces()
    two = evolve(
        two,
        steps=tuple(
            evolve(s, tensors=tuple(t for t in s.tensors if t.name != "z")) for s in two.steps
        ),
    )
    text = console([one, two])
    assert "— = not available or not bound in that variant" in legend_of(text)
