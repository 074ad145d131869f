"""Which columns a table has, decided once per run."""

from __future__ import annotations

from render_fixtures import detach_trace, troubled_trace
from tensortrace.render import RenderOptions, render


def console(traces, **options) -> str:
    options.setdefault("width", 120)
    return render(list(traces), "console", RenderOptions(**options))


def headers(text: str) -> list:
    return [line.split() for line in text.splitlines() if line.strip().startswith("name ")]


def test_the_columns_stay_the_same_in_every_step_of_a_run():
    for options in ({"values": False}, {"values": True}, {"values": False, "changes_only": True}):
        for trace in (detach_trace(), troubled_trace()):
            found = headers(console([trace], **options))
            assert found and all(h == found[0] for h in found), (options, found)


def test_without_values_the_shape_column_is_there_from_the_first_step():
    text = console([detach_trace()], values=False)
    assert all("shape" in h for h in headers(text))


def test_the_markdown_columns_stay_the_same_too():
    text = render([detach_trace()], "markdown", RenderOptions(values=False))
    found = [line for line in text.splitlines() if line.startswith("| name ")]
    assert len(found) > 1 and len(set(found)) == 1 and "shape" in found[0]
