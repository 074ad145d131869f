"""The README's commands run, name only commands and options that exist, and
its sample output is what the tool prints."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from conftest import REPO, Result, cli, scripts_in_one_python

README = REPO / "README.md"
SAMPLE_SECTION = "## What it looks like"


def blocks(language: str, text: str = None) -> List[Tuple[int, List[str]]]:
    """(line number of the opening fence, lines) of every ```language block."""
    text = README.read_text(encoding="utf-8") if text is None else text
    found, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if current is None:
            if line.strip() == f"```{language}":
                current, start = [], number
        elif line.strip() == "```":
            found.append((start, current))
            current = None
        else:
            current.append(line)
    assert current is None, f"README.md: the ```{language} block at line {start} is not closed"
    return found


def console_commands() -> List[Tuple[int, str]]:
    return [
        (start, line[2:])
        for start, lines in blocks("console")
        for line in lines
        if line.startswith("$ ")
    ]


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> Tuple[Path, Dict[str, str]]:
    """A scratch directory holding scenarios/, and a PATH where tensortrace and
    python are this environment's."""
    root = tmp_path_factory.mktemp("readme")
    work = root / "work"
    work.mkdir()
    (work / "scenarios").symlink_to(REPO / "scenarios", target_is_directory=True)
    (work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    bindir = root / "bin"
    bindir.mkdir()
    # A wrapper, not a symlink: a symlink to a virtual environment's python
    # outside its bin/ folder does not find pyvenv.cfg and starts without the
    # environment's packages.
    wrapper = bindir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR", "COLUMNS")
    }
    env["PATH"] = os.pathsep.join(
        [str(bindir), os.path.dirname(sys.executable), env.get("PATH", "")]
    )
    return work, env


# what shell_env leaves out of the environment, for commands run in this process
SHELL_ENV_REMOVES = {"NO_COLOR": None, "FORCE_COLOR": None, "COLUMNS": None}
SHELL_SYNTAX = set("|&;<>()$`\\\"'{}~")


def run_line(command: str, cwd: Path, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


def in_process_argv(command: str, cwd: Path) -> List[str]:
    """The argv a shell would give ``tensortrace`` for this line (globs expanded),
    or [] when the line is not a plain tensortrace command."""
    if not command.startswith("tensortrace ") or SHELL_SYNTAX & set(command):
        return []
    argv = []
    for word in shlex.split(command)[1:]:
        matches = (
            sorted(str(p.relative_to(cwd)) for p in cwd.glob(word)) if glob.has_magic(word) else []
        )
        argv.extend(matches or [word])
    return argv


def run_command(command: str, cwd: Path, env: Dict[str, str]):
    """A plain ``tensortrace ...`` line is parsed by the same app in this process;
    any other line (``python -m ...``) runs in bash."""
    argv = in_process_argv(command, cwd)
    if argv:
        return cli(*argv, cwd=cwd, env=SHELL_ENV_REMOVES)
    return run_line(command, cwd, env)


def test_console_commands_run_in_order(shell_env):
    work, env = shell_env
    commands = console_commands()
    assert len(commands) >= 10
    assert any(
        not in_process_argv(command, work) for _, command in commands
    )  # one real process at least
    for start, command in commands:
        result = run_command(command, work, env)
        where = f"README.md, ```console block at line {start}: $ {command}"
        assert result.returncode == 0, f"{where}\nexit {result.returncode}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{where}\n{result.stderr}"


def test_the_python_on_path_is_this_environment(shell_env):
    work, env = shell_env
    result = run_line(
        'python -c "import sys, tensortrace; print(sys.prefix)"; command -v tensortrace', work, env
    )
    assert result.returncode == 0, result.stderr
    prefix, script = result.stdout.split()
    assert prefix == sys.prefix
    assert Path(script).parent == Path(sys.executable).parent


# --- commands and options named in the README exist -----------------------------------


def help_text(*args: str) -> str:
    result = cli(*args, "--help", env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def section(text: str, heading: str) -> List[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            inside = line == f"{heading}:"
            continue
        if inside:
            lines.append(line)
    return lines


def options_of(text: str) -> Set[str]:
    names = set()
    for line in section(text, "Options"):
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            names.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", m.group(1)))
    assert "--help" in names, f"could not read the options from:\n{text}"
    return names


@pytest.fixture(scope="module")
def cli_names() -> Tuple[Set[str], Dict[str, Set[str]]]:
    main = help_text()
    commands = {
        m.group(1)
        for line in section(main, "Commands")
        if (m := re.match(r"^  ([a-z][\w-]*)(?:\s|$)", line))
    }
    assert {"run", "check", "render", "list", "show", "new", "schema"} <= commands, main
    options = {"": options_of(main)}
    for command in commands:
        options[command] = options_of(help_text(command))
    return commands, options


def readme_invocations() -> List[Tuple[str, int, List[str]]]:
    found = []
    for language in ("sh", "console"):
        for start, lines in blocks(language):
            for line in lines:
                line = line[2:] if language == "console" and line.startswith("$ ") else line
                if not line.startswith("tensortrace"):
                    continue
                words = shlex.split(line, comments=True)
                found.append((language, start, words))
    return found


def test_readme_names_only_commands_and_options_that_exist(cli_names):
    commands, options = cli_names
    invocations = readme_invocations()
    assert any(language == "sh" for language, _, _ in invocations), (
        "no tensortrace line in a ```sh block"
    )
    for language, start, words in invocations:
        where = f"README.md, ```{language} block at line {start}: {' '.join(words)}"
        assert words[0] == "tensortrace", where
        rest = words[1:]
        command = next((w for w in rest if not w.startswith("-")), "")
        if command:
            assert command in commands, (
                f"{where}: no command {command!r} (commands: {', '.join(sorted(commands))})"
            )
        known = options[command]
        for word in rest:
            if word.startswith("-") and word != "-":
                name = word.split("=", 1)[0]
                assert name in known, f"{where}: {command or 'tensortrace'} has no option {name}"


def test_option_check_catches_drift(cli_names):
    commands, options = cli_names
    assert "frobnicate" not in commands
    assert (
        "--colour" not in options["run"] and "--steps" in options["run"] and "-o" in options["run"]
    )


# --- the sample output ----------------------------------------------------------------


def sample() -> Tuple[str, str]:
    """The command and the output block of the README's "What it looks like"."""
    text = README.read_text(encoding="utf-8")
    assert SAMPLE_SECTION in text, f"README.md has no section {SAMPLE_SECTION!r}"
    part = text.split(SAMPLE_SECTION, 1)[1].split("\n## ", 1)[0]
    ((_, console),) = blocks("console", part)
    (command,) = [line[2:] for line in console if line.startswith("$ ")]
    ((_, output),) = blocks("text", part)
    return command, "\n".join(output)


def normalised(text: str) -> str:
    """Trailing whitespace goes; the header panel's environment lines (versions
    and the scenario file's path, which differ between machines and may wrap
    differently) become one placeholder line."""
    lines = [line.rstrip() for line in text.rstrip().splitlines()]
    out, in_environment = [], False
    for line in lines:
        if line.startswith("┃ torch "):
            in_environment = True
            out.append("┃ <environment>")
            continue
        if in_environment and line.startswith("┃"):
            continue
        in_environment = False
        out.append(line)
    return "\n".join(out)


def test_sample_output_is_what_the_tool_prints(shell_env):
    work, env = shell_env
    command, shown = sample()
    assert command.startswith("tensortrace run ") and "--width" in command, command
    result = run_command(command, work, env)
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "┃ torch " in result.stdout, (
        "the header panel no longer starts its environment line with 'torch'; update normalised()"
    )
    assert normalised(result.stdout) == normalised(shown), (
        f"README.md's {SAMPLE_SECTION!r} block is out of date; paste the output of: {command}"
    )


# --- the Python examples ----------------------------------------------------------------

FROM_CODE_SECTION = "## From your own code"
DECORATOR_SECTION = "### The decorator"


def declares_outcomes(lines: List[str]) -> bool:
    """A block that declares outcomes in comments is a scenario file, shown as such."""
    return any(line.startswith(("# expect:", "# raises:", "# warns:")) for line in lines)


def decorator_example() -> Tuple[List[str], List[str]]:
    """The decorator's example code, and the ```text block that follows it."""
    text = README.read_text(encoding="utf-8")
    assert FROM_CODE_SECTION in text, f"README.md has no section {FROM_CODE_SECTION!r}"
    part = text.split(FROM_CODE_SECTION, 1)[1].split("\n## ", 1)[0]
    assert DECORATOR_SECTION in part, (
        f"README.md's {FROM_CODE_SECTION!r} has no {DECORATOR_SECTION!r}"
    )
    part = part.split(DECORATOR_SECTION, 1)[1].split("\n### ", 1)[0]
    (_, code), *_ = blocks("python", part)
    (_, shown), *_ = blocks("text", part)
    return code, shown


@pytest.fixture(scope="module")
def readme_scripts(shell_env) -> Dict[str, Result]:
    """Every ```python block that is not a scenario, and the decorator's example, each written to
    a script in the README's scratch directory and run as ``NO_COLOR=1 python SCRIPT`` would
    run it, all in one Python (one start-up that imports torch). By script name."""
    work, env = shell_env
    scripts = {f"readme_{start}.py": lines for start, lines in blocks("python")}
    scripts = {name: lines for name, lines in scripts.items() if not declares_outcomes(lines)}
    scripts["readme_decorator.py"] = decorator_example()[0]
    for name, lines in scripts.items():
        (work / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    runs = scripts_in_one_python(
        [work / name for name in scripts], cwd=work, env={**env, "NO_COLOR": "1"}
    )
    return {path.name: result for path, result in runs.items()}


def test_python_blocks_run(shell_env, readme_scripts):
    """Every ```python block runs as a script of its own in the README's scratch directory.

    A block that declares outcomes in comments (``# expect:``, ``# raises:``) is a
    scenario file, shown as such: it must pass ``tensortrace check`` instead.
    """
    work, env = shell_env
    found = blocks("python")
    assert len(found) >= 2
    checked = 0
    for start, lines in found:
        script = work / f"readme_{start}.py"
        declares = declares_outcomes(lines)
        checked += declares
        if declares:
            script.write_text("\n".join(lines) + "\n", encoding="utf-8")
            result = run_command(f"tensortrace check {script.name}", work, env)
        else:
            result = readme_scripts[script.name]
        where = f"README.md, ```python block at line {start}"
        assert result.returncode == 0, f"{where}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, f"{where}\n{result.stderr[-3000:]}"
    assert checked >= 1, "the README no longer shows a .py scenario with declarations"


def test_the_decorator_prints_what_the_readme_shows(readme_scripts):
    """The decorator's example prints, on stderr, the ```text block that follows it."""
    _, shown = decorator_example()
    result = readme_scripts["readme_decorator.py"]
    assert result.returncode == 0, result.stderr
    assert normalised(result.stderr) == normalised("\n".join(shown)), (
        f"README.md's {FROM_CODE_SECTION!r} output block is out of date; paste what its example"
        " prints on stderr"
    )
