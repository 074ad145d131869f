"""Every unusable input ends with exit 2 and one line naming file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Result, cli
from tensortrace.errors import ScenarioError
from tensortrace.scenario import load_scenario, loads_scenario

BAD = Path(__file__).resolve().parents[1] / "bad_inputs"

# file → what the one line on stderr must contain (location and message)
EXPECTED = {
    "bad-device.yaml": ":2:9: device 'tpu' is not one of cpu, cuda, cuda:N, mps, auto",
    "bad-regex.yaml": ":4:41: 'match' in 'raises' of step 1 is not a valid regular expression",
    "binary.yaml": ": this is a binary file, not a YAML scenario",
    "colon-step.yaml": (
        ":3:5: step 1 has no 'run'; YAML read the step as a mapping because it contains ': '. Quote"
        " the step"
    ),
    "comment-only.yaml": ": the file is empty",
    "duplicate-key.yaml": ":2:1: duplicate key 'title' (first given on line 1)",
    "duplicate-variants.yaml": ":4:3: duplicate key 'one' (first given on line 3)",
    "empty-run.yaml": ":3:10: 'run' of step 1 is empty",
    "empty-steps.yaml": ":2:8: 'steps' is empty",
    "empty.yaml": ": the file is empty",
    "expect-syntax.yaml": (
        ":5:9: an expectation of step 1 is not a valid Python expression: invalid syntax"
    ),
    "missing-steps.yaml": ":1:1: the scenario has no 'steps'",
    "missing-title.yaml": ":1:1: the scenario has no 'title'",
    "not-utf8.yaml": ":1:8: the file is not valid UTF-8 text",
    "placeholder-missing.yaml": ":7:9: placeholder ${alias} has no value in variant 'two'",
    "placeholder-no-variants.yaml": (
        ":3:9: placeholder ${x} is used but the scenario has no 'variants'"
    ),
    "python-tag.yaml": ":3:5: YAML tags such as !!python/... are not allowed",
    "raises-unknown-variant.yaml": (
        ":7:14: 'raises' of step 2 names an unknown variant 'detatch'; did you mean 'detach'?"
    ),
    "seed-not-int.yaml": ":2:7: 'seed' must be a whole number, not a string",
    "step-syntax.yaml": ":6:11: step 2 is not valid Python: '(' was never closed",
    "steps-not-list.yaml": ":2:8: 'steps' must be a list of steps, not a string",
    "title-not-string.yaml": ":1:8: 'title' must be a string, not a list",
    "top-level-list.yaml": (
        ":1:1: a scenario file must be a mapping with 'title' and 'steps', not a list"
    ),
    "unknown-key.yaml": (
        ":2:1: unknown key 'descripton' in the scenario; did you mean 'description'?"
    ),
    "unknown-step-key.yaml": ":4:5: unknown key 'expects' in step 1; did you mean 'expect'?",
    "variant-number.yaml": (
        ":3:11: the value of 'lr' in variant 'a' must be a string, not a number; quote it"
    ),
    "variant-reserved.yaml": ":3:3: a variant cannot be named 'type'",
    "tab-after-key.yaml": (
        ":3:9: a tab stands where YAML takes spaces; YAML indents and separates with spaces only:"
        " replace the tab with spaces"
    ),
    "tab-indent.yaml": (
        ":3:1: a tab indents this line; YAML indents and separates with spaces only: replace the"
        " tab with spaces"
    ),
    "yaml-syntax.yaml": (
        ":5:1: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow"
        " sequence that starts at line 4, column 5)"
    ),
    "yaml-indentation.yaml": (
        ":5:3: bad indentation: the line 'raises: RuntimeError' does not line up with the list that"
        " starts at line 3, column 3"
    ),
    "raises-misspelled.yaml": (
        ":4:13: 'raises' of step 1: 'RunTimeError' is not an exception class of Python or torch;"
        " did you mean 'RuntimeError'?"
    ),
    "warns-misspelled.yaml": (
        ":4:19: 'warns' of step 1: 'UserWarnin' is not a warning class of Python or torch; did you"
        " mean 'UserWarning'?"
    ),
    "expect-assignment.yaml": (
        ":4:21: an expectation of step 1 is not a valid Python expression: an expectation is an"
        " expression that must come out true, and '=' assigns; compare with '==': a.sum() == 2"
    ),
    "step-indentation.yaml": (
        ":6:7: step 2 is not valid Python: expected an indented block after 'if' statement on"
        " line 5"
    ),
    "expect-variant-list.yaml": (
        ":9:9: each item of 'expect' of step 2 must be an expression, not a mapping; to expect by"
        " variant, drop the '- '"
    ),
    # Python files and notebooks (tensortrace/scenario/pyfile.py, notebook.py)
    "binary.py": ": this is a binary file, not a Python file",
    "comment-only.py": ": the file has no statements to run",
    "empty.py": ": the file is empty; write at least one Python statement",
    "ideographic-space.py": (
        ":14:1: the file is not valid Python: the line has a U+3000 ideographic space at the start"
        " of the line (common in code copied from Chinese or Japanese web pages), which Python does"
        " not take as a space; replace it with ordinary spaces"
    ),
    "not-utf8.py": ":2:9: the file is not valid UTF-8 text; save it as UTF-8",
    "py-raises-misspelled.py": (
        ":2:11: '# raises:' of step 2: 'RunTimeError' is not an exception class of Python or torch;"
        " did you mean 'RuntimeError'?"
    ),
    "py-syntax.py": ":2:5: the file is not valid Python: '(' was never closed",
    "stray-directive.py": (
        ":2:17: '# expect:' applies to the statement directly below it, and this one has none"
    ),
    "tabs-and-spaces.py": (
        ":4:1: the file is not valid Python: inconsistent use of tabs and spaces in indentation;"
        " indent with spaces only"
    ),
    "unexpected-indent.py": ":1:5: the file is not valid Python: unexpected indent",
    "empty.ipynb": ": the file is empty; write a notebook with at least one code cell",
    "not-a-notebook.ipynb": ": this JSON is not a Jupyter notebook: it has no list of 'cells'",
    "not-json.ipynb": (
        ":3:1: the notebook is not valid JSON: Expecting property name enclosed in double quotes"
    ),
    "notebook-expect.ipynb": (
        ": cell 2, line 1, column 19: an expectation of step 2 is not a valid Python expression: an"
        " expectation is an expression that must come out true, and '=' assigns; compare with '==':"
        " a.sum() == 3"
    ),
    "notebook-no-code.ipynb": ": the notebook has no code cells to run",
    "notebook-syntax.ipynb": (
        ": cell 4, line 2, column 5: cell 4 is not valid Python: '(' was never closed"
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loading_names_the_place_and_the_problem(name):
    with pytest.raises(ScenarioError) as info:
        load_scenario(BAD / name)
    assert str(BAD / name) + EXPECTED[name] in str(info.value)


def _load(text: str):
    return loads_scenario(text, path="s.yaml")


def test_an_exception_class_the_scenario_defines_may_be_declared():
    scenario = _load(
        "title: own\nsetup: |\n  class ShapeError(Exception):\n    pass\n"
        "steps:\n  - run: raise ShapeError('no')\n    raises: ShapeError\n"
    )
    assert scenario.steps[0].raises.type == "ShapeError"


def test_an_imported_exception_class_may_be_declared():
    scenario = _load(
        "title: t\nsteps:\n  - run: from json import JSONDecodeError as Bad\n    raises: {all:"
        " Bad}\nvariants: {a: {}}\n"
    )
    assert scenario.steps[0].raises["all"].type == "Bad"


@pytest.mark.parametrize(
    "name", ["torch.OutOfMemoryError", "builtins.KeyError", "LookupError", "torch.jit.Error"]
)
def test_dotted_and_builtin_exception_names_that_resolve_are_accepted(name):
    assert (
        _load(f"title: t\nsteps:\n  - run: a = 1\n    raises: {name}\n").steps[0].raises.type
        == name
    )


@pytest.mark.parametrize(
    "declaration, message",
    [
        (
            "raises: torch.NoSuchError",
            "4:13: 'raises' of step 1: 'torch.NoSuchError' does not name anything in torch",
        ),
        ("raises: torch.ones", "4:13: 'raises' of step 1: 'torch.ones' is not an exception class"),
        (
            "warns: RuntimeError",
            (
                "4:12: 'warns' of step 1: 'RuntimeError' is not a warning class; did you mean"
                " 'RuntimeWarning'?"
            ),
        ),
        (
            "raises: {type: Exeption, match: x}",
            (
                "4:20: 'raises' of step 1: 'Exeption' is not an exception class of Python or torch;"
                " did you mean 'Exception'?"
            ),
        ),
    ],
)
def test_a_declared_name_that_names_no_such_class_is_refused_at_load(declaration, message):
    with pytest.raises(ScenarioError) as info:
        _load(f"title: t\nsteps:\n  - run: a = 1\n    {declaration}\n")
    assert message in str(info.value)


def test_a_lone_equals_sign_in_a_multi_line_step_keeps_the_plain_syntax_error():
    with pytest.raises(
        ScenarioError,
        match=(
            r"s.yaml:3:\d+: an expectation of step 1 is not a valid Python expression: invalid"
            r" syntax$"
        ),
    ):
        _load("title: t\nsteps:\n  - {run: a = 1, expect: [a = = 1]}\n")


def test_every_corpus_file_has_an_expectation():
    assert sorted(
        p.name for p in BAD.iterdir() if p.suffix in (".yaml", ".py", ".ipynb")
    ) == sorted(EXPECTED)


def assert_one_clear_line(result: Result, expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_run_refuses_bad_input_with_one_clear_line(name):
    result = cli("run", str(BAD / name), "--format", "json")
    assert_one_clear_line(result, str(BAD / name) + EXPECTED[name])
    assert result.stdout == ""


def test_check_reports_every_unusable_file_and_keeps_going():
    files = [str(BAD / n) for n in sorted(EXPECTED)]
    result = cli("check", *files)
    assert result.returncode == 2
    assert result.stderr.count("ERROR ") == len(files)
    assert result.stdout.strip().endswith(f"0 passed, 0 failed, {len(files)} could not be used")


def test_missing_file(tmp_path):
    result = cli("run", str(tmp_path / "nope.yaml"))
    assert_one_clear_line(result, "nope.yaml: no such file")


def test_unknown_bundled_name_suggests_a_close_one():
    result = cli("run", "clnoe")
    assert_one_clear_line(result, "no bundled scenario named 'clnoe'; did you mean 'clone'?")


def test_directory_given_as_file(tmp_path):
    result = cli("run", str(tmp_path))
    assert_one_clear_line(result, "is a directory, not a scenario file")


def test_file_over_the_size_limit(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("title: big\nsteps:\n" + "  - a = 1\n" * 120_000, encoding="utf-8")
    result = cli("run", str(big))
    assert_one_clear_line(result, "over the 1,048,576-byte limit")


def test_unreadable_file(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path = tmp_path / "secret.yaml"
    path.write_text("title: x\nsteps: [a = 1]\n")
    path.chmod(0)
    assert_one_clear_line(cli("run", str(path)), "cannot be read")


_ROOT = Path(__file__).resolve().parents[2]
_YAML_FILES = sorted(
    p for folder in ("scenarios", "tests") for p in (_ROOT / folder).rglob("*.yaml")
)


def _outcome(path: Path):
    try:
        return load_scenario(str(path))
    except ScenarioError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("path", _YAML_FILES, ids=lambda p: str(p.relative_to(_ROOT)))
def test_libyaml_and_the_pure_python_reader_load_every_file_alike(path, monkeypatch):
    """The loader composes with libyaml when it can; what it reads, and what it refuses and
    where, is what the pure-Python reader (whose messages it words) gives."""
    from tensortrace.scenario import yamlread

    fast = _outcome(path)
    monkeypatch.setattr(yamlread, "_FAST_LOADER", None)
    assert _outcome(path) == fast


@pytest.mark.parametrize(
    "text",
    [
        "title: deep\nsteps: " + "[" * 100_000 + "]" * 100_000,
        "title: deep\nsteps:\n  " + "- " * 60_000 + "x",
        "title: deep\nsteps: " + "{a: " * 60_000 + "1" + "}" * 60_000,
    ],
)
def test_nesting_too_deep_for_libyaml_is_refused_in_words_not_a_crash(text):
    with pytest.raises(ScenarioError, match="nested too deeply"):
        loads_scenario(text, path="deep.yaml")


def _texts():
    from hypothesis import strategies as st

    pieces = st.sampled_from(
        [
            "title: t\n",
            "steps:\n",
            "  - ",
            "- ",
            "run: ",
            "a = 1",
            "x",
            "'q'",
            '"d"',
            ": ",
            ":",
            "? ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            "|\n",
            ">\n",
            "    ",
            "  ",
            "\n",
            "#c",
            "&a ",
            "*a",
            "!!str ",
            "!!python/name:os.system ",
            "<<: ",
            "---\n",
            "...\n",
            "%YAML 1.1\n",
            "é",
            "\u2028",
            "\ufeff",
            "\r\n",
            "@",
            "`",
            "expect: ",
            "note: ",
            "variants:\n",
            "1.5",
            "null",
            "yes",
            "~",
            "0x1F",
            "-",
            "%",
        ]
    )
    return st.lists(pieces, max_size=30).map("".join)


def test_libyaml_and_the_pure_python_reader_agree_on_generated_texts():
    from hypothesis import HealthCheck, given, settings

    from tensortrace.scenario import yamlread

    def outcome(text: str):
        try:
            return loads_scenario(text, path="gen.yaml")
        except ScenarioError as exc:
            return ("refused", str(exc))

    @settings(
        max_examples=int(__import__("os").environ.get("TT_FUZZ", "400")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(_texts())
    def check(text):
        fast = outcome(text)
        kept, yamlread._FAST_LOADER = yamlread._FAST_LOADER, None
        try:
            assert outcome(text) == fast, text
        finally:
            yamlread._FAST_LOADER = kept

    check()
