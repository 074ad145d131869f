"""--color, FORCE_COLOR, an unknown -o suffix, shell completion and the README's import rule."""

from __future__ import annotations

import re

from conftest import REPO, cli
from tensortrace.sandbox.policy import IMPORT_RULE

ESC = "\x1b["


def test_color_always_colours_a_pipe_and_never_does_not():
    assert ESC in cli("run", "detach", "--color", "always").stdout
    assert ESC not in cli("run", "detach", "--color", "never", env={"FORCE_COLOR": "1"}).stdout


def test_force_color_colours_a_pipe_and_no_color_wins_over_nothing():
    assert ESC in cli("run", "detach", env={"FORCE_COLOR": "1", "NO_COLOR": None}).stdout
    assert ESC not in cli("run", "detach", env={"FORCE_COLOR": None, "NO_COLOR": None}).stdout
    assert ESC not in cli("run", "detach", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout


def test_an_unknown_color_word_is_refused():
    result = cli("run", "detach", "--color", "sometimes")
    assert result.returncode == 2 and "use auto, always or never" in result.stderr


def test_an_unknown_output_suffix_is_refused_with_the_known_ones(tmp_path):
    out = tmp_path / "out.pdf"
    result = cli("run", "detach", "-o", str(out))
    assert result.returncode == 2 and not out.exists()
    assert (
        "no format writes .pdf files" in result.stderr
        and ".html" in result.stderr
        and ".json" in result.stderr
    )
    assert cli("run", "detach", "-o", str(tmp_path / "out.txt")).returncode == 0


def test_completion_offers_bundled_scenarios_and_formats():
    from tensortrace.cli.options import _complete_format, _complete_scenario

    assert "detach-vs-data" in _complete_scenario("detach-")
    assert all(n.startswith("detach") for n in _complete_scenario("detach"))
    assert _complete_format("js") == ["json", "jsonl"]


def test_the_readme_names_the_imports_safe_mode_allows_as_the_tool_does():
    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text(encoding="utf-8"))
    assert IMPORT_RULE.replace("only ", "imports only of ") in readme
