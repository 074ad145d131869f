"""Text from a scenario never reaches the reader's terminal or page as control characters.

A hostile scenario puts escape sequences (OSC 52 clipboard writes, OSC 8
links, clear-screen, cursor movement) and bidi overrides into every place a
user controls: title, description, note, a code comment, printed output, an
exception message, a tensor's name, an expectation. Every text format shows
them spelled out (``\\x1b``, ``\\u202e``); only the console's own colours are
escape sequences.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tensortrace.render import RenderOptions, render
from tensortrace.cli.listing import render_scenario_list
from tensortrace.render.visible import visible

from conftest import cli

TEXT_FORMATS = ("console", "markdown", "html", "svg", "dot", "mermaid")
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
# What the console's own styling writes: SGR sequences, ESC [ digits ; m.
OWN_STYLING = re.compile(r"\x1b\[[0-9;]*m")

# YAML double-quoted strings turn \e, \a and \u202e into the real characters;
# inside the Python code, '\x1b' is Python's escape, so the run makes them.
HOSTILE = r"""
title: "Hostile \e]52;c;aGVsbG8=\a title \u202e[red]markup[/red]"
description: "about \e[2J <script>alert(1)</script> [link=http://x.example]y[/link]"
steps:
  - run: "a = torch.ones(2, requires_grad=True)  # comment \e[1A\e[2K \u2066"
    note: "note \e]8;;http://evil.example\e\\click\e]8;;\e\\ <script>bad()</script>"
  - run: print('\x1b]52;c;aGk=\x07 printed \x1b[2J \u202e')
  - run: "d = {'\e[2Jk': a * 2}"
  - run: e = d['\x1b[2Jk'].sum()
    graph: [e]
  - run: raise ValueError('\x1b[31mboom\x1b[0m \u202eevil')
    raises: ValueError
  - run: b = a * 2
    expect: ["'\e[2J' == 'x'"]
"""


def invoke(*args: str):
    result = cli(*args)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def assert_no_raw_controls(text: str) -> None:
    assert "\x1b" not in text
    assert "\x07" not in text
    assert not any(ch in text for ch in BIDI)
    assert not any(0x80 <= ord(ch) <= 0x9F for ch in text)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The hostile scenario, run once through the command line and saved as JSON."""
    folder = tmp_path_factory.mktemp("hostile")
    scenario = folder / "hostile.yaml"
    scenario.write_text(HOSTILE, encoding="utf-8")
    trace = folder / "trace.json"
    result = invoke("run", str(scenario), "--format", "json", "-o", str(trace))
    assert result.returncode == 1, result.stderr  # the expectation fails, as written
    # Diagrams name the scenario (its title) in each cluster only when there are several.
    body = json.loads(trace.read_text(encoding="utf-8"))
    (folder / "twice.json").write_text(json.dumps({"traces": [body, body]}), encoding="utf-8")
    return trace


def test_json_keeps_the_recorded_strings_exactly(saved):
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["scenario"]["title"].startswith("Hostile \x1b]52;c;")
    printed = [s["stdout"] for s in data["steps"] if s.get("stdout")]
    assert printed and "\x1b]52;c;aGk=\x07" in printed[0]


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_every_text_format_shows_control_characters_spelled_out(saved, fmt):
    result = invoke("render", str(saved.parent / "twice.json"), "--format", fmt, "--width", "200")
    assert result.returncode == 1, result.stderr
    assert_no_raw_controls(result.stdout)
    assert "\\x1b" in result.stdout or "\\\\x1b" in result.stdout  # dot doubles backslashes


@pytest.mark.parametrize("fmt", ("console", "markdown"))
def test_each_place_a_scenario_writes_is_spelled_out(saved, fmt):
    text = invoke("render", str(saved), "--format", fmt, "--width", "200").stdout
    if fmt == "markdown":  # a title's brackets are escaped, so that they never make a link
        text = text.replace("\\[", "[").replace("\\]", "]")
    for spelled in (
        "Hostile \\x1b]52;c;aGVsbG8=\\x07 title \\u202e",  # title
        "comment \\x1b[1A\\x1b[2K \\u2066",  # code comment
        "note \\x1b]8;;http://evil.example",  # note
        "\\x1b]52;c;aGk=\\x07 printed \\x1b[2J \\u202e",  # printed output
        "\\x1b[31mboom\\x1b[0m \\u202eevil",  # exception message
        "d['\\x1b[2Jk']",  # a tensor's name
    ):
        assert spelled in text, spelled


def test_console_prints_rich_markup_in_scenario_text_literally(saved):
    text = invoke("render", str(saved), "--width", "200").stdout
    assert "[red]markup[/red]" in text
    assert "[link=http://x.example]y[/link]" in text


def test_markdown_shows_html_from_the_scenario_as_text(saved):
    text = invoke("render", str(saved), "--format", "markdown").stdout
    assert "<script>" not in text
    assert "&lt;script>bad()" in text and "&lt;script>alert(1)" in text


def test_in_colour_only_the_console_own_styling_is_an_escape(saved):
    result = invoke("render", str(saved), "--format", "json")
    from tensortrace.trace import Trace

    trace = Trace.from_dict(json.loads(result.stdout))
    text = render([trace], "console", RenderOptions(width=200, color=True))
    assert OWN_STYLING.search(text)  # colour is on
    assert "\x1b" not in OWN_STYLING.sub("", text)
    assert not any(ch in text for ch in BIDI)
    assert "\\x1b]52;c;aGk=" in OWN_STYLING.sub("", text)


def test_the_jsonl_stream_of_a_saved_trace_keeps_the_strings(saved):
    lines = invoke("render", str(saved), "--format", "jsonl").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events][0] == "start" and events[-1]["event"] == "end"
    assert events[0]["scenario"]["title"].startswith("Hostile \x1b]52")


def test_check_lines_spell_out_what_they_quote(tmp_path):
    scenario = tmp_path / "loud.yaml"
    scenario.write_text(
        "title: loud\nsteps:\n  - run: raise ValueError('\\x1b]52;c;aGk=\\x07 \\u202e')\n",
        encoding="utf-8",
    )
    result = invoke("check", str(scenario))
    assert result.returncode == 1
    assert_no_raw_controls(result.stdout)
    assert "ValueError: \\x1b]52;c;aGk=\\x07 \\u202e" in result.stdout


def test_error_messages_on_stderr_spell_out_what_they_quote(tmp_path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text('title: "bad \\e[2J"\nsteps: 3\n', encoding="utf-8")
    result = invoke("run", str(scenario))
    assert result.returncode == 2
    assert result.stderr.startswith("tensortrace: ")
    assert_no_raw_controls(result.stderr)


def test_a_lone_surrogate_stays_with_its_file_and_the_next_file_is_checked(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "title: broken\nsteps:\n  - run: raise ValueError('\\udc80')\n", encoding="utf-8"
    )
    fine = tmp_path / "fine.yaml"
    fine.write_text("title: fine\nsteps:\n  - a = torch.ones(2)\n", encoding="utf-8")
    result = invoke("check", str(broken), str(fine))
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"FAIL {broken}: step 1 (line 3): raised ValueError")
    assert lines[1] == f"PASS {fine}"
    assert lines[2] == "1 passed, 1 failed"
    assert result.returncode == 1


def test_visible_spells_each_kind_of_control_and_keeps_lines():
    assert visible("a\x1bb") == "a\\x1bb"
    assert visible("\x7f\x85\x9b") == "\\x7f\\x85\\x9b"
    assert visible("\u202e\u2066\u200f\u061c") == "\\u202e\\u2066\\u200f\\u061c"
    assert visible("\udc80") == "\\udc80"
    assert visible("line one\n\tline two") == "line one\n\tline two"
    assert visible("plain ≠ text") == "plain ≠ text"


def test_the_list_table_spells_out_titles_and_tags():
    class Entry:
        name, title, tags = "evil", "title \x1b]52;c;aGk=\x07 [red]x[/red]", ("t\u202e",)

    text = render_scenario_list([Entry()], width=120, color=False)
    assert_no_raw_controls(text)
    assert "title \\x1b]52;c;aGk=\\x07 [red]x[/red]" in text and "t\\u202e" in text


def test_a_file_whose_result_cannot_be_reported_gets_its_own_error_line(tmp_path, monkeypatch):
    import tensortrace.cli.check as check

    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    for path in (first, second):
        path.write_text("title: t\nsteps:\n  - a = torch.ones(2)\n", encoding="utf-8")
    real = check.check_line

    def breaks_on_the_first(trace, target):
        if target == str(first):
            raise UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed")
        return real(trace, target)

    monkeypatch.setattr(check, "check_line", breaks_on_the_first)
    result = invoke("check", str(first), str(second))
    assert result.returncode == 2
    assert result.stderr.startswith(f"ERROR {first}: could not be checked (UnicodeEncodeError")
    assert result.stdout.splitlines() == [
        f"PASS {second}",
        "1 passed, 0 failed, 1 could not be used",
    ]


# --- convert writes no raw control or bidi character ----------------------------------------

CONVERTED = (
    '"""Title \u202e with an override\n\nA description \u2066 with an isolate \u2069."""\n'
    "import torch\n\n"
    "# A note \u202e that reverses, [link](http://evil.example) and \x1b]8;;x\x1b\\ stays.\n"
    "a = torch.ones(2)  # a comment \u202e reversed\n"
    'b = "\u200f\x1b[2J"  # raw RLM and ESC in a string\n'
    "# expect: a.sum().item() == 2.0  # \u061c\n"
    "c = a * 2\n"
    "for i in range(2):\n"
    "    c = c + i  # \u2067 inside a block\n"
)


def test_convert_spells_control_and_bidi_characters_and_loads_back_the_same(tmp_path):
    from tensortrace.cli.convert import scenario_yaml
    from tensortrace.scenario.loader import loads_scenario
    from tensortrace.scenario import load_scenario

    source = tmp_path / "hostile.py"
    source.write_text(CONVERTED, encoding="utf-8")
    original = load_scenario(source)
    text = scenario_yaml(original)
    assert_no_raw_controls(text)
    assert not any(ch in text for ch in "\u2028\u2029")
    assert "\\u202e" in text and "\\x1b" in text and "\\u200f" in text
    back = loads_scenario(text, path="hostile.yaml")
    assert back.title == original.title and "\u202e" in back.title
    assert back.description == original.description
    assert [s.run.text.rstrip("\n") for s in back.steps] == [
        s.run.text.rstrip("\n") for s in original.steps
    ]
    assert [s.note for s in back.steps] == [s.note for s in original.steps]
    assert [tuple(c.text for c in s.expect) for s in back.steps] == [
        tuple(c.text for c in s.expect) for s in original.steps
    ]
    assert "\u2067" in back.steps[-1].run.text and "\x1b[2J" in back.steps[1].run.text


def test_convert_on_the_command_line_writes_the_escapes(tmp_path):
    source = tmp_path / "hostile.py"
    source.write_text(CONVERTED, encoding="utf-8")
    result = invoke("convert", str(source))
    assert result.returncode == 0, result.stderr
    assert_no_raw_controls(result.stdout)
    assert '# a comment \\u202e reversed"' in result.stdout


def test_convert_leaves_ordinary_text_as_literal_blocks(tmp_path):
    from tensortrace.cli.convert import scenario_yaml
    from tensortrace.scenario import load_scenario

    source = tmp_path / "plain.py"
    source.write_text(
        "import torch\n\n# a ≠ b, in plain words\na = torch.ones(2)\nfor i in range(2):\n"
        "    a = a + i\n",
        encoding="utf-8",
    )
    text = scenario_yaml(load_scenario(source))
    assert "note: a ≠ b, in plain words" in text and "run: |" in text


@pytest.mark.parametrize(
    "text", ["a \u200d\u200d名 ", "\u200da", "x\u200d\u200dy", "a\u200d", "\u200d"]
)
def test_a_joiner_that_joins_nothing_is_spelled_and_rich_draws_it_at_any_width(text):
    """rich's wrapping raises ZeroDivisionError on 'a \\u200d\\u200d名 ' at width 1; spelled, it
    draws, and a joiner inside an emoji sequence stays one glyph."""
    import io

    from rich.console import Console

    shown = visible(text)
    assert "\u200d" not in shown and "\\u200d" in shown
    for width in range(1, 8):
        Console(file=io.StringIO(), width=width).print(shown)
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert visible(family) == family
