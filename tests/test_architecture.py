"""The shape docs/architecture.md describes, pinned: who may import what, and how big a module may grow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tensortrace"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _imports(path: Path) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_says_what_it_owns_and_stays_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if path.name != "__main__.py":
        assert ast.get_docstring(ast.parse(text)), (
            f"{path.name} opens without a docstring saying what it owns"
        )
    assert text.count("\n") <= 650, (
        f"{path.name} has {text.count(chr(10))} lines; split it by what it owns"
    )


def test_rich_is_imported_only_by_the_renderers() -> None:
    outside = [
        p.relative_to(PACKAGE)
        for p in MODULES
        if "rich" in _imports(p) and p.parent.name not in ("render", "cli")
    ]
    assert outside == []


def test_the_drawing_side_runs_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import tensortrace, tensortrace.trace, tensortrace.trace.events, tensortrace.render, tensortrace.cli.main, tensortrace.run.runner\n"
        "import tensortrace.record.explain, tensortrace.run.confine\n"
        # the explorer is a drawing side too (it imports textual, never torch)
        "import tensortrace.tui, tensortrace.tui.state, tensortrace.tui.export\n"
        "import importlib.util\n"
        "if importlib.util.find_spec('textual'): import tensortrace.tui.app, tensortrace.render.explore\n"
        "from tensortrace.render import FORMATS\n"
        "print(len(FORMATS))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
