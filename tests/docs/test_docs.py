"""Generated documentation is current."""

from __future__ import annotations

from tensortrace.scenario.library import bundled_scenarios, scenarios_markdown

from conftest import REPO


def test_scenarios_page_is_current():
    page = REPO / "docs" / "scenarios.md"
    assert page.is_file(), (
        "docs/scenarios.md is missing; generate it: tensortrace list --markdown > docs/scenarios.md"
    )
    expected = scenarios_markdown(bundled_scenarios())
    assert page.read_text(encoding="utf-8") == expected, (
        "docs/scenarios.md is out of date with scenarios/; regenerate it: tensortrace list"
        " --markdown > docs/scenarios.md"
    )
