"""Safe mode runs a Python file as ``python FILE`` would, within the wall: a module beside it
imports, as the user's own code, with the same checks as the file's own code.

What the script prints is compared with what plain Python prints for the same
files; the refusals name the module's file and line; and the wall lets the
child read the module it imports, and nothing else of the folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensortrace.run import confine
from tensortrace.run.runner import Limits, run_scenario
from tensortrace.scenario import load_scenario

from conftest import cli

HELPER = """
import torch

SCALE = 2


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * SCALE


def double(x):
    return x * SCALE
"""

MAIN = """
import torch
import helper
from helper import double, Doubler


class Box:
    def __init__(self, t):
        self.t = t


a = double(torch.ones(2))
b = Doubler()(a)
box = Box(helper.double(b))
print(__name__, helper.SCALE, box.t.tolist(), type(box).__name__)
if __name__ == "__main__":
    c = box.t + 1
    print(c.tolist())
"""


def _files(folder: Path, **files: str) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    return folder / "main.py"


def _printed(trace: dict) -> str:
    steps = [trace.get("setup") or {}, *trace["steps"]]
    return "".join(step.get("stdout") or "" for step in steps)


def test_a_module_beside_the_file_imports_in_safe_mode_as_in_plain_python(tmp_path):
    main = _files(tmp_path / "proj", main=MAIN, helper=HELPER)
    plain = subprocess.run(
        [sys.executable, str(main)], capture_output=True, text=True, check=True
    ).stdout
    assert plain.startswith("__main__ 2 [8.0, 8.0] Box")
    result = cli("run", main, "--format", "json")  # safe mode, confined
    assert result.returncode == 0, result.stderr
    trace = json.loads(result.stdout)
    assert trace["environment"]["safe"] is True
    assert _printed(trace) == plain


def test_the_modules_code_gets_the_files_checks_before_anything_runs(tmp_path):
    main = _files(
        tmp_path / "proj",
        main=MAIN,
        helper=HELPER + "\n\ndef leak(t):\n    torch.save(t, 'x.pt')\n",
    )
    result = cli("run", main)
    assert result.returncode == 2
    assert f"{main.parent / 'helper.py'}:17:5: 'torch.save' is not allowed" in result.stderr
    assert result.stdout == ""


def test_the_modules_code_is_guarded_while_it_runs(tmp_path):
    main = _files(
        tmp_path / "proj",
        main="import torch\nfrom helper import sneak\nsave = sneak()\n",
        helper="import torch\n\ndef sneak():\n    m = torch\n    return m.save\n",
    )
    trace = json.loads(cli("run", main, "--format", "json").stdout)
    error = trace["steps"][0]["error"]
    assert error["type"] == "SafeModeViolation" and "torch.save" in error["message"]


def test_a_package_beside_the_file_is_refused_in_safe_mode(tmp_path):
    folder = tmp_path / "proj"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    main = _files(folder, main="import torch\nimport pkg\na = torch.ones(1) * pkg.X\n")
    result = cli("run", main)
    assert result.returncode == 2 and "'import pkg' is not allowed" in result.stderr


@pytest.mark.skipif(not confine.available().complete, reason="no kernel wall on this machine")
def test_the_wall_lets_the_child_read_the_imported_module_and_nothing_else_beside_it(tmp_path):
    """Plain Python inside the wall (the Python-level checks off): the module the file
    imports is readable, the file beside it that nothing imports is not."""
    folder = tmp_path / "proj"
    main = _files(
        folder,
        main=(
            "def later():\n    import helper\n"  # imported by the code, not run here
            f"mine = open({str(folder / 'helper.py')!r}).read()\n"
            f"secret = open({str(folder / 'secret.txt')!r}).read()\n"
        ),
        helper=HELPER,
    )
    (folder / "secret.txt").write_text("top secret", encoding="utf-8")
    scenario = load_scenario(main)
    assert [m.name for m in scenario.modules] == ["helper"]
    (trace,) = run_scenario(scenario, safe=False, confine=True, limits=Limits(timeout=60))
    _, read, secret = trace.steps
    assert read.status == "ok", read.error
    assert secret.error is not None and secret.error.type == "PermissionError"
    (control,) = run_scenario(scenario, safe=False, confine=False, limits=Limits(timeout=60))
    assert [s.status for s in control.steps] == ["ok", "ok", "ok"]
