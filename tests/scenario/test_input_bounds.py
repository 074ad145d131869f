"""A small file cannot make the tool's own process work or grow out of proportion to it.

Aliases and merge keys, placeholders and numbers are where a text of a few
kilobytes could ask for gigabytes or hours; each is refused with one line and
exit status 2, quickly, before anything runs.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

from conftest import cli
from tensortrace.errors import ScenarioError
from tensortrace.scenario import load_scenario, loads_scenario


def merge_bomb(levels: int = 39) -> str:
    """About 1.1 KB: each step merges the one before twice, so step N holds 2**N mappings."""
    lines = ["title: merges", "steps:", "  - &a0 {run: x = 1}"]
    lines += [f"  - &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_the_merge_bomb_is_small() -> None:
    assert len(merge_bomb()) < 1200


def test_nested_merge_keys_are_refused_fast_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(merge_bomb(), encoding="utf-8")
    began = cpu_seconds()
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert cpu_seconds() - began < 1.0
    assert "expand it to over 1,000,000 values" in str(info.value)
    assert f"{path}:" in str(info.value)


@pytest.mark.parametrize("command", ["run", "check"])
def test_every_command_that_reads_a_scenario_refuses_the_merge_bomb(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(merge_bomb(), encoding="utf-8")
    began = time.monotonic()
    result = cli(command, str(path))
    assert time.monotonic() - began < 60  # before the fix: 2**39 calls, hours
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "expand it to over 1,000,000 values" in result.stderr


@pytest.mark.parametrize(
    "text, problem",
    [
        (
            "title: t\nsteps:\n  - &s {run: x = 1, <<: *s}\n",
            "3:5: this node holds an alias of itself",
        ),
        ("title: t\nsteps: &s [x = 1, *s]\n", "2:8: this node holds an alias of itself"),
        (
            "title: t\nsteps:\n  - &a {run: x = 1, note: {<<: *a}}\n",
            "3:5: this node holds an alias of itself",
        ),
    ],
)
def test_a_node_that_merges_or_holds_itself_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text, path="s.yaml")
    assert f"s.yaml:{problem}" in str(info.value)


def test_merge_keys_nested_past_the_reader_depth_are_refused() -> None:
    """A chain of 300 merges is few values, but the reader follows it level by level."""
    lines = ["title: t", "steps:", "  - &a0 {run: x = 1}"]
    lines += [f"  - &a{i} {{<<: *a{i - 1}, note: n{i}}}" for i in range(1, 300)]
    with pytest.raises(ScenarioError, match=r"merge keys \('<<'\) nest over 64 levels deep"):
        loads_scenario("\n".join(lines) + "\n", path="s.yaml")


def test_merge_keys_as_people_write_them_still_work() -> None:
    scenario = loads_scenario(
        "title: t\nsteps:\n"
        "  - &base {run: 'x = torch.ones(2)', note: shared}\n"
        "  - <<: *base\n    run: 'y = x + 1'\n"
        "  - {<<: [*base], run: 'z = x * 2'}\n",
        path="s.yaml",
    )
    assert [s.run.text for s in scenario.steps] == ["x = torch.ones(2)", "y = x + 1", "z = x * 2"]
    assert [s.note for s in scenario.steps] == ["shared", "shared", "shared"]


def test_a_five_thousand_digit_seed_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text("title: t\nseed: " + "9" * 5000 + "\nsteps: [x = 1]\n", encoding="utf-8")
    for command in ("run", "check"):
        result = cli(command, str(path))
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and "ValueError" not in result.stderr
        assert f"{path}:2:7: this number is 5,000 characters long" in result.stderr


def test_a_long_number_anywhere_in_the_file_is_refused() -> None:
    with pytest.raises(ScenarioError, match="3:10: this number is 301 characters long"):
        loads_scenario("title: t\nsteps:\n  - run: " + "1." + "0" * 299 + "\n", path="s.yaml")


def _notebook_with_a_long_number(tmp_path: Path) -> Path:
    cell = {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": []}
    cell["execution_count"] = 12345
    data = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "long.ipynb"
    path.write_text(json.dumps(data).replace("12345", "9" * 5000), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["run", "convert", "check"])
def test_a_five_thousand_digit_number_in_a_notebook_is_one_line_and_exit_2(
    tmp_path: Path, command: str
) -> None:
    path = _notebook_with_a_long_number(tmp_path)
    result = cli(command, str(path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "ValueError" not in result.stderr
    assert "the notebook's JSON holds a number 5,000 digits long" in result.stderr


def placeholder_bomb(value_length: int, uses: int) -> str:
    value = "x" * value_length
    run = "y = len('" + "${v}" * uses + "')"
    return (
        f"title: t\nvariants:\n  a: {{v: '{value}'}}\n  b: {{v: '{value}'}}\n"
        f'steps:\n  - run: "{run}"\n'
    )


def test_placeholders_that_make_too_much_code_are_refused_before_they_are_filled() -> None:
    text = placeholder_bomb(100_000, 200)  # 200 KB of file, 20 MB of code in each variant
    began = cpu_seconds()
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text, path="s.yaml")
    assert cpu_seconds() - began < 2.0
    assert "s.yaml:6:11: placeholders make too much code: in variant 'a' this text would be" in str(
        info.value
    )


def test_placeholders_are_bounded_over_all_variants_together() -> None:
    value = "x" * 50_000
    variants = "".join(f"  v{i}: {{v: '{value}'}}\n" for i in range(32))
    steps = "".join(f"  - run: \"y = len('{'${v}' * 15}')\"\n" for _ in range(40))
    with pytest.raises(ScenarioError, match="filled-in code would be over 16,777,216 characters"):
        loads_scenario(f"title: t\nvariants:\n{variants}steps:\n{steps}", path="s.yaml")


def test_placeholders_within_the_bounds_are_filled_as_before() -> None:
    scenario = loads_scenario(placeholder_bomb(10, 3), path="s.yaml")
    [a, _] = scenario.resolved()
    assert a.steps[0].run.text == "y = len('" + "x" * 30 + "')"
