"""The fast tier's lists in conftest.py name test files and tests that exist, so that a
renamed or moved module cannot drop out of the slow mark (and into the fast tier) unseen."""

from __future__ import annotations

import ast
import re

from conftest import SLOW_MODULES, SLOW_TESTS, TESTS, TORCH_MODULES, TORCH_TESTS


def test_every_slow_module_exists() -> None:
    assert [name for name in sorted(SLOW_MODULES) if not (TESTS / name).is_file()] == []


def test_every_torch_matrix_module_exists() -> None:
    assert [name for name in sorted(TORCH_MODULES) if not (TESTS / name).is_file()] == []


def test_every_slow_test_names_a_test_of_its_file() -> None:
    missing = []
    for entry in SLOW_TESTS + TORCH_TESTS:
        file, prefix = entry.split("::")
        tree = ast.parse((TESTS / file).read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        function = prefix.split("[")[0]  # a prefix may name some parameters
        if not any(name.startswith(function) for name in names):
            missing.append(entry)
    assert missing == []


def test_test_files_sit_in_the_folder_of_their_stage() -> None:
    """Only the shape tests stay at the top; a stage's tests live in its folder."""
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert top == ["test_architecture.py", "test_tiers.py"]


def test_the_readme_names_both_tiers_and_ci_runs_the_whole_suite() -> None:
    readme = (TESTS.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Development") :]
    commands = section[: section.index("```\n", section.index("```sh") + 5)]
    ci = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    [whole] = [line for line in ci if line.startswith("python -m pytest")]
    assert "-m" not in whole.split()[3:] and " tests/" not in whole, whole  # no tier, no subset
    assert 'python -m pytest -n auto -m "not slow"' in commands
    assert "python -m pytest -n auto " in commands
    assert {"ruff check .", "ruff format --check ."} <= set(ci)


def test_every_test_file_the_docs_and_code_name_exists() -> None:
    """docs/, the README and the package's docstrings point readers at the tests that show
    a promise; a moved test module must not leave them pointing at nothing."""
    root = TESTS.parent
    texts = [root / "README.md", root / "pyproject.toml", *(root / "docs").glob("*.md")]
    texts += [*(root / "tensortrace").rglob("*.py"), *(root / "tensortrace").rglob("*.yaml")]
    named = {
        (path.relative_to(root).as_posix(), found)
        for path in texts
        for found in re.findall(r"tests/[\w/]*test_\w+\.py", path.read_text(encoding="utf-8"))
    }
    assert sorted((where, found) for where, found in named if not (root / found).is_file()) == []
