"""The Markdown tutorial page, compared with gold files, and its GitHub-table rules."""

from __future__ import annotations

import re

from tensortrace.trace import evolve
from render_fixtures import (
    _PTR,
    assert_gold,
    detach_trace,
    graph_trace,
    ladder_graph,
    tensor,
    troubled_trace,
    variant_traces,
)
from tensortrace.trace import Step
from tensortrace.render import RenderOptions, render


def markdown(traces, **options) -> str:
    return render(list(traces), "markdown", RenderOptions(**options))


def test_detach_page():
    assert_gold("markdown_detach.md", markdown([detach_trace()]))


def test_trouble_page():
    assert_gold("markdown_trouble.md", markdown([troubled_trace()]))


def test_variants_page():
    assert_gold("markdown_variants.md", markdown(variant_traces()))


def _table_rows(text: str):
    return [line for line in text.splitlines() if line.startswith("|")]


def _cells(row: str):
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def test_every_table_row_has_as_many_cells_as_its_header():
    for text in (
        markdown([detach_trace()]),
        markdown([troubled_trace()]),
        markdown(variant_traces()),
    ):
        rows = _table_rows(text)
        assert rows
        width = None
        for row in rows:
            if row.startswith("| name"):
                width = len(_cells(row))
            assert len(_cells(row)) == width, row


def test_the_page_is_a_tutorial_with_headings_code_and_checks():
    text = markdown([detach_trace()])
    assert text.startswith("# detach() shares storage but leaves the graph\n")
    assert "### Step 3\n\n```python\nb.zero_()\n```" in text
    assert "- ✓ `a._version == 1`" in text
    assert "```mermaid\nflowchart BT" in text


def test_changed_cells_are_bold():
    text = markdown([detach_trace()], steps=frozenset({3}))
    assert "| `a` | **`[0., 0., 0.]`** | S1 | **1** |" in text


def test_errors_are_quotes_with_their_explanation():
    text = markdown([detach_trace()], steps=frozenset({4}))
    assert "> **RuntimeError** (as declared): element 0 of tensors" in text
    assert "> **Fix:** Call `backward()`" in text


def test_pipes_in_values_and_names_do_not_break_tables():
    state = tensor("d['a|b']", ("x|y",), dtype="str")
    trace = evolve(
        detach_trace(), setup=None, steps=(Step(index=1, code="d = ...", line=1, tensors=(state,)),)
    )
    rows = _table_rows(markdown([trace]))
    assert len(_cells(rows[-1])) == len(_cells(rows[0]))


def test_large_graphs_become_a_nested_list():
    text = markdown([graph_trace(ladder_graph(200))])
    assert "```mermaid" not in text
    assert "- SumBackward0\n  - MulBackward0\n    - MulBackward0" in text
    assert "more nodes below" in text


def test_pointers_are_never_written():
    text = markdown([detach_trace(), troubled_trace(), *variant_traces()])
    for ptr in _PTR.values():
        assert str(ptr) not in text


def test_changes_only_and_no_values():
    text = markdown([detach_trace()], steps=frozenset({4}), changes_only=True)
    assert "*No changes.*" in text
    text = markdown([detach_trace()], steps=frozenset({5}), values=False)
    header = next(r for r in _table_rows(text) if r.startswith("| name"))
    assert "values" not in header and "| grad |" not in header
