"""The Python API: ``tensortrace.trace``, ``load_scenario``, ``Trace.render``, and errors worded for
Python."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import textwrap

import pytest

import tensortrace
from tensortrace.render import render

from conftest import REPO

TEXT = textwrap.dedent(
    """\
    title: a view and its base
    steps:
      - a = torch.zeros(3)
      - b = a[1:]
      - b.add_(1)
    """
)


def test_importing_the_package_imports_neither_torch_nor_rich_nor_yaml():
    code = (
        "import sys, tensortrace; print(sorted(m for m in ('torch', 'rich', 'yaml', 'typer') if m"
        " in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_public_name_resolves():
    for name in tensortrace.__all__:
        assert getattr(tensortrace, name) is not None, name
    assert callable(tensortrace.snoop) and isinstance(tensortrace.snoop, type)
    with pytest.raises(AttributeError):
        tensortrace.no_such_name


def test_load_scenario_takes_a_bundled_name_a_path_or_text(tmp_path):
    by_name = tensortrace.load_scenario("detach")
    by_path = tensortrace.load_scenario(REPO / "scenarios" / "detach.yaml")
    by_str = tensortrace.load_scenario(str(REPO / "scenarios" / "detach.yaml"))
    assert by_name.title == by_path.title == by_str.title
    assert len(by_name.steps) == len(by_path.steps) > 0
    from_text = tensortrace.load_scenario(TEXT)
    assert from_text.title == "a view and its base" and len(from_text.steps) == 3


def test_an_unknown_name_is_one_python_sentence():
    with pytest.raises(tensortrace.ScenarioError) as info:
        tensortrace.load_scenario("detch")
    message = str(info.value)
    assert "did you mean 'detach'" in message and "tensortrace list" not in message
    with pytest.raises(tensortrace.ScenarioError, match=r"<string>:2:"):
        tensortrace.load_scenario("title: x\nsteps: 3\n")


def test_trace_runs_a_file_in_a_child_process_as_the_command_line_does(tmp_path):
    path = tmp_path / "pid.yaml"
    path.write_text(
        "title: pid\nsteps:\n  - pid = torch.tensor(__import__('os').getpid())\n", encoding="utf-8"
    )
    trace = tensortrace.trace(path, safe=False)
    (step,) = trace.steps
    (pid,) = step.tensors
    assert pid.values.data != os.getpid()  # not this process
    here = tensortrace.trace(
        tensortrace.load_scenario(path), safe=False
    )  # a Scenario runs in this process
    assert here.steps[0].tensors[0].values.data == os.getpid()


def test_trace_of_text_records_real_sharing_and_versions():
    trace = tensortrace.trace(TEXT)
    assert trace.passed and trace.environment.safe
    last = {t.name: t for t in trace.steps[-1].tensors}
    assert last["a"].storage == last["b"].storage
    assert last["a"].version == last["b"].version == 1
    assert last["a"].values.data == (0.0, 1.0, 1.0)


def test_errors_name_keyword_arguments_not_flags():
    with pytest.raises(tensortrace.PolicyError) as info:
        tensortrace.trace("title: t\nsteps:\n  - import os\n")
    assert "safe=False" in str(info.value) and "--trust" not in str(info.value)
    assert str(info.value).startswith("<string>:3:")
    with pytest.raises(tensortrace.UsageError, match=r"^device='gpu' is not one of cpu"):
        tensortrace.trace("detach", device="gpu")
    with pytest.raises(tensortrace.UsageError, match=r"fmt='xml' is not one of"):
        tensortrace.trace(TEXT).render("xml")


def test_a_scenario_with_variants_gives_one_trace_each_rendered_side_by_side():
    scenario = tensortrace.load_scenario("copy-methods")
    traces = tensortrace.trace("copy-methods")
    assert isinstance(traces, tensortrace.Traces)
    assert [t.scenario.variant for t in traces] == list(scenario.variant_names)
    assert traces.render("markdown") == render(list(traces), "markdown")
    one = tensortrace.trace("copy-methods", variant="deepcopy")
    assert isinstance(one, tensortrace.Trace) and one.scenario.variant == "deepcopy"
    with pytest.raises(tensortrace.UsageError, match=r"variant='nope' is not a variant"):
        tensortrace.trace("copy-methods", variant="nope")


def test_render_takes_the_command_lines_options_as_keywords():
    trace = tensortrace.trace(TEXT)
    assert trace.render("markdown") == render([trace], "markdown")
    only_b = trace.render("console", show=["b"], steps=[3], width=80)
    assert "b.add_(1)" in only_b and "a = torch.zeros(3)" not in only_b
    assert " a " not in only_b.split("b.add_(1)", 1)[1].split("\n\n")[0].replace("a[", "")


def test_notebook_views_are_a_fragment_and_markdown():
    trace = tensortrace.trace(TEXT)
    page = trace._repr_html_()
    assert page.startswith("<div") and "<body" not in page and "<style" not in page
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "b.add_(1)" in text and "S1" in text and "shared memory: S1 holds a, b" in text
    assert trace._repr_markdown_() == render([trace], "markdown")
