"""``tensortrace run FILE.py -- ARGS`` runs the file as ``python FILE.py ARGS`` would.

Each test runs the same script with plain Python in a new process and compares
what the script itself printed about its start: ``sys.argv``, ``__name__``,
``__file__``, ``sys.path[0]``, and a module imported from the script's folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import cli

HELPER = """
import torch

def double(x):
    return x * 2
"""

MAIN = """
import argparse
import os
import sys

import torch

from helper import double

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
start = [sys.argv[1:], __name__, os.path.basename(__file__), os.path.isabs(__file__)]
print(json.dumps(start + [sys.path[0], args.epochs]))
a = double(torch.ones(2))
print(a.tolist())

if __name__ == "__main__":
    print("main", double(a).tolist())
"""


def _project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helper.py").write_text(textwrap.dedent(HELPER), encoding="utf-8")
    main = folder / "main.py"
    main.write_text("import json\n" + textwrap.dedent(MAIN), encoding="utf-8")
    return main


def _printed(trace: dict) -> str:
    return "".join(step.get("stdout") or "" for step in [trace.get("setup") or {}, *trace["steps"]])


def test_a_trusted_script_sees_its_arguments_file_name_folder_and_modules(tmp_path):
    main = _project(tmp_path)
    plain = subprocess.run(
        [sys.executable, str(main), "--epochs", "3"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert json.loads(plain.splitlines()[0])[:2] == [["--epochs", "3"], "__main__"]
    result = cli("run", "--trust", main, "--format", "json", "--", "--epochs", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trace = json.loads(result.stdout)
    assert _printed(trace) == plain
    assert all(step["status"] == "ok" for step in trace["steps"])


def test_arguments_after_the_separator_need_one_python_file(tmp_path):
    result = cli("run", "--trust", "detach", "--", "--epochs", "3")
    assert result.returncode == 2
    assert "give exactly one .py file" in result.stderr and "Traceback" not in result.stderr


def test_a_yaml_scenario_beside_a_module_is_not_told_to_pip_install_it(tmp_path):
    """A YAML scenario does not import from its folder; the module sits there, so the
    explanation says that rather than 'pip install helper'."""
    main = _project(tmp_path)
    scenario = main.parent / "uses.yaml"
    scenario.write_text("title: uses\nsteps:\n  - from helper import double\n", encoding="utf-8")
    result = cli("run", "--trust", str(scenario), "--format", "json")
    error = json.loads(result.stdout)["steps"][0]["error"]
    assert error["type"] == "ModuleNotFoundError"
    text = json.dumps(error["explanation"])
    assert "pip install" not in text and "helper.py" in text


FALLBACKS = """
import torch
import warnings


def frozen(x):
    with torch.inference_mode():
        return x * 2


def traced(x):
    warnings.simplefilter("ignore")
    return torch.jit.trace(lambda z: z.view(2, 2) * 2, (x,))
"""

USES = """
import torch
from tools import frozen, traced

y = frozen(torch.ones(4))
c = y.clone()
c.add_(1)
tr = traced(torch.ones(4))
o = tr(torch.ones(4))
print(c._version, o.tolist())
"""


def test_the_fallbacks_see_the_code_of_an_imported_module(tmp_path):
    """torch.jit.trace and inference_mode in a module the file imports: the recording falls
    back as for the file's own code, and the results are plain PyTorch's."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "tools.py").write_text(textwrap.dedent(FALLBACKS), encoding="utf-8")
    main = folder / "uses.py"
    main.write_text(textwrap.dedent(USES), encoding="utf-8")
    plain = subprocess.run(
        [sys.executable, str(main)], capture_output=True, text=True, check=True
    ).stdout
    result = cli("run", "--trust", main, "--format", "json", "--timeout", "120")
    trace = json.loads(result.stdout)
    assert [s["status"] for s in trace["steps"]] == ["ok"] * len(trace["steps"])
    assert _printed(trace) == plain
    assert any("inference_mode" in n for n in trace["notices"])
