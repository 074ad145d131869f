"""Python files as scenarios: steps, comment directives, line numbers, errors, convert.

The seed snippets in tests/data/seeds/ are code blocks from the Chinese
articles in shared/seeds, copied as they are (only the docstring added, and
``import torch`` where the article leaves it out). Each must print what plain
Python prints, up to the first error, and raise what plain Python raises, at
the same line. Left out, and why:

- 002's blocks 1-11 and 13: fragments of a list, indented by the article's
  markdown; plain Python refuses them ("unexpected indent"), as tensortrace
  does (tests/bad_inputs has one).
- 002's blocks 15-18 and 21: use ``a_tensor`` without defining it (NameError
  at line 1 in both; nothing to compare).
- 002's blocks 22-23: ``copy.copy`` of Python lists, no tensor in them.
- 003's block 0: the source of ``Tensor.detach`` pasted with U+3000
  ideographic spaces as indentation; tests/bad_inputs/ideographic-space.py
  checks the message that gets.
- 003's blocks 1 and 14: interactive sessions (``>>>`` prompts), not files;
  3, 5, 7, 9, 11 and 13 are printed output, not code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from conftest import REPO, Result, cli, resolved, scripts_in_one_python
from tensortrace.errors import ScenarioError
from tensortrace.scenario import load_scenario, loads_scenario

SEEDS = sorted((Path(__file__).resolve().parents[1] / "data" / "seeds").glob("*.py"))
EXAMPLE = REPO / "examples" / "detach.py"


def trace_of(path, *args):
    result = cli("run", str(path), "--format", "json", *args)
    assert result.returncode in (0, 1), result.stderr
    return resolved(json.loads(result.stdout))


def _addresses_masked(text: str) -> str:
    """data_ptr() values and object addresses differ from one process to the next."""
    return re.sub(r"0x[0-9a-f]+", "0x…", re.sub(r"\b\d{9,}\b", "<address>", text))


def test_there_are_seed_snippets():
    assert len(SEEDS) >= 8


@pytest.fixture(scope="module")
def plain_python() -> Dict[Path, Result]:
    """What plain Python prints and raises for each seed, all run in one Python of their own."""
    return scripts_in_one_python(SEEDS, cwd=SEEDS[0].parent)


def test_the_plain_python_runner_sees_what_a_script_of_its_own_does(plain_python):
    """The shared runner gives each seed what ``python SEED`` gives it alone."""
    seed = next(s for s in SEEDS if s.stem == "detach_backward_fails")
    alone = subprocess.run(
        [sys.executable, str(seed)], capture_output=True, text=True, timeout=120, cwd=seed.parent
    )
    shared = plain_python[seed]
    assert shared.returncode == alone.returncode == 1
    assert _addresses_masked(shared.stdout) == _addresses_masked(alone.stdout)
    assert shared.stderr == alone.stderr


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.stem)
def test_a_seed_snippet_prints_and_raises_what_plain_python_does(seed, plain_python):
    plain = plain_python[seed]
    trace = trace_of(seed)
    steps = trace["steps"]
    printed = (trace["setup"] or {}).get("stdout", "") if trace["setup"] else ""
    failed = next((s for s in steps if s["status"] != "ok"), None)
    for step in steps:
        printed += step["stdout"]
        if step is failed:
            break
    assert _addresses_masked(printed) == _addresses_masked(plain.stdout)
    if plain.returncode == 0:
        assert failed is None, failed
        return
    # plain Python's traceback: the line of the module-level frame, and the exception's class
    line = int(re.findall(r'File "[^"]*", line (\d+), in <module>', plain.stderr)[-1])
    error_type = plain.stderr.strip().splitlines()[-1].split(":")[0]
    assert failed is not None, plain.stderr
    assert failed["status"] == "raised"
    assert failed["error"]["type"] == error_type
    first, last = failed["line"], failed["line"] + failed["code"].count("\n") - 1
    assert first <= line <= last
    assert failed["error"]["line"] == line


def test_the_seeds_keep_running_after_an_error_and_fail_check():
    seed = next(s for s in SEEDS if s.stem == "detach_backward_fails")
    steps = trace_of(seed)["steps"]
    raised = [s["index"] for s in steps if s["status"] == "raised"]
    assert raised and raised[0] < steps[-1]["index"]
    assert steps[-1]["status"] == "ok"  # print(b.grad) after the failed backward still ran
    result = cli("check", str(seed))
    assert result.returncode == 1
    assert f"step {raised[0]} (line 22): raised RuntimeError" in result.stdout


# --- steps ----------------------------------------------------------------------------------


def _load(text: str):
    return loads_scenario(text, path="snippet.py")


def test_each_top_level_statement_is_a_step_with_the_files_line_numbers():
    scenario = _load(
        "import torch\nimport torch.nn as nn\n\n"
        "a = torch.ones(2); b = a * 2\n"
        "for i in range(2):\n    a.add_(1)\n\n"
        "@torch.no_grad()\ndef f(x):\n    return x * 2\n"
        "c = (a +\n     b)\n"
    )
    assert [s.run.line for s in scenario.steps] == [4, 5, 8, 11]
    assert scenario.steps[0].run.text == "a = torch.ones(2); b = a * 2\n"
    assert scenario.steps[1].run.text == "for i in range(2):\n    a.add_(1)\n"
    assert scenario.steps[2].run.text.startswith("@torch.no_grad()\ndef f(x):")
    assert scenario.setup[0].text == "import torch\nimport torch.nn as nn\n"


def test_a_file_of_imports_only_makes_them_steps():
    scenario = _load("import torch\nimport math\n")
    assert not scenario.setup and len(scenario.steps) == 2


def test_notes_and_directives_come_from_the_comment_block_directly_above():
    scenario = _load(
        "# Title line\n# more words\n\nimport torch\n\n"
        "# lonely comment, separated by a blank line\n\n"
        "# The note,\n# on two lines.\n# expect: a.sum() == 3\n# expect: a._version == 0\n"
        "# show: a\n# graph: true\na = torch.ones(3)\n"
        "#raises:RuntimeError, match: does not (require|have)\n# warns: UserWarning\nb = 1\n"
    )
    assert scenario.title == "Title line" and scenario.description == "more words"
    first, second = scenario.steps
    assert first.note == "The note,\non two lines."
    assert [c.text for c in first.expect] == ["a.sum() == 3", "a._version == 0"]
    assert (first.expect[0].line, first.expect[0].column) == (10, 11)
    assert first.show == ("a",) and first.graph is True
    assert second.raises.type == "RuntimeError" and second.raises.match == "does not (require|have)"
    assert second.warns.type == "UserWarning" and second.note is None


def test_the_module_docstring_gives_title_and_description_and_is_no_step():
    scenario = _load('"""A title\n\nThe description."""\na = 1\n')
    assert (scenario.title, scenario.description, len(scenario.steps)) == (
        "A title",
        "The description.",
        1,
    )


def test_comments_right_above_the_first_import_are_the_header():
    scenario = _load(
        "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n# clone vs detach\n# in two steps\nimport"
        " torch\na = torch.ones(2)\n"
    )
    assert (scenario.title, scenario.description) == ("clone vs detach", "in two steps")
    assert scenario.steps[0].note is None


def test_without_a_docstring_or_header_the_title_is_the_file_name():
    assert _load("a = 1\n").title == "snippet.py"


def test_an_indented_comment_above_a_statement_is_not_its_note():
    scenario = _load("for i in range(2):\n    pass\n    # the loop's own comment\nb = 2\n")
    assert scenario.steps[1].note is None


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "a = 1\n# expect: a == 1\n\nb = 2\n",
            "snippet.py:2:1: '# expect:' applies to the statement directly below it",
        ),
        (
            "a = 1\nb = 2  # trailing comments stay in the code\n# expect: b = 2\nc = 3\n",
            "snippet.py:3:13: an expectation of step 3 is not a valid Python expression",
        ),
        (
            "b = 2  # expect: b == 2\n",
            (
                "snippet.py:1:8: '# expect:' applies to the statement directly below it, and this"
                " one has none"
            ),
        ),
        (
            "for i in range(2):\n    # expect: i == 1\n    pass\n",
            "snippet.py:2:5: '# expect:' applies",
        ),
        (
            "# raises: RunTimeError\na = 1\n",
            (
                "snippet.py:1:11: '# raises:' of step 1: 'RunTimeError' is not an exception class"
                " of Python or torch; did you mean 'RuntimeError'?"
            ),
        ),
        (
            "# raises: RuntimeError, match: (\na = 1\n",
            "snippet.py:1:32: the match of '# raises:' of step 1 is not a valid regular expression",
        ),
        (
            "# raises: RuntimeError, mtch: x\na = 1\n",
            (
                "snippet.py:1:25: '# raises:' of step 1: after the class name, write ', match:"
                " <regular expression>'"
            ),
        ),
        (
            "# warns: RuntimeError\na = 1\n",
            "snippet.py:1:10: '# warns:' of step 1: 'RuntimeError' is not a warning class",
        ),
        ("# expect:\na = 1\n", "snippet.py:1:10: '# expect:' of step 1 is empty"),
        ("# show: a b\na = 1\n", "snippet.py:1:9: 'a b' in '# show:' of step 1 is not a name"),
        (
            "# raises: KeyError\n# raises: KeyError\na = 1\n",
            "snippet.py:2:1: a step may declare '# raises:' once",
        ),
    ],
)
def test_a_bad_directive_is_refused_at_its_place(text, message):
    with pytest.raises(ScenarioError) as info:
        _load(text)
    assert message in str(info.value)


def test_a_directive_with_a_blank_line_below_it_is_refused():
    with pytest.raises(ScenarioError, match=r"snippet.py:3:1: '# expect:' applies"):
        _load("for i in range(2):\n    pass\n# expect: i == 1\n\nb = 2\n")


def test_a_class_the_file_defines_may_be_declared():
    scenario = _load("class Boom(Exception):\n    pass\n\n# raises: Boom\nraise Boom()\n")
    assert scenario.steps[1].raises.type == "Boom"


def test_a_main_guard_runs_as_one_step_and_says_so():
    scenario = _load('a = 1\nif __name__ == "__main__":\n    a = 2\n')
    assert scenario.script and scenario.argv == ()
    assert (
        scenario.notices
        and "line 2" in scenario.notices[0]
        and "runs as one step" in scenario.notices[0]
    )


def test_a_coding_declaration_is_honoured(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\nprint(name)\n")
    trace = trace_of(path)
    assert trace["steps"][-1]["stdout"] == "\u00e9\n"


# --- running ------------------------------------------------------------------------------


def test_the_example_passes_check_and_its_declarations_are_judged():
    assert cli("check", str(EXAMPLE)).returncode == 0
    trace = trace_of(EXAMPLE)
    assert trace["passed"]
    by_line = {s["line"]: s for s in trace["steps"]}
    source = EXAMPLE.read_text(encoding="utf-8").splitlines()

    def line_of(code: str) -> int:
        return source.index(code) + 1

    assert by_line[line_of("(b * 3).sum().backward()")]["raised_as_declared"] is True
    assert [e["passed"] for e in by_line[line_of("b = a.detach()")]["expectations"]] == [True, True]
    assert by_line[line_of("out = (a * 2).sum()")]["graphs"]


def test_an_expectation_that_fails_fails_check(tmp_path):
    path = tmp_path / "wrong.py"
    path.write_text("a = torch.ones(3)\n# expect: a._version == 5\na.add_(1)\n", encoding="utf-8")
    result = cli("check", str(path))
    assert result.returncode == 1
    assert "step 2 (line 3)" in result.stdout


def test_warnings_and_errors_carry_the_files_line(tmp_path):
    path = tmp_path / "lines.py"
    path.write_text(
        "import warnings\n\na = torch.ones(2)\n\n\nif a.sum() > 0:\n   "
        " warnings.warn('careful')\n\n\nb = 0\nif True:\n    b = 1\n    raise ValueError('no')\n",
        encoding="utf-8",
    )
    steps = trace_of(path, "--trust")["steps"]
    assert steps[1]["line"] == 6 and steps[1]["warnings"][0]["line"] == 7
    assert steps[3]["line"] == 11 and steps[3]["error"]["line"] == 13


def test_safe_mode_refuses_at_the_files_line(tmp_path):
    path = tmp_path / "escape.py"
    path.write_text("a = torch.ones(2)\n\nimport os\n", encoding="utf-8")
    result = cli("run", str(path))
    assert result.returncode == 2
    assert f"{path}:3:1:" in result.stderr and "safe mode" in result.stderr
    assert cli("run", str(path), "--trust", "--format", "json").returncode == 0


def test_steps_and_formats_work_on_a_python_file():
    result = cli("run", str(EXAMPLE), "--steps", "2-3", "--format", "markdown")
    assert result.returncode == 0, result.stderr
    assert "b = a.detach()" in result.stdout and "print(a.grad)" not in result.stdout


# --- convert --------------------------------------------------------------------------------


def _outcomes(trace):
    """What a run showed, step by step: status, error type, stdout, and each tensor's version and
    storage."""
    return [
        (
            s["status"],
            (s["error"] or {}).get("type"),
            s["stdout"],
            s["behaved"],
            sorted((t["name"], t["version"], t["storage"]) for t in s["tensors"]),
        )
        for s in trace["steps"]
    ]


@pytest.mark.parametrize("source", [EXAMPLE] + SEEDS, ids=lambda p: p.stem)
def test_convert_writes_yaml_that_runs_to_the_same_outcomes(source, tmp_path):
    target = tmp_path / f"{source.stem}.yaml"
    result = cli("convert", str(source), "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    converted = load_scenario(target)
    original = load_scenario(source)
    assert [s.run.text.rstrip("\n") for s in converted.steps] == [
        s.run.text.rstrip("\n") for s in original.steps
    ]
    assert _addresses_masked(str(_outcomes(trace_of(target)))) == _addresses_masked(
        str(_outcomes(trace_of(source)))
    )


def test_convert_prints_to_stdout_without_o():
    result = cli("convert", str(EXAMPLE))
    assert result.returncode == 0
    assert result.stdout.startswith("# Converted from") and "raises:" in result.stdout
    assert (
        loads_scenario(result.stdout, path="x.yaml").steps[3].raises.match
        == "does not require grad"
    )


def test_convert_refuses_what_is_not_python_or_a_notebook():
    result = cli("convert", str(REPO / "scenarios" / "detach.yaml"))
    assert result.returncode == 2 and "is not a .py or .ipynb file" in result.stderr


def test_convert_of_a_broken_file_writes_nothing(tmp_path):
    source = tmp_path / "broken.py"
    source.write_text("a = (\n", encoding="utf-8")
    target = tmp_path / "out.yaml"
    result = cli("convert", str(source), "-o", str(target))
    assert result.returncode == 2 and not target.exists()
    assert f"{source}:1:5: the file is not valid Python: '(' was never closed" in result.stderr


def test_the_formats_python_example_runs_and_passes(tmp_path):
    page = (REPO / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    part = page.split("## Python files and notebooks", 1)[1]
    code = part.split("```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.py"
    path.write_text(code, encoding="utf-8")
    trace = trace_of(path)
    assert trace["passed"] and trace["scenario"]["title"] == "detach(): same memory, no graph"
    assert [s["note"] for s in trace["steps"]] == [None, None, "Writing through b changes a."]
    assert [e["passed"] for e in trace["steps"][2]["expectations"]] == [True, True]


def test_the_readmes_python_example_is_the_start_of_the_example_file():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    part = readme.split("### Python files and notebooks", 1)[1]
    code = part.split("```python\n", 1)[1].split("```", 1)[0]
    example = load_scenario(EXAMPLE)
    shown = loads_scenario(code, path="readme.py")
    runs = {s.run.text for s in example.steps}
    assert all(s.run.text in runs for s in shown.steps)
    assert shown.steps[-1].raises == example.steps[3].raises


@pytest.mark.parametrize("suffix", [".py", ".ipynb"])
def test_the_kernels_wall_lets_the_child_read_the_scenario_file_and_not_its_neighbour(
    tmp_path, suffix
):
    from tensortrace.run.confine import available
    from tensortrace.run.runner import run_all

    if "landlock-files" not in available().enforced:
        pytest.skip("this kernel has no Landlock: " + "; ".join(available().missing))
    neighbour = tmp_path / "neighbour.txt"
    neighbour.write_text("private\n", encoding="utf-8")
    path = tmp_path / f"scenario{suffix}"
    reads = [f"print(len(open({str(path)!r}).read()) > 0)", f"open({str(neighbour)!r}).read()"]
    if suffix == ".py":
        path.write_text("\n".join(reads) + "\n", encoding="utf-8")
    else:
        nbformat = pytest.importorskip("nbformat")
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_code_cell(r) for r in reads]
        nbformat.write(notebook, str(path))
    # plain Python inside the wall: safe mode's checks would refuse open() before the kernel is
    # asked
    (trace,) = run_all([load_scenario(path)], safe=False, confine=True)
    assert (
        trace.environment.confinement is not None
        and "landlock-files" in trace.environment.confinement.enforced
    )
    first, second = trace.steps
    assert first.status == "ok" and first.stdout == "True\n"
    assert second.status == "raised" and second.error.type == "PermissionError"


def test_a_python_file_over_the_size_limit_is_refused(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("a = 1\n" * 200_000, encoding="utf-8")
    result = cli("run", str(path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "over the 1,048,576-byte limit" in result.stderr


def test_a_python_file_over_the_step_limit_is_refused(tmp_path):
    path = tmp_path / "long.py"
    path.write_text("a = 1\n" * 5001, encoding="utf-8")
    result = cli("run", str(path))
    assert result.returncode == 2
    assert (
        f"{path}: the file has 5,001 top-level statements, over the limit of 5,000 steps"
        in result.stderr
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "if True:\n\u3000\u3000b = 2\n",
            (
                "snippet.py:2:1: the file is not valid Python: the line has a U+3000 ideographic"
                " space at the start of the line (common in code copied from Chinese or Japanese"
                " web pages)"
            ),
        ),
        (
            "a\u00a0= 1\n",
            (
                "snippet.py:1:2: the file is not valid Python: the line has a U+00A0 no-break"
                " space, which Python does not take as a space; replace it with ordinary spaces"
            ),
        ),
        (
            "x = '\u3000' + (\n",
            "snippet.py:1:11: the file is not valid Python: '(' was never closed",
        ),
    ],
)
def test_a_look_alike_space_is_named_only_when_it_is_the_error(text, message):
    with pytest.raises(ScenarioError) as info:
        _load(text)
    assert message in str(info.value)


def test_convert_has_help_like_every_command():
    result = cli("convert", "-h")
    assert result.returncode == 0 and result.stdout.startswith("Usage:")
    assert "--output" in result.stdout and "<str>" not in result.stdout


def test_convert_writes_a_literal_dollar_brace_as_yaml_spells_it(tmp_path):
    source = tmp_path / "dollar.py"
    source.write_text("a = 1\nprint('cost: ${a}')\n", encoding="utf-8")
    plain = cli("run", str(source), "--format", "json")
    assert plain.returncode == 0
    result = cli("convert", str(source), "-o", str(tmp_path / "out.yaml"))
    assert result.returncode == 0, result.stderr
    assert "$${a}" in (tmp_path / "out.yaml").read_text(encoding="utf-8")  # rule 10's escape
    converted = cli("run", str(tmp_path / "out.yaml"), "--format", "json")
    assert converted.returncode == 0, converted.stderr
    assert [s["stdout"] for s in json.loads(converted.stdout)["steps"]] == [
        s["stdout"] for s in json.loads(plain.stdout)["steps"]
    ]
    assert "cost: ${a}" in json.loads(converted.stdout)["steps"][-1]["stdout"]


def test_a_yaml_scenario_without_variants_reads_dollar_dollar_brace_as_a_literal(tmp_path):
    path = tmp_path / "literal.yaml"
    path.write_text(
        "title: literal\nsteps:\n  - run: print('$${x}')\n    expect: [\"'$${x}' == '$' +"
        " '{x}'\"]\n",
        encoding="utf-8",
    )
    result = cli("run", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    step = json.loads(result.stdout)["steps"][-1]
    assert step["stdout"] == "${x}\n" and step["code"] == "print('${x}')"
