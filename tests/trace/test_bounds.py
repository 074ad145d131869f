"""The parent trusts nothing from the child: every transfer is bounded, and so is the loader.

A scenario can make its child send a huge message, many warnings, or more
trace than the parent should hold; a file can ask for thousands of variants
through YAML aliases. Each of these ends quickly, with what was traced kept
and one sentence saying what was cut.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tensortrace.trace import events
from tensortrace.errors import ScenarioError
from tensortrace.trace import Step
from tensortrace.run.runner import Limits, run_scenario
from tensortrace.scenario import MAX_EXPANDED_STEPS, MAX_VARIANTS, loads_scenario
from tensortrace.record.tracer import MAX_MESSAGE, MAX_WARNINGS


def trace_of(text: str, tmp_path: Path, safe: bool = True, **options):
    scenario = loads_scenario(text, path=str(tmp_path / "s.yaml"))
    [trace] = run_scenario(scenario, safe=safe, limits=Limits(timeout=60, **options))
    return trace


def test_a_huge_exception_message_is_cut_in_the_child(tmp_path: Path) -> None:
    trace = trace_of(
        "title: t\nsteps:\n  - raise ValueError('x' * 40_000_000)\n  - a = torch.ones(1)\n",
        tmp_path,
    )
    error = trace.steps[0].error
    assert error.type == "ValueError"
    assert len(error.message) < MAX_MESSAGE + 100
    assert error.message.endswith(f"({40_000_000 - MAX_MESSAGE:,} more characters not recorded)")
    assert trace.steps[1].status == "ok"


def test_many_warnings_are_counted_not_all_recorded(tmp_path: Path) -> None:
    text = (
        "title: t\nsteps:\n  - run: |\n      import warnings\n      for i in range(5000):\n        "
        "  warnings.warn(f'w{i}')\n    warns: {type: UserWarning, match: w4999}\n"
    )
    step = trace_of(text, tmp_path, safe=False).steps[0]
    assert len(step.warnings) == MAX_WARNINGS + 1
    assert (
        step.warnings[-1].message
        == f"{5000 - MAX_WARNINGS:,} more warnings in this step were not recorded"
    )
    assert step.behaved, "a declared warning past the recorded ones still counts"


def test_an_exception_whose_str_fails_is_recorded_as_python_prints_it(tmp_path: Path) -> None:
    text = (
        "title: t\nsteps:\n  - run: |\n      class Bad(Exception):\n          def __str__(self):\n "
        "             raise RuntimeError('no')\n      raise Bad()\n  - a = torch.ones(1)\n"
    )
    trace = trace_of(text, tmp_path)
    assert trace.steps[0].error.type == "Bad"
    assert trace.steps[0].error.message == "<exception str() failed>"
    assert trace.steps[1].status == "ok"


def test_the_whole_trace_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tensortrace.run.runner.MAX_TRACE_BYTES", 200_000)
    steps = "".join("  - print('y' * 60_000)\n" for _ in range(10))
    trace = trace_of(f"title: t\nsteps:\n{steps}", tmp_path)
    assert 1 <= len(trace.steps) < 10
    assert "sent more than 195 KiB of trace; the tracer stopped reading it" in trace.aborted
    assert trace.steps[-1].status == "killed"


def test_a_line_longer_than_the_event_cap_is_refused() -> None:
    reader = events.LineReader(max_line=1000)
    assert reader.feed(b'{"a": 1}\n{"b"') == [b'{"a": 1}']
    with pytest.raises(events.EventError, match="larger than"):
        reader.feed(b"x" * 2000)


def test_the_line_reader_is_linear_in_the_bytes() -> None:
    """One 8 MB line in 4 KB chunks: a quadratic reader rescans the buffer 2,000 times."""
    reader = events.LineReader()
    chunk = b"x" * 4096
    began = time.process_time()
    for _ in range(2000):
        assert reader.feed(chunk) == []
    lines = reader.feed(b"\n")
    spent = time.process_time() - began
    assert len(lines) == 1 and len(lines[0]) == 4096 * 2000
    assert spent < 2.0, f"{spent:.2f} s of CPU for 8 MB"


def test_a_malformed_event_is_an_event_error() -> None:
    for line in (b"not json", b'{"event": "nope"}', b'{"event": "step", "step": 3}', b"[]"):
        with pytest.raises(events.EventError):
            events.decode(line)


def test_events_round_trip_through_the_codec() -> None:
    step = Step(index=1, code="a = 1", line=3, status="ok")
    assert events.decode(events.encode(step)) == step
    assert json.loads(events.encode(events.Unusable("x\x1b"))) == {
        "event": "unusable",
        "message": "x\x1b",
    }


def test_an_unchanged_tensor_crosses_as_a_reference_and_a_bad_reference_is_refused() -> None:
    from render_fixtures import tensor

    from tensortrace.trace import record_to_dict

    a, b = tensor("a", [1.0, 2.0]), tensor("b", [3.0])
    first, second = (
        Step(index=1, code="a", line=1, status="ok", tensors=(a, b)),
        Step(index=2, code="b", line=2, status="ok", tensors=(a, b)),
    )
    encoder, decoder = events.Encoder(), events.Decoder()
    lines = [encoder.encode(first), encoder.encode(second)]
    assert json.loads(lines[1])["step"]["tensors"] == [0, 1] and b'"tensors":[0,1]' in lines[1]
    got = [decoder.decode(line) for line in lines]
    assert [record_to_dict(s) for s in got] == [record_to_dict(first), record_to_dict(second)]
    assert got[1].tensors[0] is got[0].tensors[0] and got[1].tensors[1] is got[0].tensors[1]
    for bad, why in (
        (2, r"\$.tensors\[1\]: a reference to tensor 2 of a previous step that has 2$"),
        (-1, r"\$.tensors\[1\]: expected int >= 0$"),
        (None, r"\$.tensors\[1\]: expected int or object, got null$"),
        (True, r"\$.tensors\[1\]: expected int or object, got bool$"),
        ("0", r"\$.tensors\[1\]: expected int or object, got str$"),
        (0.0, r"\$.tensors\[1\]: expected int or object, got float$"),
    ):
        line = lines[1].replace(
            b'"tensors":[0,1]', b'"tensors":[0,' + json.dumps(bad).encode() + b"]"
        )
        assert line != lines[1]
        replay = events.Decoder()
        replay.decode(lines[0])
        with pytest.raises(events.EventError, match=why):
            replay.decode(line)


def test_the_scenario_has_a_wall_clock_limit_beside_the_steps(tmp_path: Path) -> None:
    steps = "".join("  - time.sleep(0.4)\n" for _ in range(20))
    trace = trace_of(
        f"title: t\nsetup: import time\nsteps:\n{steps}", tmp_path, safe=False, scenario_timeout=1.5
    )
    assert trace.aborted is not None and "1.5 s time limit" in trace.aborted
    assert trace.steps[-1].status == "timeout"
    assert len(trace.steps) < 20


def _variant_bomb(count: int) -> str:
    lines = ["title: bomb", "variants:", "  v0: &v {alias: 'a.clone()'}"]
    lines += [f"  v{i}: *v" for i in range(1, count)]
    lines += ["steps:", "  - a = torch.ones(2)", "  - b = ${alias}"]
    return "\n".join(lines) + "\n"


def test_a_variant_bomb_is_refused_at_once() -> None:
    began = time.process_time()
    with pytest.raises(
        ScenarioError, match=f"20,000 variants, over the limit of {MAX_VARIANTS}"
    ) as info:
        loads_scenario(_variant_bomb(20_000), path="bomb.yaml")
    assert time.process_time() - began < 10
    assert str(info.value).startswith("bomb.yaml:3:3: ")


def test_the_largest_allowed_number_of_variants_loads() -> None:
    scenario = loads_scenario(_variant_bomb(MAX_VARIANTS), path="ok.yaml")
    assert len(scenario.resolved()) == MAX_VARIANTS


def test_steps_times_variants_is_capped() -> None:
    steps = MAX_EXPANDED_STEPS // 4 + 1
    lines = (
        ["title: t", "variants:"]
        + [f"  v{i}: {{x: '1'}}" for i in range(4)]
        + ["steps:"]
        + ["  - a = ${x}"] * steps
    )
    with pytest.raises(ScenarioError, match="over the limit of"):
        loads_scenario("\n".join(lines) + "\n", path="many.yaml")
