"""The bundled scenario library: it passes, it is documented, it can be browsed,
and it ships inside the wheel."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import yaml

from tensortrace.scenario.library import TEMPLATE, bundled_dir, bundled_names
from tensortrace.scenario import load_scenario

from conftest import REPO, cli

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
NAMES = sorted(p.stem for p in SCENARIOS)  # "clone" before "clone-keeps-graph", as the tool sorts
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TAG = "misconception"


def expectation_count(scenario) -> int:
    count = 0
    for step in scenario.steps:
        expect = step.expect
        if isinstance(expect, dict):
            count += sum(len(codes) for codes in expect.values())
        else:
            count += len(expect)
    return count


def listed_names(stdout: str):
    """The names in the first column of 'tensortrace list' (titles wrap onto indented lines)."""
    lines = stdout.splitlines()
    assert lines[0].split()[0] == "name", stdout
    return [line.split()[0] for line in lines[1:-1] if line and not line[0].isspace()]


def test_the_library_is_the_checkout_folder():
    assert len(SCENARIOS) >= 24
    assert bundled_dir() == REPO / "scenarios"
    assert bundled_names() == NAMES


def test_the_whole_library_passes_check():
    """CI runs the library as a test suite of PyTorch semantics: every scenario
    (every variant of it) behaves as it declares."""
    expected = 0
    for path in SCENARIOS:
        scenario = load_scenario(path)
        expected += len(scenario.variant_names) or 1
    # a step's time limit is tested in test_limits.py; here a loaded machine must
    # not turn a slow first step (torch.optim loading, say) into a failure
    result = cli("check", "--timeout", "120", *(f"scenarios/{p.name}" for p in SCENARIOS), cwd=REPO)
    lines = result.stdout.strip().splitlines()
    failing = [line for line in lines if not line.startswith("PASS ")][:-1]
    assert result.returncode == 0, "\n".join(failing) + "\n" + result.stderr
    assert lines[-1] == f"{expected} passed, 0 failed"
    assert expected >= 24 + sum(1 for p in SCENARIOS if load_scenario(p).variants)
    assert len(lines) == expected + 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_is_documented_and_declares_what_it_shows(path):
    assert NAME.match(path.stem), f"{path.name}: names are lowercase words joined by hyphens"
    scenario = load_scenario(path)
    assert scenario.title.strip(), f"{path.name}: no title"
    assert (scenario.description or "").strip(), f"{path.name}: no description"
    assert scenario.tags, f"{path.name}: no tags"
    assert all(NAME.match(tag) for tag in scenario.tags), f"{path.name}: tags {scenario.tags}"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    for index, step in enumerate(raw["steps"], 1):
        assert isinstance(step, dict), (
            f"{path.name}: step {index} is a bare line; make it a mapping with run and note"
        )
        assert str(step.get("note") or "").strip(), f"{path.name}: step {index} has no note"
    assert all(spec.note for spec in scenario.steps)
    assert expectation_count(scenario) >= 1, f"{path.name}: no expectation"


def test_list_filters_by_tag():
    everything = cli("list")
    assert everything.returncode == 0, everything.stderr
    all_names = listed_names(everything.stdout)
    assert all_names == NAMES
    assert (
        everything.stdout.splitlines()[-1]
        == f"{len(SCENARIOS)} scenarios; run one with: tensortrace run NAME"
    )

    tagged = cli("list", "--tag", TAG)
    assert tagged.returncode == 0, tagged.stderr
    names = listed_names(tagged.stdout)
    wanted = sorted(p.stem for p in SCENARIOS if TAG in load_scenario(p).tags)
    assert names == wanted
    assert 0 < len(names) < len(all_names)
    assert (
        tagged.stdout.splitlines()[-1]
        == f"{len(names)} scenarios; run one with: tensortrace run NAME"
    )


def test_list_with_an_unknown_tag_is_a_usage_error():
    result = cli("list", "--tag", "no-such-tag")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tensortrace: "), (
        result.stderr
    )
    assert "no-such-tag" in result.stderr


def test_show_prints_exactly_the_file():
    path = REPO / "scenarios" / "clone.yaml"
    result = cli("show", "clone")
    assert result.returncode == 0, result.stderr
    assert result.stdout_bytes == path.read_bytes()


def test_run_by_name_from_outside_the_repository(tmp_path):
    result = cli("run", "clone", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["passed"] is True
    assert data["scenario"]["title"] == load_scenario(REPO / "scenarios" / "clone.yaml").title
    assert list(tmp_path.iterdir()) == []


def test_new_writes_a_template_that_passes_and_is_not_overwritten(tmp_path):
    path = tmp_path / "mine.yaml"
    result = cli("new", str(path))
    assert result.returncode == 0, result.stderr
    assert path.read_text(encoding="utf-8") == TEMPLATE.format(name=str(path))
    check = cli("check", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[-1] == "1 passed, 0 failed"

    path.write_text("mine\n", encoding="utf-8")
    again = cli("new", str(path))
    assert again.returncode == 2
    assert "--force" in again.stderr and again.stderr.count("\n") == 1
    assert path.read_text(encoding="utf-8") == "mine\n"

    forced = cli("new", str(path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert cli("check", str(path)).returncode == 0


# --- the wheel ------------------------------------------------------------------------


def test_wheel_installs_into_a_fresh_venv_and_runs_the_bundled_library(tmp_path):
    """Slow (up to a minute): build the wheel, install it alone into a fresh
    virtual environment that sees this environment's torch, and use it from
    outside the checkout. The build runs on a copy of the checkout, so that
    it leaves no build/ folder behind and cannot pick up a stale one."""
    pytest.importorskip("build")
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".hypothesis",
        ),
    )
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("tensortrace-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # this environment's pip installs into it
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    fresh_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
    )
    # A plain path line: this environment's packages (torch, typer, ...) become
    # importable, but its .pth files, the editable install among them, do not run.
    (fresh_site / "outer_environment.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--ignore-installed",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    script = bindir / ("tensortrace.exe" if os.name == "nt" else "tensortrace")
    assert script.exists()

    where = subprocess.run(
        [
            str(python),
            "-c",
            (
                "import pathlib, tensortrace;"
                " print(pathlib.Path(tensortrace.__file__).resolve().parent)"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=outside,
        env=env,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip())
    assert package.is_relative_to(env_dir.resolve()), (
        f"tensortrace imported from {package}, not from the fresh environment"
    )
    assert not package.is_relative_to(REPO)
    shipped = sorted(p.stem for p in (package / "scenarios").glob("*.yaml"))
    assert shipped == NAMES, "the wheel's scenarios differ from scenarios/"

    # The explanations are data beside the code: a wheel without them would
    # still import, and only fail on the first error it meets.
    explained = subprocess.run(
        [
            str(python),
            "-c",
            (
                "from tensortrace.record.explain import explain; print(explain('RuntimeError',"
                " 'Trying to backward through the graph a second time').topic)"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=outside,
        env=env,
        timeout=120,
    )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.strip() == "backward-twice"

    listed = subprocess.run(
        [str(script), "list"], capture_output=True, text=True, cwd=outside, env=env, timeout=300
    )
    assert listed.returncode == 0, listed.stderr
    assert listed_names(listed.stdout) == NAMES

    ran = subprocess.run(
        [str(script), "run", "clone", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=outside,
        env=env,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    data = json.loads(ran.stdout)
    assert data["passed"] is True
    assert Path(data["scenario"]["source"]).resolve() == package / "scenarios" / "clone.yaml"
    assert list(outside.iterdir()) == []
