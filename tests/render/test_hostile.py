"""Every renderer, fed traces whose every string and every number is hostile.

The records are built directly (as a saved trace or a confined child could
make them say anything), so a string stands where an integer belongs (a step's
``index``, a ``line``, a count) as well as in every text field. Whatever they
hold, no renderer raises, and:

- the HTML page has no script but its own two blocks, no event handler, no
  link out and no element the page does not write itself (``check_html``);
- DOT and Mermaid are only the statements the renderer writes, with data only
  inside quoted labels (``check_dot``, ``check_mermaid``);
- the console writes no escape sequence but its own colours, and Markdown no
  raw control or bidi character and no HTML from data (``check_console``,
  ``check_markdown``).
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortrace.render import FORMATS, RenderOptions, render

from hostile_traces import (
    ALL,
    CHECKS,
    HOSTILE,
    NOT_INTS,
    OWN_STYLING,
    SCRIPT,
    TAG,
    URL,
    check_html,
    hostile_traces,
    mutate,
    strings_for_ints,
    wrapped,
)
from render_fixtures import (
    chain_graph,
    detach_trace,
    graph_trace,
    recorded_traces,
    shared_graph,
    troubled_trace,
    variant_traces,
    wide_graph,
)

BASES = {
    "detach": lambda: [detach_trace()],
    "troubled": lambda: [troubled_trace()],
    "variants": lambda: list(variant_traces()),
    "graphs": lambda: [graph_trace(shared_graph(), chain_graph(30), wide_graph(4))],
    "recorded": lambda: recorded_traces("detach-vs-data"),
}


def rendered(traces, fmt: str, color: bool = True) -> str:
    return render(traces, fmt, RenderOptions(width=120, color=color))


def check(fmt: str, text: str) -> None:
    if fmt in CHECKS:
        CHECKS[fmt](text)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("base", sorted(BASES))
def test_every_string_and_number_hostile_renders_inert(base, fmt):
    traces = hostile_traces(BASES[base](), ALL, SCRIPT)
    text = rendered(traces, fmt)
    check(fmt, text)
    if fmt == "console":
        assert OWN_STYLING.search(text)  # in colour: the check leaves the console's own styling
        check(fmt, rendered(traces, fmt, color=False))


@pytest.mark.parametrize("base", ["variants", "graphs"])
def test_the_notebook_fragment_of_a_hostile_trace_is_text(base):
    from tensortrace.render.export import render_html_fragment

    fragment = render_html_fragment(
        hostile_traces(BASES[base](), ALL, SCRIPT), RenderOptions(width=120)
    )
    check_html(fragment, fragment=True)
    assert "&lt;/script&gt;" in fragment and "<a " not in fragment


@pytest.mark.parametrize("ints", NOT_INTS, ids=lambda v: type(v).__name__ + str(v)[:12])
def test_any_value_where_a_number_belongs_renders_in_every_format(ints):
    traces = hostile_traces(BASES["detach"]() + BASES["graphs"](), "\u202e", ints)
    for fmt in FORMATS:
        check(fmt, rendered(traces, fmt))


def test_a_line_or_index_that_holds_markup_never_reaches_an_attribute():
    payloads = (SCRIPT, TAG, URL)
    traces = [
        mutate(t, wrapped(payload), strings_for_ints(payload))
        for t, payload in zip([detach_trace()] * 3, payloads)
    ]
    page = rendered(traces, "html")
    check_html(page)
    ids = re.findall(r' id="([^"]*)"', page)
    assert ids and all(re.fullmatch(r"[a-z0-9-]+", i) for i in ids), ids
    assert "data-line=" not in page  # a line that is not a number is not said at all
    assert all(re.fullmatch(r"#[a-z0-9-]+", h) for h in re.findall(r' href="([^"]*)"', page))
    assert "<script>alert" not in page and "<img" not in page and "onerror=alert(1)>" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text


def test_an_ordinary_trace_keeps_its_ids_and_line_numbers():
    page = rendered([detach_trace()], "html")
    assert 'id="step-2"' in page and 'href="#step-2"' in page and 'data-line="14"' in page
    assert 'marker id="tt-arrow-0-5-0"' in page


def test_diagram_names_are_counters_never_trace_text():
    traces = hostile_traces([graph_trace(shared_graph())], ALL, '"]; x [URL="javascript:alert(1)"]')
    for fmt in ("dot", "mermaid"):
        text = rendered(traces, fmt)
        check(fmt, text)
        assert "t1s1g1" in text  # the one step, counted, not its index
    mermaid = rendered(traces, "mermaid")
    assert "\nclick" not in mermaid and "#quot;" in mermaid and "#96;" in mermaid


# --- the same, with hypothesis choosing what is hostile and where ---------------------------

_HOSTILE_CHARS = (
    "\x1b\x07\x00\x85\x9b\u202e\u2066\u2069\u200f\u061c\u2028\u2029\"'`\\<>&#;|[]()*_%{}\n\r\t"
)
_texts = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.sampled_from(_HOSTILE_CHARS) | st.characters(), max_size=30),
    st.builds(lambda s, n: s * n, st.sampled_from(HOSTILE), st.integers(20, 120)),  # very long
)
_not_ints = st.one_of(
    st.sampled_from(NOT_INTS),
    st.none(),
    st.integers(-(10**40), 10**40),
    st.text(max_size=12),
    st.floats(allow_nan=True),
)
_INT_FIELDS = (
    "index",
    "line",
    "storage_offset",
    "version",
    "saved_version",
    "changed_at_step",
    "ops_omitted",
    "numel",
    "nan_count",
    "inf_count",
    "omitted",
    "storage_nbytes",
    "parent",
)


@st.composite
def _hostile(draw):
    base = draw(st.sampled_from(sorted(BASES)))
    before, after = draw(_texts), draw(_texts)
    fields = draw(st.dictionaries(st.sampled_from(_INT_FIELDS), _not_ints, max_size=4))
    mixed = draw(st.booleans())  # replace only even numbers: ints and others side by side

    def number(name, n):
        if name not in fields or (mixed and n % 2):
            return n
        value = fields[name]
        return f"{value}{n}" if isinstance(value, str) and value else value

    return base, [mutate(t, lambda s: f"{before}{s}{after}", number) for t in BASES[base]()]


@settings(
    max_examples=int(os.environ.get("TT_FUZZ_RENDER", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_hostile(), st.sampled_from(FORMATS), st.booleans())
def test_hostile_traces_render_inert_in_every_format(case, fmt, color):
    _, traces = case
    check(fmt, render(traces, fmt, RenderOptions(width=100, color=color)))


def test_the_page_builder_escapes_every_value_whatever_its_type():
    from markupsafe import Markup

    from tensortrace.render.html import html, joined

    class Shouting:
        def __str__(self) -> str:
            return "<b onmouseover=alert(1)>"

    built = html('<p data-x="{}">{}{}{}{named}</p>', '"><script>', 3, None, Shouting(), named="'&'")
    assert built == (
        '<p data-x="&#34;&gt;&lt;script&gt;">3None&lt;b onmouseover=alert(1)&gt;&#39;&amp;&#39;</p>'
    )
    assert html("<i>{}</i>", Markup("<b>own</b>")) == "<i><b>own</b></i>"
    assert joined(["<x>", Markup("<br>")], "<sep>") == "&lt;x&gt;<sep><br>"
    with pytest.raises(ValueError):
        html("<p>{:,}</p>", "1")  # a format spec would format data before escaping it


def test_a_storage_label_with_a_superscript_digit_keeps_its_colour():
    """A label like ``S1²`` draws in colour as ``S1`` does: only decimal digits pick the colour."""
    from tensortrace.render.console_parts import View, storage_colour

    view = View(RenderOptions(color=True), 80, True)
    assert storage_colour("S1²", view) == storage_colour("S1", view) != ""
