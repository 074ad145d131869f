"""Renderers on traces the tracer really recorded (saved as JSON in tests/gold/)."""

from __future__ import annotations

import json

import pytest

from render_fixtures import (
    GOLD,
    RECORDED_SCENARIOS,
    assert_gold,
    recorded_traces,
    trace_scenario,
)
from tensortrace.render import RenderOptions, render


@pytest.mark.parametrize("name", RECORDED_SCENARIOS)
def test_console(name):
    text = render(recorded_traces(name), "console", RenderOptions(width=80))
    assert_gold(f"console_recorded_{name}.txt", text)


@pytest.mark.parametrize("name", RECORDED_SCENARIOS)
def test_markdown(name):
    assert_gold(f"markdown_recorded_{name}.md", render(recorded_traces(name), "markdown"))


@pytest.mark.parametrize("name", RECORDED_SCENARIOS)
def test_saved_traces_hold_labels_not_addresses(name):
    data = json.loads((GOLD / f"trace_{name}.json").read_text(encoding="utf-8"))
    text = json.dumps(data)
    assert '"storage": "S1"' in text
    for trace in data.get("traces", [data]):
        assert all(s["ptr"] == 0 for s in trace["storages"])
        for step in trace["steps"]:
            for state in step["tensors"]:
                assert state["storage_ptr"] is None and state["data_ptr"] is None


@pytest.mark.parametrize("name", RECORDED_SCENARIOS)
def test_the_saved_traces_still_match_what_the_tracer_records(name):
    """Facts drift when the tracer changes: then regenerate the gold files on purpose."""
    fresh = trace_scenario(name)
    saved = recorded_traces(name)
    assert [t.steps for t in fresh] == [t.steps for t in saved]
    assert [t.storages for t in fresh] == [t.storages for t in saved]
