"""The HTML page in a real browser: headless Chromium, driven by Playwright.

Pages of bundled scenarios are made with ``tensortrace run NAME -o NAME.html``
and opened as ``file://`` URLs. Every test also checks that the page logged
no error and asked for nothing but itself (every request is recorded, and
any other one refused).

The browser is the system's Chromium (Debian: ``apt-get install -y chromium``),
never one downloaded by Playwright; ``TENSORTRACE_CHROMIUM`` names another
executable. Without Playwright's package or a Chromium, these tests skip and
say what to install. ``TENSORTRACE_REGEN_GOLD=1`` also rewrites the README's
screenshot, ``docs/html-detach.png``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO, cli, write_scenario
from tensortrace.render.facts import all_steps, shown_names, tensors_by_name
from tensortrace.render.json import traces_from_dict
from tensortrace.render.layout import step_wanted

SCENARIOS = ("detach", "views", "detach-vs-data", "saved-tensors")
SCREENSHOT = REPO / "docs" / "html-detach.png"
HOSTILE = "</script><script>alert(1)</script>"


def chromium() -> str:
    for candidate in (os.environ.get("TENSORTRACE_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return ""


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the browser tests need Playwright's Python package: pip install -e '.[test]'")
    path = chromium()
    if not path:
        pytest.skip(
            "the browser tests need Chromium: apt-get install -y chromium "
            "(or set TENSORTRACE_CHROMIUM to a Chromium executable)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Dict[str, Path]:
    """``tensortrace run NAME -o NAME.html`` for each scenario, once."""
    folder = tmp_path_factory.mktemp("pages")
    made = {}
    for name in SCENARIOS:
        out = folder / f"{name}.html"
        result = cli("run", name, "-o", str(out))
        assert result.returncode == 0, result.stderr
        made[name] = out
    return made


class Visit:
    """A page opened in its own browser context, with what it logged and requested."""

    def __init__(self, browser, path: Path, fragment: str = "", viewport=None) -> None:
        self.url = path.resolve().as_uri()
        self.errors: List[str] = []
        self.requests: List[str] = []
        self.dialogs: List[str] = []
        self.context = browser.new_context(viewport=viewport or {"width": 1100, "height": 800})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on(
            "console", lambda m: m.type in ("error", "warning") and self.errors.append(m.text)
        )
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.goto(self.url + fragment)

    def _route(self, route) -> None:
        url = route.request.url
        self.requests.append(url)
        if url.split("#")[0] == self.url:
            route.continue_()
        else:
            route.abort()

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def step(self) -> str:
        return self.page.evaluate("document.body.dataset.step")

    def visible_steps(self) -> List[str]:
        return self.page.eval_on_selector_all(
            "section.tt-step", "els => els.filter(e => e.offsetParent !== null).map(e => e.id)"
        )

    def close(self) -> None:
        assert self.errors == [], self.errors
        assert [u.split("#")[0] for u in self.requests] == [self.url], self.requests
        assert self.dialogs == []
        self.context.close()


def traces_of(page_path: Path):
    """The traces embedded in a page, read back as the model."""
    import json
    import re

    block = re.search(
        r'<script type="application/json" id="tt-data">(.*?)</script>',
        page_path.read_text(encoding="utf-8"),
        re.S,
    ).group(1)
    return traces_from_dict(json.loads(block))


def drawn_indexes(trace) -> List[int]:
    return [s.index for s in all_steps(trace) if step_wanted(s, None)]


@pytest.mark.parametrize("name", SCENARIOS)
def test_opens_at_the_first_step_and_arrows_move(browser, pages, name):
    indexes = drawn_indexes(traces_of(pages[name])[0])
    visit = Visit(browser, pages[name])
    assert visit.step() == str(indexes[0])
    assert visit.visible_steps() == [f"step-{indexes[0]}"]
    visit.page.keyboard.press("ArrowRight")
    assert visit.step() == str(indexes[1])
    assert visit.page.evaluate("location.hash") == f"#step-{indexes[1]}"
    assert visit.visible_steps() == [f"step-{indexes[1]}"]
    visit.page.keyboard.press("ArrowLeft")
    assert visit.step() == str(indexes[0])
    visit.page.click("#tt-next")
    assert visit.step() == str(indexes[1])
    visit.close()


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_link_with_a_step_opens_that_step(browser, pages, name):
    visit = Visit(browser, pages[name], "#step-3")
    assert visit.step() == "3"
    assert visit.visible_steps() == ["step-3"]
    assert (
        visit.page.locator("nav.tt-steps a[aria-current=step]").get_attribute("href") == "#step-3"
    )
    visit.close()


def _shared_step(trace):
    """The first drawn step where a shown tensor shares its storage with another, and that tensor;
    where none does, the first shown tensor that has a storage."""
    alone = None
    for step in all_steps(trace):
        names = shown_names(step)
        states = tensors_by_name(step)
        for name in names:
            label = states[name].storage
            if label is None or not step_wanted(step, None):
                continue
            alone = alone or (step, name)
            if any(n != name and states[n].storage == label for n in names):
                return step, name
    assert alone is not None, "no shown tensor has a storage"
    return alone


@pytest.mark.parametrize("name", SCENARIOS)
def test_clicking_a_tensor_lights_up_its_storage_and_nothing_else(browser, pages, name):
    traces = traces_of(pages[name])
    trace = traces[-1]  # with variants, the last column: labels are per trace
    key = str(len(traces) - 1)
    step, tensor = _shared_step(trace)
    label = tensors_by_name(step)[tensor].storage
    visit = Visit(browser, pages[name], f"#step-{step.index}")
    section = f"section#step-{step.index}"
    visit.page.click(f'{section} td.tt-cell-name[data-trace="{key}"][data-tensor="{tensor}"]')
    lit = visit.page.eval_on_selector_all(
        f"{section} td.tt-highlight[data-tensor]", "els => els.map(e => e.dataset.tensor)"
    )
    expected = {n for n in shown_names(step) if tensors_by_name(step)[n].storage == label}
    assert set(lit) == expected
    assert len(expected) >= 2 or name == "saved-tensors"  # the others share memory somewhere
    # at every step: exactly the cells of that storage in that trace
    everywhere = visit.page.eval_on_selector_all(
        ".tt-highlight", "els => els.map(e => [e.dataset.trace, e.dataset.storage])"
    )
    cells = visit.page.eval_on_selector_all(
        f'[data-trace="{key}"][data-storage="{label}"]', "els => els.length"
    )
    assert everywhere and all(item == [key, label] for item in everywhere)
    assert len(everywhere) == cells
    visit.page.click(f'{section} td.tt-cell-name[data-trace="{key}"][data-tensor="{tensor}"]')
    assert (
        visit.page.eval_on_selector_all(".tt-highlight", "els => els.length") == 0
    )  # a second click clears
    visit.close()


@pytest.mark.parametrize("name", SCENARIOS)
def test_hovering_a_tensor_shows_its_record(browser, pages, name):
    trace = traces_of(pages[name])[0]
    first = next(s for s in all_steps(trace) if step_wanted(s, None) and s.tensors)
    state = first.tensors[0]
    visit = Visit(browser, pages[name], f"#step-{first.index}")
    assert visit.page.is_hidden("#tt-tip")
    visit.page.hover(
        f'section#step-{first.index} td.tt-cell-values[data-trace="0"][data-tensor="{state.name}"]'
    )
    assert visit.page.is_visible("#tt-tip")
    card = visit.page.inner_text("#tt-tip")
    stride = "(" + ", ".join(map(str, state.stride)) + ("," if len(state.stride) == 1 else "") + ")"
    for fact in ("shape", "stride", "offset", "dtype", "values", state.dtype, stride, state.name):
        assert fact in card, (fact, card)
    visit.close()


def test_the_detach_page_on_a_phone_and_its_screenshot(browser, pages, tmp_path):
    visit = Visit(browser, pages["detach"], "#step-2", viewport={"width": 390, "height": 800})
    width = visit.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1, width  # nothing forces the page wider than the phone
    visit.close()
    # The screenshot is of the saved trace, whose source path is the repository's, not this
    # machine's.
    saved = tmp_path / "saved.html"
    result = cli("render", str(REPO / "tests" / "gold" / "trace_detach.json"), "-o", str(saved))
    assert result.returncode == 0, result.stderr
    visit = Visit(browser, saved, "#step-2", viewport={"width": 1000, "height": 920})
    visit.page.click('section#step-2 td.tt-cell-storage[data-tensor="a"]')
    visit.page.hover('section#step-2 td.tt-cell-values[data-tensor="b"]')
    shot = tmp_path / "detach.png"
    visit.page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("TENSORTRACE_REGEN_GOLD") == "1":
        shutil.copyfile(shot, SCREENSHOT)
    visit.close()


@pytest.mark.parametrize("name", ["detach-vs-data", "copy-methods"])
def test_variant_tables_fit_a_1200_pixel_window(browser, tmp_path, name):
    """At 1,200 px no step scrolls the page sideways; each variant's table shows all its columns."""
    path = tmp_path / f"{name}.html"
    result = cli("run", name, "-o", str(path))
    assert result.returncode == 0, result.stderr
    traces = traces_of(path)
    assert len(traces) > 1  # a scenario with variants
    visit = Visit(browser, path, viewport={"width": 1200, "height": 800})
    for index in drawn_indexes(traces[0]):
        visit.page.goto(f"{visit.url}#step-{index}")
        assert visit.step() == str(index)
        assert visit.page.evaluate("document.documentElement.scrollWidth") <= 1200, index
        boxes = visit.page.eval_on_selector_all(
            "section.tt-current .tt-variant .tt-table-wrap",
            "els => els.map(e => [e.scrollWidth, e.clientWidth])",
        )
        assert len(boxes) == len(traces), index
        assert all(inner <= outer + 1 for inner, outer in boxes), (index, boxes)
    visit.close()


def test_printing_shows_every_step(browser, pages):
    visit = Visit(browser, pages["detach"])
    visit.page.emulate_media(media="print")
    assert len(visit.visible_steps()) == len(drawn_indexes(traces_of(pages["detach"])[0]))
    visit.close()


def test_hostile_scenario_text_does_not_run(browser, tmp_path):
    scenario = write_scenario(
        tmp_path,
        f"""
        title: '{HOSTILE}'
        description: '{HOSTILE} <img src=x onerror=alert(2)>'
        steps:
          - run: |
              x = "{HOSTILE}"
              d = {{"<i>k</i>": torch.ones(2)}}
              print(x)
            note: '{HOSTILE} <!-- \u2028'
          - run: raise ValueError(x)
            raises: ValueError
        """,
    )
    out = tmp_path / "hostile.html"
    result = cli("run", str(scenario), "-o", str(out))
    assert result.returncode == 0, result.stderr
    visit = Visit(browser, out)
    text = visit.page.inner_text("main")
    assert HOSTILE in text
    assert visit.page.eval_on_selector_all("script", "els => els.length") == 2
    cell = visit.page.locator("section#step-1 td.tt-cell-name", has_text="<i>k</i>")
    cell.hover()
    assert "d['<i>k</i>']" in visit.page.inner_text(
        "#tt-tip"
    )  # the record of a name that looks like markup
    visit.page.keyboard.press("ArrowRight")
    assert "ValueError" in visit.page.inner_text("section#step-2")
    visit.close()  # no dialog opened, no error logged, nothing requested


# What the page holds beyond its own markup: scripts, handlers, links out, images, frames.
_FOREIGN = """() => {
  const all = [...document.querySelectorAll('*')];
  return {
    scripts: document.scripts.length,
    handlers: all.flatMap(e => [...e.attributes]
      .filter(a => a.name.startsWith('on')).map(a => a.name)),
    links: [...document.querySelectorAll('[href]')].map(e => e.getAttribute('href'))
      .filter(h => !h.startsWith('#')),
    embedded: document.querySelectorAll('img, iframe, object, embed, form, a[target], base').length,
  };
}"""


@pytest.mark.parametrize("ints", [HOSTILE, '"><img src=x onerror=alert(1)>', "javascript:alert(1)"])
def test_a_trace_whose_every_string_and_number_is_hostile_runs_nothing(browser, tmp_path, ints):
    from hostile_traces import ALL, hostile_traces
    from render_fixtures import graph_trace, shared_graph, variant_traces
    from tensortrace.render import render

    traces = hostile_traces(list(variant_traces()) + [graph_trace(shared_graph())], ALL, ints)
    out = tmp_path / "hostile.html"
    out.write_text(render(traces, "html"), encoding="utf-8")
    visit = Visit(browser, out)
    assert visit.page.evaluate(_FOREIGN) == {
        "scripts": 2,
        "handlers": [],
        "links": [],
        "embedded": 0,
    }
    steps = visit.page.eval_on_selector_all("section.tt-step", "els => els.length")
    for _ in range(steps):
        # a table folded behind its one line (a step that changed no tensor): opened first
        visit.page.eval_on_selector_all(
            "section.tt-current details", "els => els.forEach(e => { e.open = true; })"
        )
        cell = visit.page.locator("section.tt-current td[data-tensor]").first
        if cell.count():
            cell.hover()
            cell.click()
        visit.page.keyboard.press("ArrowRight")
    assert "</script><script>alert(1)</script>" in visit.page.inner_text("main")  # shown, as text
    assert visit.page.evaluate(_FOREIGN)["handlers"] == []
    visit.close()  # no dialog opened, no error logged, nothing requested


def test_without_scripting_every_step_shows(browser, pages):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(pages["detach"].resolve().as_uri())
    shown = page.eval_on_selector_all(
        "section.tt-step", "els => els.filter(e => e.offsetParent !== null).length"
    )
    assert shown == len(drawn_indexes(traces_of(pages["detach"])[0]))
    assert page.is_hidden("#tt-next")  # the buttons need the script
    context.close()


def test_dark_and_light_follow_the_system(browser, pages):
    colours = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        page.goto(pages["detach"].resolve().as_uri())
        colours[scheme] = page.evaluate("getComputedStyle(document.body).backgroundColor")
        context.close()
    assert colours == {"light": "rgb(255, 255, 255)", "dark": "rgb(22, 24, 27)"}
