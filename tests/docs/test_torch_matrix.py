"""tools/torch-matrix, as the README shows it: which releases it tests with which Python, and
that the tests it runs are the ones marked torch_matrix (its installs are not run here)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

TOOL = REPO / "tools" / "torch-matrix"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(TOOL), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=60,
    )


def test_a_dry_run_names_each_release_its_venv_and_the_marked_tests(tmp_path):
    done = _run("--dry-run", "--", "-x", TORCH_MATRIX_VENVS=str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["2.10.0", "2.11.0", "2.14.1"]
    for line in lines:
        release = line.split()[1]
        assert f"{tmp_path}/torch-{release}" in line
        assert line.endswith("-m pytest -m torch_matrix -q -n auto -p no:cacheprovider -x")
    assert not list(tmp_path.iterdir())  # a dry run makes nothing


def test_one_release_is_chosen_by_name_and_an_unknown_one_is_refused(tmp_path):
    done = _run("2.11.0", "--dry-run", TORCH_MATRIX_VENVS=str(tmp_path))
    assert done.returncode == 0 and [line.split()[1] for line in done.stdout.splitlines()] == [
        "2.11.0"
    ]
    refused = _run("2.9.0", "--dry-run", TORCH_MATRIX_VENVS=str(tmp_path))
    assert refused.returncode == 2
    assert "2.9.0 is not in the matrix" in refused.stderr


def test_the_marker_selects_the_torch_dependent_tests_and_nothing_else():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "torch_matrix",
            "tests/record/test_predictions_real.py",
            "tests/scenario/test_library.py",
            "tests/cli/test_color.py",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert any(i.startswith("tests/record/test_predictions_real.py::") for i in ids)
    assert [i for i in ids if i.startswith("tests/scenario/")] == [
        "tests/scenario/test_library.py::test_the_whole_library_passes_check"
    ]
    assert not [i for i in ids if i.startswith("tests/cli/")]


def test_a_release_without_room_to_install_is_reported_not_tested_and_leaves_nothing(tmp_path):
    done = _run("2.10.0", TORCH_MATRIX_VENVS=str(tmp_path), TORCH_MATRIX_NEED_MB="999999999")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "torch 2.10.0 NOT TESTED: only " in done.stderr
    assert "installing torch needs 999999999 MB" in done.stderr
    assert "torch 2.10.0: NOT TESTED" in done.stdout  # the summary says it too
    assert not list(tmp_path.iterdir())


def test_a_release_pip_cannot_install_is_reported_not_tested_and_its_venv_removed(tmp_path):
    # no index and no configuration: pip finds no torch 2.10.0 and fails at once
    done = _run(
        "2.10.0",
        TORCH_MATRIX_VENVS=str(tmp_path),
        TORCH_MATRIX_NEED_MB="0",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(tmp_path),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "torch 2.10.0 NOT TESTED: pip could not install it" in done.stderr
    assert not list(tmp_path.iterdir())
