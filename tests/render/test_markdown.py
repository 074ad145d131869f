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
from tensortrace.trace import Explanation, Step
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


# --- words quoted from a trace ------------------------------------------------------------

_LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*(?<!\\)\]\(")


def _links_outside_code(text: str) -> list:
    """Each ``[text](`` that Markdown would read as a link or an image, outside code."""
    from hostile_traces import _outside_code

    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            found += [m.group(0) for m in _LINK.finditer(_outside_code(line))]
    return found


IMAGE = "x`![i](https://evil.example/a.png)`[fix](https://evil.example/)"


def test_an_explanation_quoting_an_exception_message_can_neither_load_nor_link(tmp_path):
    """The explanation of "Can't call numpy() ... Use X instead" quotes X in a code span; a
    backtick in X used to close that span early and let an image and a link through."""
    from conftest import cli

    path = tmp_path / "md.yaml"
    message = f"Can't call numpy() on Tensor that requires grad. Use {IMAGE} instead"
    path.write_text(f"title: t\nsteps:\n  - raise RuntimeError({message!r})\n", encoding="utf-8")
    result = cli("run", str(path), "--format", "markdown")
    assert result.returncode == 1, result.stderr
    fix = next(line for line in result.stdout.splitlines() if "**Fix:**" in line)
    assert "evil.example" in fix  # quoted, as the explanation quotes it
    assert _links_outside_code(result.stdout) == []


def test_links_in_a_title_description_or_note_are_shown_not_followed():
    trace = detach_trace()
    trace = evolve(
        trace,
        scenario=evolve(
            trace.scenario,
            title="[click](https://evil.example/) ![i](https://evil.example/a.png)",
            description="see *this* `x[0]` and [that](https://evil.example/)",
        ),
        steps=tuple(
            evolve(s, note="![pixel](https://evil.example/p.png)") if s.index == 1 else s
            for s in trace.steps
        ),
    )
    text = markdown([trace])
    assert _links_outside_code(text) == []
    assert "*this* `x[0]`" in text  # Markdown on purpose stays: emphasis and code
    assert "\\[click\\](https://evil.example/)" in text


def test_an_explanation_from_a_saved_trace_is_escaped_word_by_word():
    trace = troubled_trace()
    step = next(s for s in trace.steps if s.error is not None)
    forged = Explanation(
        title="A title",
        topic="in-place",
        what="**Bold** claim <img src=x> [fix](https://evil.example/) `code` stays",
        fix="![i](https://evil.example/a.png)",
    )
    steps = tuple(
        evolve(s, error=evolve(s.error, explanation=forged)) if s is step else s
        for s in trace.steps
    )
    text = markdown([evolve(trace, steps=steps)])
    assert (
        "\\*\\*Bold\\*\\* claim \\<img src=x\\> \\[fix\\](https://evil.example/) `code` stays"
        in (text)
    )
    assert _links_outside_code(text) == []
