"""Nothing the parent reads is trusted: the pipe from the child and saved traces are typed, bounded
and
checked, and anything else is one clean refusal naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from render_fixtures import GOLD, detach_trace

from tensortrace.trace import events
from tensortrace.errors import TraceFormatError
from tensortrace.trace import Trace
from tensortrace.render import render
from tensortrace.render.json import traces_from_json
from tensortrace.run.runner import Limits, run_scenario
from tensortrace.scenario import loads_scenario
from tensortrace.trace import InvalidRecord

HOSTILE_TEXT = [
    "</script><script>alert(1)</script>",
    "javascript:alert(1)",
    '"quoted" \\ back',
    "\x1b]8;;http://x\x07",
    "\u202eevil",
    "\x00\x1f\x7f",
    "a" * 70_000,
]
DEEP = 100_000


def _paths(value, at=()):
    """Every place in a JSON tree: (path of keys and indexes)."""
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, at + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, at + (i,))


def _replaced(tree, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {**tree, head: _replaced(tree[head], rest, new)}
    return [_replaced(item, rest, new) if i == head else item for i, item in enumerate(tree)]


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=20),
)
_hostile = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=5),
    st.dictionaries(st.sampled_from(["a", "kind", "index", "__class__"]), _scalars, max_size=3),
    st.builds(lambda n: [{}] * n, st.integers(0, 2000)),
    st.just("DEEP"),  # spliced in as text: 100,000 nested brackets
)

DOCUMENT = json.loads((GOLD / "trace_detach-vs-data.json").read_text(encoding="utf-8"))
DOCUMENT_PATHS = list(_paths(DOCUMENT))


def _text(tree) -> bytes:
    text = json.dumps(tree, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return text.replace(b'"DEEP"', b"[" * DEEP + b"]" * DEEP)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(DOCUMENT_PATHS), _hostile)
def test_a_mutated_trace_document_loads_or_is_refused_in_one_line(path, new):
    text = _text(_replaced(DOCUMENT, path, new))
    try:
        traces = traces_from_json(text)
    except TraceFormatError as exc:
        assert "\n" not in exc.message and exc.message
    else:
        assert all(isinstance(t, Trace) for t in traces)
        render(traces, "json")
        render(traces, "jsonl")
    if new != "DEEP":
        data = (
            _replaced(DOCUMENT["traces"][0], path[2:], new)
            if path[:2] == ("traces", 0)
            else DOCUMENT["traces"][0]
        )
        try:
            Trace.from_dict(data)
        except InvalidRecord as exc:
            assert "\n" not in str(exc)


def _event_lines() -> list:
    trace = detach_trace()
    encoder = events.Encoder()
    items = [
        events.Start(trace.scenario, trace.environment),
        *trace.steps,
        events.End(trace.storages, trace.notices, trace.aborted),
    ]
    return [json.loads(encoder.encode(item)) for item in items]


EVENTS = _event_lines()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(EVENTS) - 1), st.data(), _hostile)
def test_a_mutated_event_from_the_child_decodes_or_is_refused_in_one_line(at, data, new):
    event = EVENTS[at]
    path = data.draw(st.sampled_from(list(_paths(event))))
    decoder = events.Decoder()
    for before in EVENTS[:at]:
        decoder.decode(_text(before))
    try:
        got = decoder.decode(_text(_replaced(event, path, new)))
    except events.EventError as exc:
        assert str(exc).startswith("sent ") and "\n" not in str(exc)
    else:
        assert (
            isinstance(got, (events.Start, events.End, events.Unusable, events.Crashed))
            or type(got).__name__ == "Step"
        )


@pytest.mark.parametrize(
    "line",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"event":"step","step":' + b"[" * DEEP + b"]" * DEEP + b"}",
        b'{"event":"step","step":{"index":1,"code":"x","line":1,"tensors":[{"values":{"kind":"exact","data":'
        + b"[" * DEEP
        + b"]" * DEEP
        + b"}}]}}",
        b'{"event":"step","step":{"index":1,"code":"x","line":1,"ops":['
        + b",".join([b"{}"] * 3_100_000)
        + b"]}}",
        b"\xff\xfe",
        b"",
        b"null",
        b'{"event":"step"}',
        b'{"event":"start","scenario":{"title":{"a":1}}}',
    ],
)
def test_hostile_lines_are_one_clean_refusal(line):
    with pytest.raises(events.EventError) as caught:
        events.decode(line)
    assert "\n" not in str(caught.value) and "Recursion" not in str(caught.value)


def test_an_invalid_step_is_named_by_the_step_the_parent_expects():
    decoder = events.Decoder()
    decoder.expected_step = 3
    line = json.dumps(
        {
            "event": "step",
            "step": {
                "index": 3,
                "code": "x",
                "line": 1,
                "tensors": [
                    {
                        **json.loads(events.encode(detach_trace().steps[0]))["step"]["tensors"][0],
                        "version": "7",
                    }
                ],
            },
        }
    ).encode()
    with pytest.raises(
        events.EventError,
        match=r"^sent an invalid step 3: \$\.tensors\[0\]\.version: "
        r"expected int or null, got str$",
    ):
        decoder.decode(line)


# --- saved traces on the command line --------------------------------------------------------


def _document(change) -> str:
    data = json.loads((GOLD / "trace_detach-vs-data.json").read_text(encoding="utf-8"))
    change(data["traces"][0])
    return json.dumps(data)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _document(lambda t: t["steps"][2].__setitem__("line", "<img src=x onerror=alert(1)>")),
            r"\$\.traces\[0\]\.steps\[2\]\.line: expected int or null, got str",
        ),
        (
            _document(lambda t: t["scenario"].__setitem__("title", {"x": 1})),
            r"\$\.traces\[0\]\.scenario\.title: expected str, got object",
        ),
        (
            _document(
                lambda t: t["steps"][0].__setitem__(
                    "index", '1"]; click N1 href "javascript:alert(1)'
                )
            ),
            r"\$\.traces\[0\]\.steps\[0\]\.index: expected int, got str",
        ),
        (
            _document(lambda t: t["steps"][0].__setitem__("ops_omitted", "many")),
            r"\$\.traces\[0\]\.steps\[0\]\.ops_omitted: expected int, got str",
        ),
        (
            _document(
                lambda t: t["steps"][0]["warnings"].append(
                    {"category": "W", "message": "m", "line": "</script>"}
                )
            ),
            r"\$\.traces\[0\]\.steps\[0\]\.warnings\[0\]\.line: expected int or null, got str",
        ),
        (
            _document(lambda t: t["steps"][0].__setitem__("status", "passed")),
            r"\$\.traces\[0\]\.steps\[0\]\.status: invalid enum value 'passed'",
        ),
        (
            '{"format": "tensortrace.trace", "format_version": 3, "scenario": '
            + "[" * DEEP
            + "]" * DEEP
            + "}",
            r"nested too deeply",
        ),
    ],
)
def test_render_refuses_a_hostile_trace_file_in_one_line(tmp_path, text, message):
    path = tmp_path / "trace.json"
    path.write_text(text, encoding="utf-8")
    for command in ("render", "explore"):
        result = cli(command, str(path))
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )
        assert result.stderr.startswith(f"tensortrace: {path}: not a valid tensortrace trace: "), (
            result.stderr
        )
        assert __import__("re").search(message, result.stderr), result.stderr
        assert result.stdout == ""


def test_render_refuses_bytes_that_are_no_text(tmp_path):
    path = tmp_path / "trace.json"
    path.write_bytes(
        b'{"format": "tensortrace.trace", "format_version": 3, "scenario": {"title": "\xff"}}'
    )
    result = cli("render", str(path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- a child that lies --------------------------------------------------------------------

FORGER = """
title: forged
setup: a = torch.ones(2)
steps:
  - run: |
      import os
      os.write(int(os.environ["FORGE_FD"]), {lines!r})  # straight into the pipe to the parent
  - b = a.clone()
"""


def _forged_run(tmp_path: Path, monkeypatch, *items) -> Trace:
    """A run whose step 1 writes ``items`` into the pipe to the parent, as confined code that found
    the descriptor could (the test tells it which one, so as not to write anywhere else)."""
    import os

    real_pipe = os.pipe

    def pipe():
        read, write = real_pipe()
        os.environ["FORGE_FD"] = str(write)
        return read, write

    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setenv("FORGE_FD", "-1")
    lines = b"".join(events.encode(item) for item in items)
    text = textwrap.dedent(FORGER).format(lines=lines)
    scenario = loads_scenario(text, path=str(tmp_path / "forged.yaml"))
    [trace] = run_scenario(scenario, safe=False, confine=False, limits=Limits(timeout=60))
    return trace


def test_a_second_start_from_the_child_ends_the_run_as_crashed(tmp_path, monkeypatch):
    real = detach_trace()
    trace = _forged_run(tmp_path, monkeypatch, events.Start(real.scenario, real.environment))
    assert trace.aborted == "the child sent a second start event; the tracer stopped reading it"
    assert not trace.passed and trace.scenario.title == "forged"
    assert trace.setup is not None and trace.setup.status == "ok"  # what was traced before is kept
    assert trace.steps[-1].status == "killed" and trace.steps[-1].index == 1


def test_steps_the_scenario_does_not_have_end_the_run_as_crashed(tmp_path, monkeypatch):
    from tensortrace.trace import Step

    fake = [Step(index=i, code="print('all is well')", line=99, behaved=True) for i in (1, 2, 3)]
    trace = _forged_run(tmp_path, monkeypatch, *fake)
    assert not trace.passed
    assert trace.steps[0].code.startswith(
        "import os\n"
    )  # the scenario's own code, never the child's
    assert trace.steps[0].line == 6
    assert "the child sent" in trace.aborted and "step" in trace.aborted, trace.aborted
    assert all(step.index <= 2 for step in trace.steps)


# --- bounded memory ---------------------------------------------------------------------

MEMORY = r"""
import json, resource, sys
from tensortrace.trace.events import Assembler, Decoder, EventError, LineReader, Plan
from tensortrace.trace import ScenarioInfo

kind = sys.argv[1]
START = json.dumps({"event": "start", "scenario": {"title": "t"}, "environment": {
    "tensortrace": "", "torch": "", "python": "", "device": ""}}).encode()

def stream():
    yield START + b"\n"
    # each step's body is the same bytes: made once, by repetition (a join of a list of
    # millions of items took seconds to make what the parent reads in a fraction of one)
    if kind == "strings":
        body = b'"failures":[' + b'"ab",' * 899_999 + b'"ab"]}}\n'
    elif kind == "wide":
        text = json.dumps("\U0001F600" + "a" * 4_000_000, ensure_ascii=False).encode()
        body = b'"stdout":' + text + b',"failures":[' + b",".join([text] * 6) + b"]}}\n"
    elif kind == "objects":
        body = b'"ops":[' + b"{}," * 9_999_999 + b"{}]}}\n"
    elif kind == "deep":
        body = b'"tensors":[' + b"[" * 100_000 + b"]" * 100_000 + b"]}}\n"
    for i in range(1, 200):
        yield b'{"event":"step","step":{"index":%d,"code":"x","line":1,' % i + body

plan = Plan(ScenarioInfo(title="t"), [(i, "x", 1, None) for i in range(1, 200)])
assembler, decoder, reader = Assembler(plan=plan), Decoder(), LineReader()
chunks = []
for line in stream():  # made before measuring: the child's bytes are not the parent's memory
    chunks.append(line)
    if sum(map(len, chunks)) > 256 * 2**20:
        break
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
why = ""
try:
    while chunks:
        data = chunks.pop(0)
        for at in range(0, len(data), 1 << 20):
            for got in reader.feed(data[at:at + (1 << 20)]):
                decoder.expected_step = assembler.expected_step
                assembler.add(decoder.decode(got))
        del data
except EventError as exc:
    why = str(exc)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"grew_mib": grew / 1024, "why": why}))
"""


@pytest.mark.parametrize("kind", ["strings", "wide", "objects", "deep"])
def test_the_parents_memory_for_a_hostile_stream_stays_bounded(kind):
    done = subprocess.run(
        [sys.executable, "-c", MEMORY, kind], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["why"].startswith("sent "), got
    assert got["grew_mib"] < 512, got


def test_the_trace_package_imports_nothing_else_of_tensortrace_nor_torch_nor_rich():
    """Pure data, in every function too: only the standard library, msgspec and its own modules.
    (``Trace.render`` and the notebook display reach the renderers through ``trace.present``, a
    seam the package's root plugs them into.)"""
    import ast

    folder = Path(__file__).resolve().parents[2] / "tensortrace" / "trace"
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 1 or node.module.split(".")[0] in (
                    "__future__",
                    "typing",
                    "msgspec",
                    "contextlib",
                ), (path.name, node.module)
                assert node.level <= 1, (path.name, node.module)
            elif isinstance(node, ast.Import):
                assert all(
                    a.name.split(".")[0]
                    in ("msgspec", "re", "math", "abc", "functools", "json", "gc")
                    for a in node.names
                ), path.name
    code = (
        "import sys, tensortrace.trace.wire, tensortrace.trace.schema, tensortrace.trace.document;"
        " assert not {'torch', 'rich', 'yaml'} & set(sys.modules), sorted({'torch', 'rich', 'yaml'}"
        " & set(sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
