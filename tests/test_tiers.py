"""The fast tier's lists in conftest.py name test files and tests that exist, so that a
renamed or moved module cannot drop out of the slow mark (and into the fast tier) unseen."""

from __future__ import annotations

import ast

from conftest import SLOW_MODULES, SLOW_TESTS, TESTS


def test_every_slow_module_exists() -> None:
    assert [name for name in sorted(SLOW_MODULES) if not (TESTS / name).is_file()] == []


def test_every_slow_test_names_a_test_of_its_file() -> None:
    missing = []
    for entry in SLOW_TESTS:
        file, prefix = entry.split("::")
        tree = ast.parse((TESTS / file).read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        if not any(name.startswith(prefix) for name in names):
            missing.append(entry)
    assert missing == []


def test_test_files_sit_in_the_folder_of_their_stage() -> None:
    """Only the shape tests stay at the top; a stage's tests live in its folder."""
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert top == ["test_architecture.py", "test_tiers.py"]
