"""The shape docs/architecture.md describes, pinned: the folders by stage, who may import what,
and how big a module may grow."""

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


# Each folder is one stage of the pipeline (docs/architecture.md); a stage may import only the
# stages listed here, so the layers read from top to bottom and no two folders import each other.
# The root's own modules: errors and version (anyone), output (files the user named).
SHARED = {"errors", "version"}
ALLOWED = {
    "trace": set(),
    "scenario": {"trace"},
    "sandbox": set(),
    "record": {"trace", "scenario", "sandbox"},
    "run": {"trace", "scenario", "sandbox", "record"},
    "render": {"trace"},
    "output": set(),
    "errors": set(),
    "version": set(),
    "cli": {"trace", "scenario", "run", "render", "output", "doctor", "tui"},
    "tui": {"trace", "render", "output"},
    "doctor": {"trace", "scenario", "render", "output"},
    # the integrations meet users in their own code: they may use every stage
    "api": {"trace", "scenario", "record", "run", "render"},
    "snooper": {"trace", "scenario", "record", "render", "output", "api"},
    "jupyter": {"trace", "scenario", "record", "run", "render", "api", "snooper"},
    "__main__": {"cli", "trace"},
    "__init__": {"trace", "render", "jupyter", "api", "scenario", "snooper", "doctor"},
}


def _stage(dotted: str) -> str:
    """The stage a module belongs to: its folder under tensortrace/, or its own name at the root."""
    parts = dotted.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set:
    """Every tensortrace module ``path`` imports, at any depth of its code (lazy imports too)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                found.add(target)
            else:
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensortrace."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tensortrace."))
    return found


def test_the_package_is_folders_by_stage_and_the_root_holds_only_integrations() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {
        "trace",
        "scenario",
        "sandbox",
        "record",
        "run",
        "render",
        "cli",
        "tui",
        "doctor",
    }
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == {
        "__init__",
        "__main__",
        "api",
        "snooper",
        "jupyter",
        "errors",
        "version",
        "output",
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_stage_imports_only_the_stages_below_it(path: Path) -> None:
    stage = _stage(_module(path)) if path.parent != PACKAGE else path.stem
    allowed = ALLOWED[stage] | SHARED | {stage}
    wrong = sorted(m for m in _imported(path) if m != "tensortrace" and _stage(m) not in allowed)
    assert wrong == [], f"{path.relative_to(PACKAGE)} ({stage}) may not import {wrong}"


def test_no_module_imports_a_private_name_of_another_module() -> None:
    crossing = []
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if (
                id(node) not in typing_only
                and isinstance(node, ast.ImportFrom)
                and (node.level or "tensortrace" in (node.module or ""))
            ):
                crossing += [
                    f"{path.relative_to(PACKAGE)}: {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert crossing == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_says_what_it_owns_and_stays_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if path.name != "__main__.py":
        assert ast.get_docstring(ast.parse(text)), (
            f"{path.name} opens without a docstring saying what it owns"
        )
    # 500 lines is where to look for a second concept to split out; 700 is the hard limit,
    # so that a module is split by what it owns, never only to meet a count
    assert text.count("\n") <= 700, (
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
        "import tensortrace, tensortrace.trace, tensortrace.trace.events, tensortrace.render\n"
        "import tensortrace.cli.main, tensortrace.run.runner, tensortrace.run.confine\n"
        "import tensortrace.record.explain, tensortrace.scenario, tensortrace.scenario.loader\n"
        "import tensortrace.sandbox, tensortrace.doctor, tensortrace.output\n"
        # the explorer is a drawing side too (it imports textual, never torch)
        "import tensortrace.tui, tensortrace.tui.state, tensortrace.tui.export\n"
        "import importlib.util\n"
        "if importlib.util.find_spec('textual'):\n"
        "    import tensortrace.tui.app, tensortrace.render.explore\n"
        "from tensortrace.render import FORMATS\n"
        "print(len(FORMATS))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
