"""Making a trace visible skips, with one search, every record that holds nothing to spell.

``visible_record`` walks a record field by field only where its JSON text
shows a character ``visible`` would spell; a clean step comes back as the
very same object. Each result is compared with the full walk (the check
forced to say "walk it"), which is what the renderers read before.
"""

from __future__ import annotations

import pytest

from render_fixtures import detach_trace, recorded_traces, trace_scenario, troubled_trace
from tensortrace.trace import evolve
from tensortrace.render import visible as visible_module
from tensortrace.render.visible import visible_record, visible_traces


def _walked(monkeypatch, value):
    with monkeypatch.context() as patch:
        patch.setattr(visible_module, "_holds_none", lambda record: False)
        return visible_record(value)


@pytest.mark.parametrize(
    "trace", [detach_trace(), troubled_trace(), *recorded_traces("detach-vs-data")]
)
def test_a_clean_trace_comes_back_as_it_is(monkeypatch, trace):
    assert visible_record(trace) is trace
    assert _walked(monkeypatch, trace) == trace


@pytest.mark.parametrize(
    "raw, spelled",
    [
        ("t\x1b[31m", "t\\x1b[31m"),
        ("a\rb", "a\\x0db"),
        ("x\x7f", "x\\x7f"),
        ("c1\x85", "c1\\x85"),
        ("\u202eab", "\\u202eab"),
        ("lone\udc80", "lone\\udc80"),
        ("bell\x07", "bell\\x07"),
    ],
)
def test_only_the_step_that_holds_a_control_is_walked(monkeypatch, raw: str, spelled: str):
    trace = detach_trace()
    steps = list(trace.steps)
    first = steps[1].tensors[0]
    steps[1] = evolve(
        steps[1],
        stdout=f"printed {raw}\n",
        tensors=(evolve(first, name=raw),) + tuple(steps[1].tensors[1:]),
    )
    dirty = evolve(trace, steps=tuple(steps))
    shown = visible_record(dirty)
    assert shown == _walked(monkeypatch, dirty)
    assert shown.steps[1].tensors[0].name == spelled
    assert shown.steps[1].stdout == f"printed {spelled}\n"
    assert shown.steps[1].tensors[1] is dirty.steps[1].tensors[1]  # its clean neighbour kept
    assert all(a is b for n, (a, b) in enumerate(zip(shown.steps, dirty.steps)) if n != 1)


def test_a_backslash_in_the_text_is_kept_as_it_is(monkeypatch):
    trace = detach_trace()
    code = 're.sub(r"\\bx\\u0041", "", s)\nprint("\\r")'  # backslashes, no controls
    steps = (evolve(trace.steps[0], code=code),) + tuple(trace.steps[1:])
    written = evolve(trace, steps=steps)
    shown = visible_record(written)
    assert shown.steps[0].code == code
    assert shown == _walked(monkeypatch, written)


@pytest.mark.parametrize("where", ["tensor", "stdout", "title"])
def test_visible_traces_finds_a_control_in_any_part(where: str):
    """``visible_traces`` reads each shared tensor record once and the rest of the trace in
    one more search: a control in either part is still spelled."""
    trace = detach_trace()
    steps = list(trace.steps)
    if where == "tensor":  # the record the later steps share, as a recorded trace has it
        first = evolve(steps[0].tensors[0], name="t\x1b[2J")
        steps = [evolve(s, tensors=(first,) + tuple(s.tensors[1:])) for s in steps]
    elif where == "stdout":
        steps[-1] = evolve(steps[-1], stdout="out\x07\n")
    dirty = evolve(trace, steps=tuple(steps))
    if where == "title":
        dirty = evolve(dirty, scenario=evolve(dirty.scenario, title="T\u202e"))
    (shown,) = visible_traces([dirty])
    assert shown is not dirty and shown == visible_record(dirty)
    if where == "tensor":
        assert {s.tensors[0].name for s in shown.steps} == {"t\\x1b[2J"}
    elif where == "stdout":
        assert shown.steps[-1].stdout == "out\\x07\n"
    else:
        assert shown.scenario.title == "T\\u202e"


def test_a_recorded_trace_is_clean_as_recorded():
    """A trace recorded in this process holds plain values (torch.__version__ as a str), so
    ``visible_traces`` gives it back as it is, without walking it."""
    for trace in trace_scenario("detach-vs-data"):
        assert type(trace.environment.torch) is str
        assert visible_traces([trace])[0] is trace
