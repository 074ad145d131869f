"""Notebooks as scenarios: cells as steps, markdown as notes, IPython syntax, cell-and-line
messages."""

from __future__ import annotations

import json
import sys

import pytest

nbformat = pytest.importorskip("nbformat")

from conftest import cli, resolved  # noqa: E402
from tensortrace.errors import ScenarioError  # noqa: E402
from tensortrace.scenario.library import bundled_path  # noqa: E402
from tensortrace.scenario import load_scenario, loads_scenario  # noqa: E402

# Bundled scenarios without setup, variants, seed or device: their steps are the whole story.
BUNDLED = [
    "detach",
    "clone",
    "views",
    "version-counter",
    "leaf-inplace",
    "inplace-error-message",
    "hooks",
    "no-grad",
]


def write_notebook(path, cells):
    """cells: ("md" | "code", source) pairs."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        for kind, src in cells
    ]
    nbformat.write(notebook, str(path))
    return path


def _directives(spec) -> str:
    """A YAML step's declarations as the comment lines a cell starts with."""
    lines = [f"# expect: {c.text.strip()}" for c in spec.expect]
    for key in ("raises", "warns"):
        declared = getattr(spec, key)
        if declared is not None:
            lines.append(
                f"# {key}: {declared.type}"
                + (f", match: {declared.match}" if declared.match else "")
            )
    if spec.show is not None:
        lines.append(f"# show: {', '.join(spec.show)}")
    if spec.graph is not None:
        lines.append("# graph: " + ("true" if spec.graph is True else ", ".join(spec.graph)))
    return "".join(line + "\n" for line in lines)


def notebook_of(name, path):
    scenario = load_scenario(bundled_path(name))
    cells = [("md", f"# {scenario.title}")]
    for spec in scenario.steps:
        if spec.note:
            cells.append(("md", spec.note))
        cells.append(("code", _directives(spec) + spec.run.text))
    return write_notebook(path, cells)


def trace_of(path, *args):
    result = cli("run", str(path), "--format", "json", *args)
    assert result.returncode in (0, 1), result.stderr
    return resolved(json.loads(result.stdout))


def facts(trace):
    return [
        (
            s["status"],
            (s["error"] or {}).get("type"),
            s["behaved"],
            s["note"],
            [e["passed"] for e in s["expectations"]],
            sorted(
                (t["name"], t["version"], t["storage"], t["requires_grad"], t["is_leaf"])
                for t in s["tensors"]
            ),
        )
        for s in trace["steps"]
    ]


@pytest.mark.parametrize("name", BUNDLED)
def test_a_notebook_of_a_bundled_scenarios_steps_traces_as_the_yaml_does(name, tmp_path):
    path = notebook_of(name, tmp_path / f"{name}.ipynb")
    from_yaml, from_notebook = trace_of(bundled_path(name)), trace_of(path)
    assert facts(from_notebook) == facts(from_yaml)
    assert from_notebook["passed"] == from_yaml["passed"] is True
    assert from_notebook["scenario"]["title"] == from_yaml["scenario"]["title"]
    assert [s["code"].rstrip() for s in from_notebook["steps"]] == [
        s["code"].rstrip() for s in from_yaml["steps"]
    ]


def test_markdown_directly_above_a_cell_is_its_note_and_lines_count_within_the_cell(tmp_path):
    path = write_notebook(
        tmp_path / "nb.ipynb",
        [
            ("md", "# Title\nWhat this shows."),
            ("code", "a = torch.ones(2)"),
            ("md", "About b."),
            ("md", "Closer to b."),
            ("code", "# A comment note\nb = a * 2\nraise ValueError('x')"),
            ("code", ""),
            ("md", "Not above any cell"),
        ],
    )
    scenario = load_scenario(path)
    assert (scenario.title, scenario.description) == ("Title", "What this shows.")
    assert [s.note for s in scenario.steps] == [None, "Closer to b.\n\nA comment note"]
    assert scenario.cells == (2, 5)
    step = trace_of(path)["steps"][1]
    assert step["line"] == 2 and step["error"]["line"] == 3


def test_without_a_heading_the_title_is_the_file_name(tmp_path):
    path = write_notebook(tmp_path / "plain.ipynb", [("md", "Just words."), ("code", "a = 1")])
    scenario = load_scenario(path)
    assert scenario.title == "plain.ipynb" and scenario.steps[0].note == "Just words."


MAGICS = [
    ("md", "# Magics"),
    ("code", "%matplotlib inline\na = torch.ones(3)"),
    ("code", "%%time\na.add_(100)"),
    ("code", "for i in range(2):\n    !echo hi\n    a.add_(1)\nfiles = !ls"),
    ("code", "%load_ext autoreload"),
    ("code", "torch.ones?\nb = a * 2"),
]


def test_safe_mode_refuses_ipython_syntax_naming_cell_and_line(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", MAGICS)
    result = cli("run", str(path))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"tensortrace: {path}: cell 2, line 1, column 1: '%matplotlib inline' is an IPython line"
        " magic, not Python; safe mode refuses the notebook; remove it, or use --trust to"
        " skip it"
    )


def test_with_trust_ipython_lines_are_skipped_with_notices(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", MAGICS)
    trace = trace_of(path, "--trust")
    steps = trace["steps"]
    assert len(steps) == 3  # the %%time cell and the cell of nothing but a magic make no step
    assert [s["status"] for s in steps] == ["ok", "ok", "ok"]
    a = next(t for t in steps[-1]["tensors"] if t["name"] == "a")
    assert a["values"]["data"] == [
        3.0,
        3.0,
        3.0,
    ]  # the loop's a.add_(1) ran twice, the %%time cell's add_(100) never
    assert "pass  # skipped: !echo hi" in steps[1]["code"]
    assert trace["notices"] == [
        "cell 2, line 1: '%matplotlib inline' was skipped (an IPython line magic, not Python)",
        "cell 3 was skipped: it starts with the IPython cell magic '%%time', which is not Python",
        "cell 4, line 2: '!echo hi' was skipped (a shell command, not Python)",
        "cell 4, line 4: 'files = !ls' was skipped (a shell command, not Python)",
        "cell 5, line 1: '%load_ext autoreload' was skipped (an IPython line magic, not Python)",
        "cell 6, line 1: 'torch.ones?' was skipped (IPython's help syntax, not Python)",
    ]
    console = cli("run", str(path), "--trust", "--width", "200").stdout
    assert "'%%time', which is not Python" in console


def test_a_percent_that_starts_a_continued_line_is_python_not_a_magic(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", [("code", "x = (7\n     % 4)\nprint(x)")])
    trace = trace_of(path)
    assert trace["steps"][0]["stdout"] == "3\n" and not trace["notices"]


def test_a_safe_mode_refusal_inside_a_cell_names_the_cell(tmp_path):
    path = write_notebook(
        tmp_path / "nb.ipynb", [("md", "# t"), ("code", "a = 1"), ("code", "b = 2\nimport os")]
    )
    result = cli("run", str(path))
    assert result.returncode == 2
    assert f"{path}: cell 3, line 2, column 1: " in result.stderr and "safe mode" in result.stderr


def test_a_directive_below_the_first_statement_of_a_cell_is_refused(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", [("code", "a = 1\n# expect: a == 1\nb = 2")])
    with pytest.raises(
        ScenarioError, match=r"nb.ipynb: cell 1, line 2, column 1: '# expect:' applies"
    ):
        load_scenario(path)


def test_without_nbformat_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nbformat", None)
    with pytest.raises(ScenarioError) as info:
        loads_scenario('{"cells": []}', path="nb.ipynb")
    assert (
        str(info.value)
        == "nb.ipynb: reading notebooks needs the nbformat package, which is not installed; install"
        " it with: pip install 'tensortrace[notebook]'"
    )


def test_convert_writes_a_notebook_as_yaml_with_the_same_outcomes(tmp_path):
    path = notebook_of("detach", tmp_path / "detach.ipynb")
    target = tmp_path / "detach.yaml"
    assert cli("convert", str(path), "-o", str(target)).returncode == 0
    assert facts(trace_of(target)) == facts(trace_of(path))


def test_convert_keeps_the_notices_of_skipped_lines(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", MAGICS)
    result = cli("convert", str(path))
    assert result.returncode == 0, result.stderr
    converted = loads_scenario(result.stdout, path="nb.yaml")
    assert "'%%time', which is not Python" in converted.description
    assert len(converted.steps) == 3


@pytest.mark.parametrize(
    "text",
    [
        # nbformat 4.2: no cell ids (nbformat would warn; nothing may reach the user's stderr)
        (
            '{"cells": [{"cell_type": "code", "execution_count": null, "metadata": {}, "outputs":'
            ' [], "source": ["a = torch.ones(2)\\n", "print(a)"]}], "metadata": {}, "nbformat": 4,'
            ' "nbformat_minor": 2}'
        ),
        # nbformat 3: worksheets, and 'input' for the code
        (
            '{"metadata": {"name": "old"}, "nbformat": 3, "nbformat_minor": 0, "worksheets":'
            ' [{"cells": [{"cell_type": "code", "input": "a = torch.ones(2)\\nprint(a)",'
            ' "language": "python", "metadata": {}, "outputs": []}], "metadata": {}}]}'
        ),
    ],
    ids=["v4.2", "v3"],
)
def test_older_notebook_formats_are_read_quietly(tmp_path, text):
    path = tmp_path / "old.ipynb"
    path.write_text(text, encoding="utf-8")
    result = cli("run", str(path), "--format", "json")
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout)["steps"][0]["stdout"] == "tensor([1., 1.])\n"


def test_the_extra_the_message_names_exists_and_brings_nbformat():
    from conftest import REPO

    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    extras = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    line = next(line for line in extras.splitlines() if line.startswith("notebook ="))
    assert "nbformat" in line


def test_a_notebooks_steps_name_their_cell_in_every_format(tmp_path):
    path = write_notebook(
        tmp_path / "nb.ipynb",
        [
            ("md", "# Cells"),
            ("code", "a = torch.ones(2)"),
            ("md", "About b."),
            ("code", "# a comment\nb = a.add_(1)"),
        ],
    )
    trace = trace_of(path)
    assert [(s["index"], s["cell"], s["line"]) for s in trace["steps"]] == [(1, 2, 1), (2, 4, 2)]
    console = cli("run", str(path), "--color", "never")
    assert console.returncode == 0, console.stderr
    assert "Step 2 · cell 4, line 2" in console.stdout
    markdown = cli("run", str(path), "--format", "markdown")
    assert "### Step 2 · cell 4, line 2" in markdown.stdout.splitlines()
    html = cli("run", str(path), "--format", "html")
    assert "<h3>Step 2 · cell 4, line 2</h3>" in html.stdout
    yaml_trace = trace_of(bundled_path("detach"))
    assert all(s["cell"] is None for s in yaml_trace["steps"])  # not a notebook: no cell


def test_check_names_the_cell_of_a_notebook_step_that_misbehaved(tmp_path):
    path = write_notebook(
        tmp_path / "nb.ipynb",
        [("code", "a = torch.ones(2)"), ("md", "b"), ("code", "# expect: a.sum() == 0\nb = a * 2")],
    )
    result = cli("check", str(path))
    assert result.returncode == 1, result.stderr
    assert "step 2 (cell 3, line 2): expectation failed: a.sum() == 0" in result.stdout
