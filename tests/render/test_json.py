"""The JSON document and the JSON-lines stream, as scripts read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from render_fixtures import GOLD, detach_trace, variant_traces
from tensortrace.errors import TraceFormatError
from tensortrace.trace import FORMAT_NAME, FORMAT_VERSION, Summary, Trace, evolve
from tensortrace.render import render
from tensortrace.render.json import traces_from_dict, traces_from_json
from tensortrace.trace import InvalidRecord
from tensortrace.trace.document import trace_to_dict
from tensortrace.render.jsonl import JsonlStream
from tensortrace.scenario.schemas import trace_schema


def _events(traces) -> list:
    return [json.loads(line) for line in render(list(traces), "jsonl").splitlines()]


def test_every_jsonl_event_has_the_same_head():
    traces = variant_traces()
    events = _events(traces)
    assert {e["event"] for e in events} == {"start", "step", "end"}
    for event in events:
        assert event["format"] == FORMAT_NAME and event["format_version"] == FORMAT_VERSION
        assert isinstance(event["scenario"], dict), event["event"]
        assert "variant" not in event, "the variant is inside 'scenario', in one place"
    by_variant = {}
    for event in events:
        by_variant.setdefault(event["scenario"]["variant"], []).append(event["event"])
    assert set(by_variant) == {t.scenario.variant for t in traces}
    assert all(kinds[0] == "start" and kinds[-1] == "end" for kinds in by_variant.values())


def test_the_scenario_of_an_event_is_the_traces_own_scenario_object():
    trace = detach_trace()
    expected = trace.to_dict()["scenario"]
    stream = JsonlStream()
    lines = [stream.start(trace), stream.step(trace, trace.steps[0]), stream.end(trace)]
    assert [json.loads(line)["scenario"] for line in lines] == [expected] * 3


def test_version_1_traces_still_load():
    # as version 1 wrote it
    data = json.loads((GOLD / "trace_detach_v1.json").read_text(encoding="utf-8"))
    assert data["format_version"] == 1
    assert isinstance(Trace.from_dict(data), Trace)


@pytest.mark.parametrize("version", [0, 5, True, "2", None])
def test_other_versions_are_refused_with_the_ones_this_version_reads(version):
    body = detach_trace().to_dict()
    with pytest.raises(InvalidRecord, match=r"reads versions 1, 2, 3, 4"):
        Trace.from_dict({**body, "format_version": version})
    with pytest.raises(
        TraceFormatError, match=r"^trace format version .* reads versions 1, 2, 3, 4"
    ):
        traces_from_dict({**body, "format_version": version})


@pytest.mark.parametrize("version", [1, 2, 3])
def test_versions_1_to_3_load_through_the_same_records(version):
    trace = detach_trace()
    body = trace_to_dict(trace, references=False)  # every record in full, as they wrote it
    assert Trace.from_dict({**body, "format_version": version}) == trace


def test_a_trace_written_now_loads_back_equal():
    trace = evolve(detach_trace(), notices=("n",))
    data = json.loads(render([trace], "json"))
    assert data["format_version"] == FORMAT_VERSION == 4
    assert Trace.from_dict(data) == trace
    assert traces_from_json(render([trace], "json").encode()) == [trace]


def _undescribed(schema: object, where: str = "") -> list:
    """Every property, anywhere in the schema, that has no description."""
    missing = []
    if isinstance(schema, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if not (
                isinstance(sub, dict)
                and isinstance(sub.get("description"), str)
                and sub["description"].strip()
            ):
                missing.append(f"{where}.{name}")
        for key, sub in schema.items():
            missing.extend(_undescribed(sub, f"{where}/{key}"))
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            missing.extend(_undescribed(sub, f"{where}[{i}]"))
    return missing


def test_every_field_of_the_trace_schema_says_what_it_is():
    assert _undescribed(trace_schema()) == []


def test_the_schema_walk_finds_a_property_without_description():
    assert _undescribed({"properties": {"a": {"type": "string"}, "b": {"description": "b"}}}) == [
        ".a"
    ]


def _fields(schema: object) -> set:
    found = set()
    if isinstance(schema, dict):
        found.update(schema.get("properties") or {})
        for sub in schema.values():
            found |= _fields(sub)
    elif isinstance(schema, list):
        for sub in schema:
            found |= _fields(sub)
    return found


def test_docs_json_documents_every_field_of_the_trace_schema():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text(encoding="utf-8")
    missing = sorted(
        f for f in _fields(trace_schema()) if f"`{f}`" not in doc and f'"{f}"' not in doc
    )
    assert missing == []


def test_both_wrapper_forms_and_a_single_trace_load():
    from tensortrace.render.json import traces_from_dict

    traces = list(variant_traces())
    bodies = [t.to_dict() for t in traces]
    assert traces_from_dict({"traces": bodies}) == traces
    assert (
        traces_from_dict(
            {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "traces": bodies}
        )
        == traces
    )
    assert traces_from_dict(bodies[0]) == traces[:1]
    with pytest.raises(TraceFormatError, match="reads versions 1, 2, 3"):
        traces_from_dict({"format": FORMAT_NAME, "format_version": 9, "traces": bodies})
    with pytest.raises(
        TraceFormatError,
        match=r"^not a valid tensortrace trace: \$.traces: expected array, got object$",
    ):
        traces_from_dict({"traces": {}})
    with pytest.raises(
        TraceFormatError,
        match=r"^not a valid tensortrace trace: \$.traces: expected array of length >= 1",
    ):
        traces_from_dict({"traces": []})


def test_several_traces_come_in_a_wrapper_that_says_its_format(tmp_path):
    from tensortrace.trace import FORMAT_NAME, FORMAT_VERSION
    from tensortrace.render.json import render_json, traces_from_dict
    from render_fixtures import recorded_traces

    traces = recorded_traces("detach-vs-data")
    assert len(traces) == 2
    data = json.loads(render_json(traces))
    assert data["format"] == FORMAT_NAME and data["format_version"] == FORMAT_VERSION
    assert [t.scenario.variant for t in traces_from_dict(data)] == ["detach", "data"]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x",
        "naïve ☃",
        'tab\tquote"back\\slash\nnew',
        "\x00\x1f",
        "\ud800 lone",
        0,
        -7,
        10**30,
        True,
        False,
        None,
        [],
        (),
    ],
)
def test_a_fields_value_is_spelled_as_the_compact_encoder_spells_it(value):
    """The renderer writes a step's plain fields itself; the bytes must be the encoder's."""
    from tensortrace.render.json import _compact, _scalar

    assert _scalar(value) == _compact(value)


@pytest.mark.parametrize("value", [1.5, float("1e300"), [1], {"a": 1}, (1,), 3 + 0j])
def test_values_it_does_not_spell_are_left_to_the_encoder(value):
    from tensortrace.render.json import _scalar

    assert _scalar(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "naïve ☃",
        1.5,
        -0.0,
        1e300,
        10**30,
        [1, [2.5, None], {"a": "b"}],
        {"k": {"in": ["x", None]}, "n": []},
        [],
        {},
    ],
)
def test_the_compact_encoder_writes_json_on_one_line_that_reads_back_equal(value):
    from tensortrace.render.json import _compact

    text = _compact(value)
    assert json.loads(text) == value and "\n" not in text
    if not isinstance(value, float):
        assert text == json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def test_a_lone_surrogate_which_utf8_cannot_hold_is_written_spelled():
    from tensortrace.render.json import _compact

    assert json.loads(_compact({"stdout": "a\ud800b", "n": [1]})) == {
        "stdout": "a\\ud800b",
        "n": [1],
    }


def test_a_non_finite_statistic_is_spelled_never_written_as_null():
    from tensortrace.render.json import _compact

    summary = Summary(numel=3, min=1.0, max=float("inf"), mean=float("nan"), std=-float("inf"))
    assert (summary.max, summary.mean, summary.std) == ("inf", "nan", "-inf")
    assert json.loads(_compact(summary))["mean"] == "nan"


def test_every_record_in_a_steps_lists_is_one_line_and_nodes_one_line_each():
    """docs/json.md: every record in a step's lists (the setup's too) is one line; a graph's
    and a flow's nodes are one line each."""
    from tensortrace.render.json import _compact

    traces = traces_from_dict(
        json.loads((GOLD / "trace_detach-vs-data.json").read_text(encoding="utf-8"))
    )
    traces = [evolve(t, setup=evolve(t.steps[0], index=0)) for t in traces]  # a setup with records
    text = render(traces, "json")
    data = json.loads(text)
    lines = {line.strip().rstrip(",") for line in text.splitlines()}
    records = nodes = 0
    for trace in data["traces"]:
        assert trace["setup"]["expectations"]
        for step in [trace["setup"], *trace["steps"]]:
            for key in ("tensors", "ops", "expectations", "warnings", "predictions"):
                for record in step[key]:
                    assert _compact(record) in lines, (key, record)
                    records += 1
            for holder in step["graphs"] + step["flow"]:
                assert _compact(holder) not in lines  # expanded: its nodes are the lines
                for node in holder["nodes"]:
                    assert _compact(node) in lines
                    nodes += 1
    assert records > 20 and nodes > 5


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_json_spells_bidi_and_c1_characters_as_escapes_that_read_back_the_same(fmt):
    """A U+202E in a trace would reorder what a terminal or an editor shows of the file."""
    hostile = "a\u202eb\x85c\u2066d\u2028e"
    trace = detach_trace()
    trace = evolve(
        trace,
        scenario=evolve(trace.scenario, title=hostile),
        steps=(evolve(trace.steps[0], stdout=hostile),) + trace.steps[1:],
    )
    text = render([trace], fmt)
    assert not any(ch in text for ch in "\u202e\x85\u2066\u2028")
    first = json.loads(text.splitlines()[0] if fmt == "jsonl" else text)
    assert first["scenario"]["title"] == hostile
    if fmt == "json":
        assert first["steps"][0]["stdout"] == hostile
