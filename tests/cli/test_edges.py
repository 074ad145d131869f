"""The rough edges a new user meets: install, files, options and messages of the command line."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest


from conftest import REPO, cli, write_scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None

SMALL = """
title: small
steps:
  - a = torch.ones(2, requires_grad=True)
  - b = a * 2
  - out = b.sum()
"""


def invoke(*args: str):
    return cli(*args)


# --- set-up and install ----------------------------------------------------------------


def _imported_modules(text: str) -> set:
    pattern = r"^\s*(?:(?:setup|run):\s*|-\s*)?(?:import\s+(\w+)|from\s+(\w+)[\w.]*\s+import\b)"
    return {a or b for a, b in re.findall(pattern, text, re.M)}


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_a_plain_install_brings_every_module_the_bundled_library_imports():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = {re.split(r"[<>=!~\[ ;]", dep, 1)[0].lower() for dep in project["dependencies"]}
    imported = set()
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        imported |= _imported_modules(path.read_text(encoding="utf-8"))
    assert "numpy" in imported  # the check below has something to check
    missing = sorted(imported - {"torch", "math", "copy"} - installed)
    assert not missing, (
        f"bundled scenarios import {missing}, which 'pip install -e .' does not install"
    )


def test_a_missing_module_is_one_line_that_says_what_to_install(tmp_path):
    path = write_scenario(
        tmp_path,
        """
        title: needs a module
        steps:
          - import tensortrace_absent_module
          - a = torch.ones(2)
        """,
    )
    result = invoke("run", str(path), "--trust", "--format", "json")
    error = json.loads(result.stdout)["steps"][0]["error"]
    assert error["type"] == "ModuleNotFoundError"
    assert (
        error["explanation"]["title"]
        == "needs tensortrace_absent_module: pip install tensortrace_absent_module"
    )


# --- file modes ------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_output_file_follows_the_umask(tmp_path):
    target = tmp_path / "out.md"
    old = os.umask(0o022)
    try:
        result = invoke("new", str(target))
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    assert _mode(target) == 0o644


def test_an_existing_output_file_keeps_its_mode(tmp_path):
    target = tmp_path / "out.yaml"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    result = invoke("new", str(target), "--force")
    assert result.returncode == 0, result.stderr
    assert _mode(target) == 0o640
    assert "title:" in target.read_text(encoding="utf-8")


def test_an_output_link_gives_the_umask_mode_never_its_targets(tmp_path):
    """The link is replaced by a new file: the mode of the file it pointed to (a setuid,
    world-writable one here) must not carry over to the file the command writes."""
    elsewhere = tmp_path / "theirs"
    elsewhere.write_text("not ours", encoding="utf-8")
    elsewhere.chmod(0o4777)
    link = tmp_path / "out.yaml"
    link.symlink_to(elsewhere)
    old = os.umask(0o022)
    try:
        result = invoke("new", str(link), "--force")
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink()
    assert stat.S_IMODE(os.lstat(link).st_mode) == 0o644
    assert elsewhere.read_text(encoding="utf-8") == "not ours"
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o4777


def test_an_existing_set_id_output_file_keeps_only_its_permission_bits(tmp_path):
    target = tmp_path / "out.yaml"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o6750)
    result = invoke("new", str(target), "--force")
    assert result.returncode == 0, result.stderr
    assert _mode(target) == 0o750


# --- --show ----------------------------------------------------------------------------

MODULE = """
title: a module
steps:
  - lin = torch.nn.Linear(2, 1)
  - x = torch.ones(1, 2)
  - y = lin(x)
"""


def _table_names(console_text: str) -> set:
    """The names of the table rows (a name, then a value or a storage label)."""
    return set(re.findall(r"^  ([A-Za-z_][\w.\[\]']*)  +(?:\[|-?\d|S\d)", console_text, re.M))


def test_show_of_a_module_shows_its_parameters_as_the_yaml_key_does(tmp_path):
    path = write_scenario(tmp_path, MODULE)
    by_option = invoke("run", str(path), "--show", "lin", "--step", "3", "--width", "200")
    by_key = write_scenario(tmp_path, MODULE.replace("steps:", "show: [lin]\nsteps:"), "keyed.yaml")
    by_yaml = invoke("run", str(by_key), "--step", "3", "--width", "200")
    assert by_option.returncode == by_yaml.returncode == 0, by_option.stderr + by_yaml.stderr
    shown = _table_names(by_option.stdout)
    assert {"lin.weight", "lin.bias"} <= shown and not {"x", "y"} & shown
    assert shown == _table_names(by_yaml.stdout)


def test_show_of_an_unknown_name_is_a_notice_in_the_output_and_the_json(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    console = invoke("run", str(path), "--show", "zz,a", "--width", "200")
    assert console.returncode == 0
    assert "'zz' in --show is never bound in this scenario" in console.stdout
    data = json.loads(invoke("run", str(path), "--show", "zz", "--format", "json").stdout)
    assert data["notices"] == ["'zz' in --show is never bound in this scenario"]


# --- steps -----------------------------------------------------------------------------


def test_step_zero_without_a_setup_is_an_error_naming_the_range(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    result = invoke("run", str(path), "--step", "0")
    assert result.returncode == 2
    assert "there is no step 0: the scenario has steps 1 to 3" in result.stderr
    assert result.stdout == ""
    assert (
        "there is no step 9: the scenario has steps 1 to 3"
        in invoke("run", str(path), "--step", "9").stderr
    )


def test_step_zero_is_the_setup_when_there_is_one(tmp_path):
    path = write_scenario(
        tmp_path, SMALL.replace("steps:", "setup: print('hello from setup')\nsteps:")
    )
    result = invoke("run", str(path), "--step", "0", "--width", "120")
    assert result.returncode == 0, result.stderr
    assert "hello from setup" in result.stdout
    assert "Step 1" not in result.stdout
    assert "steps 0 (the setup) and 1 to 3" in invoke("run", str(path), "--steps", "2-5").stderr


# --- small conveniences ----------------------------------------------------------------


def test_h_is_help_for_the_program_and_every_command():
    assert invoke("-h").stdout == invoke("--help").stdout
    for command in ("run", "check", "render", "list", "show", "new", "schema"):
        result = invoke(command, "-h")
        assert result.returncode == 0, (command, result.stderr)
        assert (
            result.stdout.startswith("Usage:") and result.stdout == invoke(command, "--help").stdout
        )


def test_help_names_arguments_without_python_types():
    for command in ("run", "check", "render", "show", "new"):
        text = invoke(command, "--help").stdout
        assert not re.search(r"<(?:list\[)?(?:str|int|float)\]?>", text), (command, text)


def test_the_shell_completion_options_are_offered():
    text = invoke("--help").stdout
    assert "--install-completion" in text and "--show-completion" in text


def test_check_of_a_folder_checks_its_yaml_files_in_order(tmp_path):
    write_scenario(tmp_path, SMALL, "b.yaml")
    write_scenario(tmp_path, SMALL.replace("small", "other"), "a.yaml")
    (tmp_path / "notes.txt").write_text("not a scenario", encoding="utf-8")
    result = invoke("check", str(tmp_path), "--trust")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"PASS {tmp_path / 'a.yaml'}",
        f"PASS {tmp_path / 'b.yaml'}",
        "2 passed, 0 failed",
    ]


def test_check_of_a_folder_without_scenarios_says_so(tmp_path):
    result = invoke("check", str(tmp_path))
    assert result.returncode == 2
    assert "no .yaml scenario files" in result.stderr


@pytest.mark.parametrize(
    "name, looks_like",
    [
        ("t.json", lambda text: json.loads(text)["format"]),
        ("t.jsonl", lambda text: json.loads(text.splitlines()[0])["event"] == "start"),
        ("t.md", lambda text: text.startswith("#")),
        ("t.html", lambda text: "<html" in text.lower()),
        ("t.svg", lambda text: "<svg" in text),
        ("t.dot", lambda text: "digraph" in text),
        ("t.mmd", lambda text: text.lstrip().startswith(("flowchart", "graph"))),
    ],
)
def test_the_output_format_follows_the_file_suffix(tmp_path, name, looks_like):
    path = write_scenario(tmp_path, SMALL)
    target = tmp_path / name
    result = invoke("run", str(path), "--trust", "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert looks_like(target.read_text(encoding="utf-8"))


def test_an_explicit_format_wins_over_the_file_suffix(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    target = tmp_path / "t.json"
    assert (
        invoke("run", str(path), "--trust", "-o", str(target), "--format", "markdown").returncode
        == 0
    )
    assert target.read_text(encoding="utf-8").startswith("#")


def test_graph_option_draws_the_graph_after_the_last_step(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    data = json.loads(
        invoke("run", str(path), "--trust", "--format", "json", "--graph", "out").stdout
    )
    assert [g["tensor"] for g in data["steps"][-1]["graphs"]] == ["out"]
    assert all(not step["graphs"] for step in data["steps"][:-1])
    nodes = json.dumps(data["steps"][-1]["graphs"][0])
    assert "SumBackward0" in nodes and "MulBackward0" in nodes


# --- list ------------------------------------------------------------------------------


def test_list_piped_has_no_trailing_blanks_and_no_escapes():
    result = invoke("list")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) > 10 and lines[0].startswith("name")
    assert [line for line in lines if line != line.rstrip()] == []
    assert "\x1b" not in result.stdout


# --- messages about limits -------------------------------------------------------------

LOOP = """
title: loops
steps:
  - a = torch.ones(2)
  - |
    while True:
        pass
"""


def test_a_step_time_limit_names_the_option_that_raises_it(tmp_path):
    path = write_scenario(tmp_path, LOOP)
    data = json.loads(invoke("run", str(path), "--format", "json", "--timeout", "1").stdout)
    assert data["aborted"] == "step 2 exceeded the 1 s time limit (raise it with --timeout)"


def test_the_scenario_time_limit_names_the_option_that_raises_it(tmp_path):
    path = write_scenario(tmp_path, LOOP)
    result = invoke(
        "run", str(path), "--format", "json", "--timeout", "0", "--scenario-timeout", "1"
    )
    data = json.loads(result.stdout)
    assert (
        data["aborted"]
        == "step 2 was running when the scenario reached its 1 s time limit (raise it with"
        " --scenario-timeout)"
    )


def test_an_allocation_refused_under_the_memory_limit_names_the_limit(tmp_path):
    path = write_scenario(
        tmp_path,
        """
        title: too big for the cap
        steps:
          - x = torch.empty(10**9)
          - y = [0] * 10**9
        """,
    )
    data = json.loads(invoke("run", str(path), "--format", "json", "--memory-limit", "256").stdout)
    for step in data["steps"]:
        explanation = step["error"]["explanation"]
        assert "(--memory-limit, 256 MiB) caused this" in explanation["what"], step["error"]
        assert "--memory-limit 0" in explanation["fix"]
    assert [s["error"]["type"] for s in data["steps"]] == ["RuntimeError", "MemoryError"]


# --- progress --------------------------------------------------------------------------


def test_no_progress_is_drawn_when_stderr_is_not_a_terminal(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    result = invoke("run", str(path), "--trust", "--format", "json")
    assert result.returncode == 0
    assert result.stderr == ""
    assert json.loads(result.stdout)["steps"][-1]["index"] == 3


def test_progress_on_a_terminal_shows_step_i_of_n_and_its_line(tmp_path):
    import io

    from rich.console import Console

    import tensortrace
    from tensortrace.cli.progress import RunProgress, plans_of
    from tensortrace.run.runner import run_all

    scenario = tensortrace.load_scenario(
        write_scenario(tmp_path, SMALL.replace("steps:", "setup: c = 1\nsteps:"))
    )
    screen = io.StringIO()
    progress = RunProgress(
        plans_of([scenario]), Console(file=screen, force_terminal=True, width=100, _environ={})
    )
    with progress:
        run_all([scenario], safe=False, on_start=progress.on_start, on_step=progress.on_step)
    drawn = screen.getvalue()
    for expected in (
        "· setup",
        "step 1 of 3: a = torch.ones(2, requires_grad=True)",
        "step 2 of 3: b = a * 2",
        "step 3 of 3: out = b.sum()",
        "3 of 3 steps done",
    ):
        assert expected in drawn, drawn
    assert drawn.index("step 1 of 3") < drawn.index("step 2 of 3") < drawn.index("step 3 of 3")
