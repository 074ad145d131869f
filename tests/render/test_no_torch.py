"""`tensortrace render` re-renders a saved trace where torch cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tensortrace.cli.common import OUTPUT_FORMATS

from conftest import cli

RENDER_FORMATS = [f for f in OUTPUT_FORMATS if f != "jsonl"]

NO_TORCH = (
    "import sys; sys.modules['torch'] = None; "
    "from tensortrace.cli.main import main; "
    "sys.argv = ['tensortrace', 'render', sys.argv[1], '--format', sys.argv[2]]; "
    "main()"
)


@pytest.fixture(scope="module")
def saved_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("no-torch") / "trace.json"
    result = cli(
        "run", "detach-vs-data", "--format", "json", "-o", str(path)
    )  # recording needs torch: this process
    assert result.returncode == 0, result.stderr
    return path


def test_torch_really_cannot_be_imported():
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['torch'] = None; import torch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr


@pytest.mark.parametrize("fmt", RENDER_FORMATS)
def test_render_without_torch(saved_trace, fmt):
    data = json.loads(saved_trace.read_text(encoding="utf-8"))
    traces = data["traces"] if "traces" in data else [data]
    expected = 0 if all(t["passed"] for t in traces) else 1
    assert expected == 0  # detach-vs-data behaves as it declares, in both variants
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(saved_trace), fmt],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == expected, result.stderr
    assert result.stdout.strip(), f"render --format {fmt} printed nothing"
    if fmt == "json":
        assert json.loads(result.stdout) == data
