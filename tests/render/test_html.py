"""``--format html``: one page, well-formed, self-contained, with the trace's JSON in it.

What the page does in a browser is ``test_html_browser.py``; here is what the
file holds: its structure, the embedded document, the escaping of scenario
text, the facts it draws (changed cells, storages, graphs, variants, and the
newer facts when a trace carries them), its size, and that it asks for
nothing from the network, nor does the SVG export.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser


from conftest import REPO, cli
from tensortrace.trace import evolve
from render_fixtures import (
    _PTR,
    alternating_graph,
    chain_graph,
    detach_trace,
    graph_trace,
    ladder_graph,
    recorded_traces,
    shared_graph,
    troubled_trace,
    variant_traces,
    wide_graph,
)
from tensortrace.render import RenderOptions, render
from tensortrace.render.facts import changed_fields, tensors_by_name
from tensortrace.render.json import traces_from_dict

VOID = {
    "meta",
    "br",
    "hr",
    "img",
    "input",
    "link",
    "source",
    "wbr",
    "col",
    "area",
    "base",
    "embed",
    "track",
}
HOSTILE = "</script><script>alert(1)</script><!-- \u2028\u2029 <img src=x onerror=alert(2)>"
# The data block: the one place the page's JSON lives.
DATA = re.compile(r'<script type="application/json" id="tt-data">(.*?)</script>', re.S)
SVG_NS = re.compile(r'xmlns(?::\w+)?="(https?://[^"]*)"')


class Structure(HTMLParser):
    """Every element closed, in order; what the page's tables and sections hold."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list = []
        self.errors: list = []
        self.cells: list = []  # attributes of every td of a tensor table
        self.sections: list = []
        self.scripts: list = []
        self._table = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts.append(attrs)
        if tag == "section" and "tt-step" in (attrs.get("class") or ""):
            self.sections.append(attrs)
        if tag == "table" and "tt-table" in (attrs.get("class") or ""):
            self._table += 1
        if tag == "td" and self._table:
            self.cells.append(attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass  # SVG's <path .../>: opened and closed at once

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "table" and self._table:
            self._table -= 1


def parsed(page: str) -> Structure:
    parser = Structure()
    parser.feed(page)
    parser.close()
    assert parser.errors == [], parser.errors[:5]
    assert parser.stack == [], f"left open: {parser.stack}"
    return parser


def embedded(page: str) -> object:
    (block,) = DATA.findall(page)
    return json.loads(block)


def with_step_text(code: str, note: str):
    trace = detach_trace()
    steps = list(trace.steps)
    steps[1] = evolve(steps[1], code=code, note=note)
    return evolve(trace, steps=tuple(steps))


# --- the file ----------------------------------------------------------------------------


def test_the_page_is_well_formed_html_with_well_formed_svg():
    for traces in ([detach_trace()], [troubled_trace()], list(variant_traces())):
        page = render(traces, "html")
        assert page.startswith("<!DOCTYPE html>")
        assert '<meta name="viewport"' in page
        structure = parsed(page)
        assert structure.sections, "no step sections"
        for svg in re.findall(r"<svg.*?</svg>", page, re.S):
            ET.fromstring(svg)  # raises on malformed XML


def test_the_page_embeds_the_json_renderer_s_document():
    for traces in ([detach_trace()], list(variant_traces()) + [troubled_trace()]):
        page = render(traces, "html")
        assert embedded(page) == json.loads(render(traces, "json"))


def test_pointers_are_only_in_the_embedded_document():
    page = render([detach_trace()], "html")
    shown = DATA.sub("", page)
    for ptr in _PTR.values():
        assert str(ptr) not in shown


def test_every_tensor_cell_names_its_tensor_and_storage():
    trace = troubled_trace()
    structure = parsed(render([trace], "html"))
    assert structure.cells
    storages = {t.name: t.storage or "" for step in trace.steps for t in step.tensors}
    for cell in structure.cells:
        assert cell["data-tensor"] in storages
        assert cell["data-storage"] == storages[cell["data-tensor"]]
        assert cell["data-trace"] == "0"


def test_changed_cells_are_the_facts_that_changed():
    trace = detach_trace()
    page = render([trace], "html")
    section = re.search(r'<section class="tt-step" id="step-3".*?</section>', page, re.S).group(0)
    before, now = tensors_by_name(trace.steps[1]), tensors_by_name(trace.steps[2])
    for name in ("a", "b"):
        cells = re.findall(
            rf'<td class="tt-cell-(\w+)( tt-changed)?" data-trace="0" data-tensor="{name}"', section
        )
        marked = {column for column, changed in cells if changed}
        assert marked == set(changed_fields(before[name], now[name])) & {c for c, _ in cells}
        assert {"values", "version"} <= marked


# --- scenario text is text ------------------------------------------------------------------


def test_hostile_step_text_cannot_leave_its_place():
    trace = with_step_text(HOSTILE, HOSTILE)
    page = render([trace], "html")
    structure = parsed(page)
    assert [s.get("type") for s in structure.scripts] == ["application/json", None]
    assert "<script>alert" not in page and "<img src=x" not in page
    block = DATA.search(page).group(1)
    assert "\u2028" not in block and "\u2029" not in block and "<" not in block
    assert page.count("<!--") == 0
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
    data = embedded(page)
    assert data["steps"][1]["code"] == HOSTILE and data["steps"][1]["note"] == HOSTILE


# --- what is drawn ------------------------------------------------------------------------


def test_graphs_are_svg_diagrams_and_long_chains_collapse():
    page = render([graph_trace(chain_graph(5000))], "html")
    (svg,) = re.findall(r"<svg class=\"tt-graph\".*?</svg>", page, re.S)
    boxes = re.findall(r"<g class=\"tt-g-", svg)
    assert len(boxes) < 10, len(boxes)
    assert "× 5,000 MulBackward0" in svg
    drawn = len(page) - len(DATA.search(page).group(0))  # the trace itself holds 5,000 nodes
    assert drawn < 30_000, drawn


def test_detach_graph_has_a_box_and_an_edge_per_node():
    page = render([detach_trace()], "html")
    (svg,) = re.findall(r"<svg class=\"tt-graph\".*?</svg>", page, re.S)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert [t.split(" · ")[0] for t in texts] == [
        "out",
        "SumBackward0",
        "MulBackward0",
        "AccumulateGrad → a.grad",
    ]
    assert "saved: other" in texts[2]  # what the node saved for backward is in its box
    assert len(list(root.iter(f"{ns}path"))) == 1 + 3  # the arrow head, and 3 edges


def _boxes(svg: str):
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svg)
    return root, [
        (float(r.get("x")), float(r.get("y")), float(r.get("width")))
        for r in root.iter(f"{ns}rect")
    ]


def test_graph_boxes_never_overlap_and_a_ladder_stays_narrow():
    page = render(
        [graph_trace(shared_graph(), ladder_graph(30), wide_graph(12), alternating_graph(40))],
        "html",
    )
    svgs = re.findall(r"<svg class=\"tt-graph\".*?</svg>", page, re.S)
    assert len(svgs) == 4
    for svg in svgs:
        root, boxes = _boxes(svg)
        rows = {}
        for x, y, w in boxes:
            rows.setdefault(y, []).append((x, x + w))
            assert 0 <= x and x + w <= float(root.get("width"))
        for spans in rows.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    _, ladder = _boxes(svgs[1])
    assert len({x for x, _, _ in ladder}) == 2  # the chain and its leaves: two columns
    _, wide = _boxes(svgs[2])
    assert len({x for x, _, _ in wide}) == 12  # one column per leaf


def test_variants_stand_side_by_side():
    one, two = variant_traces()
    page = render([one, two], "html")
    section = re.search(r'<section class="tt-step" id="step-2".*?</section>', page, re.S).group(0)
    columns = re.findall(r'<div class="tt-variant" data-trace="(\d)"><h4>([^<]*)</h4>', section)
    assert columns == [("0", one.scenario.variant), ("1", two.scenario.variant)]
    assert "What differs between the variants" in page


def test_variant_columns_stack_before_their_tables_would_scroll():
    """The rules that keep a step with variants within a 1,200 px window (the browser test
    measures it): a variant's column is at least 40rem wide (or the whole width), so at 1,200 px
    the variants stand one under another, each table with all its columns; a value may wrap in a
    narrower column; a table wider than its column still scrolls in its own box, never the page."""
    page = render(list(variant_traces()), "html")
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert ".tt-variants{display:grid;" in css
    assert "grid-template-columns:repeat(auto-fit,minmax(min(100%,40rem),1fr))}" in css
    assert ".tt-variant{min-width:0}" in css
    assert ".tt-variant .tt-table td{white-space:normal}" in css
    assert ".tt-table-wrap{overflow-x:auto" in css
    section = re.search(r'<section class="tt-step" id="step-2".*?</section>', page, re.S).group(0)
    assert section.count('<div class="tt-table-wrap">') >= 2


def test_steps_option_keeps_only_those_steps():
    page = render([detach_trace()], "html", RenderOptions(steps=frozenset({2, 4})))
    assert [s["id"] for s in parsed(page).sections] == ["step-2", "step-4"]


def test_errors_show_their_explanation_and_warnings_and_output_show():
    trace = troubled_trace()
    page = render([detach_trace(), trace], "html")
    assert "element 0 of tensors does not require grad" in page
    assert "declared in <code>raises</code>" in page
    assert 'class="tt-box tt-warn"' in page and 'class="tt-stdout"' in page
    assert "s2-step-1" in page  # the second scenario's steps have their own ids


def test_what_a_step_ran_its_gradient_flow_predictions_and_saved_tensors_are_drawn():
    """From a real trace of backward-twice: the console's wording, inside the step's section."""
    result = cli("run", "backward-twice", "--format", "json")
    traces = traces_from_dict(json.loads(result.stdout))
    page = render(traces, "html")
    parsed(page)
    section = re.search(r'<section class="tt-step" id="step-1".*?</section>', page, re.S).group(0)
    first = traces[0].steps[0]
    assert first.ops and first.flow and first.predictions  # what the section must show
    assert "ran 4 calls" in section and "Tensor.backward(y)" in section
    assert "aten::mul" not in section  # at --ops calls, as the console; --ops aten adds them
    deeper = render(traces, "html", RenderOptions(ops="aten"))
    assert "aten::mul" in re.search(
        r'<section class="tt-step" id="step-1".*?</section>', deeper, re.S
    ).group(0)
    assert (
        "gradient flow of Tensor.backward" in section and "x.grad: None → [2., 4., 6.]" in section
    )
    assert "⚠ predicted: backward through <code>y</code> a second time will fail" in section
    assert "MulBackward0 · saved: other, self: freed by backward" in section
    quiet = render(
        traces_from_dict(
            json.loads(cli("run", "backward-twice", "--format", "json", "--ops", "none").stdout)
        ),
        "html",
    )
    assert "gradient flow" not in quiet and "aten::" not in quiet and "ran 4 calls" not in quiet


# --- offline, small -------------------------------------------------------------------------


def requested_urls(text: str) -> list:
    """Every http(s) URL in ``text`` that is not an XML namespace name (which nothing fetches)."""
    names = set(SVG_NS.findall(text))
    assert names <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, names
    return re.findall(r"https?://[^\s\"'<>)]*", SVG_NS.sub("", text))


def test_neither_html_nor_svg_names_any_url_to_fetch():
    traces = [detach_trace(), troubled_trace()]
    for fmt in ("html", "svg"):
        text = render(traces, fmt)
        assert requested_urls(text) == [], fmt
        assert "@import" not in text and "src=" not in text.replace("data-", "")


def test_the_url_check_sees_a_url():
    assert requested_urls(
        '<svg xmlns="http://www.w3.org/2000/svg"><style>url("https://cdn.x/f.woff")</style>'
    ) == ["https://cdn.x/f.woff"]


def test_the_bundled_detach_page_is_small(capsys):
    page = render(recorded_traces("detach"), "html")
    size = len(page.encode("utf-8"))
    with capsys.disabled():
        print(f"\nhtml page of the bundled detach scenario: {size:,} bytes")
    assert size < 64_000


def test_render_dash_o_html_writes_the_page(tmp_path):
    out = tmp_path / "detach.html"
    result = cli("render", str(REPO / "tests" / "gold" / "trace_detach.json"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    assert embedded(page)["scenario"]["source"] == "scenarios/detach.yaml"
    assert parsed(page).sections


def test_the_screenshot_in_docs_is_there():
    shot = REPO / "docs" / "html-detach.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "docs/html-detach.png" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_trace_read_back_from_a_page_renders_again(tmp_path):
    """The recipe in docs/html.md: the data block is a trace document ``render`` reads."""
    page = render(recorded_traces("detach"), "html")
    trace = json.loads(re.search(r'id="tt-data">(.*?)</script>', page, re.S).group(1))
    path = tmp_path / "back.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    result = cli("render", str(path), "--format", "markdown")
    assert result.returncode == 0, result.stderr
    assert "same memory, same version counter" in result.stdout
